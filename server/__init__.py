"""The I/O shell: WebSocket and HTTP server."""
