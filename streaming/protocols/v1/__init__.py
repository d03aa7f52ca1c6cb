"""SenseStream's own WebSocket protocol (v1)."""
