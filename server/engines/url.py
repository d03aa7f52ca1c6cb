"""`engine_url`: where a server's engine runs.

`local` (the default) builds it in this process. `ray://auto` attaches to the Serve
replicas of the Ray cluster this host belongs to (the server becomes a Ray driver);
`ray://HOST:PORT` does so through Ray Client from outside the cluster. `?app=NAME` names
the replicas' Serve application when it is not `sensestream`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from engine.remote.messages import DEFAULT_APP


@dataclass(frozen=True, slots=True)
class RayAddress:
    """What `ray.init` takes (`auto` or `ray://HOST:PORT`), and the Serve application."""

    address: str
    app: str = DEFAULT_APP


def parse_engine_url(url: str) -> RayAddress | None:
    """None for `local`; a Ray address for `ray://…`; ValueError for anything else."""
    if url == "local":
        return None
    parts = urlsplit(url)
    if parts.scheme != "ray" or not parts.netloc or parts.path not in ("", "/"):
        raise ValueError(
            f"engine_url must be 'local', 'ray://auto' or 'ray://HOST:PORT'; got {url!r}"
        )
    apps = parse_qs(parts.query).get("app", [DEFAULT_APP])
    address = "auto" if parts.netloc == "auto" else f"ray://{parts.netloc}"
    return RayAddress(address, apps[-1])
