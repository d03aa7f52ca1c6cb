"""Per-session, sans-I/O streaming core."""
