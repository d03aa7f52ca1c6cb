"""FunASR's runtime WebSocket protocol."""
