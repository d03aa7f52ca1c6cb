"""Where the server listens, as people and clients should be told it."""

from __future__ import annotations

from server.config import ServerConfig

WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class ListenError(Exception):
    """The port cannot be bound (taken, or no permission): a one-line start-up error."""


def reachable_host(config: ServerConfig) -> str:
    """A host a person on this machine can dial (a wildcard host is not an address)."""
    host = "127.0.0.1" if config.listen.host in WILDCARDS else config.listen.host
    return f"[{host}]" if ":" in host else host


def ws_url(config: ServerConfig, port: int) -> str:
    scheme = "wss" if config.listen.certfile else "ws"
    return f"{scheme}://{reachable_host(config)}:{port}/ws"


def page_url(config: ServerConfig, port: int) -> str:
    """Where a person on this machine opens the web page."""
    scheme = "https" if config.listen.certfile else "http"
    return f"{scheme}://{reachable_host(config)}:{port}/"
