"""HTTP and WebSocket plumbing: route tables, the listener, keys, tenants, client addresses."""
