"""One live client: its connection, outbox, socket, and the shared VAD thread."""
