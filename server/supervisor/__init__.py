"""The supervisor of `--workers N`: one host's sockets, processes and host-wide state."""
