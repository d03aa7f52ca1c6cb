"""`engine_url`: where a server's engine runs.

`local` (the default) builds it in this process. `unix:PATH[,PATH…]` attaches to engine
processes on this host (`python -m server.engines.process --socket PATH`), one per
socket. `ray://auto` attaches to the Serve replicas of the Ray cluster this host belongs
to (the server becomes a Ray driver); `ray://HOST:PORT` does so through Ray Client from
outside the cluster. `?app=NAME` names the replicas' Serve application when it is not
`sensestream`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from engine.remote.messages import DEFAULT_APP

USAGE = "engine_url must be 'local', 'unix:PATH[,PATH…]', 'ray://auto' or 'ray://HOST:PORT'"


@dataclass(frozen=True, slots=True)
class RayAddress:
    """What `ray.init` takes (`auto` or `ray://HOST:PORT`), and the Serve application."""

    address: str
    app: str = DEFAULT_APP

    def __str__(self) -> str:
        return f"{self.address} (app {self.app})"


@dataclass(frozen=True, slots=True)
class UnixSockets:
    """The sockets of engine processes on this host, one engine each."""

    paths: tuple[str, ...]

    def __str__(self) -> str:
        return "unix:" + ",".join(self.paths)


def parse_engine_url(url: str) -> RayAddress | UnixSockets | None:
    """None for `local`; the sockets for `unix:…`; a Ray address for `ray://…`;
    ValueError for anything else."""
    if url == "local":
        return None
    if url.startswith("unix:"):
        paths = tuple(url.removeprefix("unix:").split(","))
        if not all(paths):
            raise ValueError(f"{USAGE}; got {url!r}")
        return UnixSockets(paths)
    parts = urlsplit(url)
    if parts.scheme != "ray" or not parts.netloc or parts.path not in ("", "/"):
        raise ValueError(f"{USAGE}; got {url!r}")
    apps = parse_qs(parts.query).get("app", [DEFAULT_APP])
    address = "auto" if parts.netloc == "auto" else f"ray://{parts.netloc}"
    return RayAddress(address, apps[-1])
