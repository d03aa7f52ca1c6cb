"""Genesys' own AudioHook API test suite, run against this server's `/audiohook`.

Genesys publishes a reference implementation of AudioHook with a jest suite that plays a
client against any server (`purecloudlabs/audiohook-reference-implementation`:
`test/audiohook-api-messages.test.ts`, configured by `testconfig.cfg`). Given a checkout
of it, this starts `python -m server` on a free port with a fresh API key and client
secret (so every handshake is signed and verified), points the suite's config at it, runs
the suite, and puts the config back. Nothing is fetched at run time; `--install` first
resolves the suite's npm dependencies afresh (its lockfiles name Genesys' private
registry, so they are set aside), which needs the npm registry once.

`--reconnect` then plays the reference's own client (`client/`, a tone) to a server that
is stopped mid-call: the client must take the server's `reconnect` (it validates and logs
it: Genesys' client does not act on it yet) and then the `disconnect` of a session that
did not move, with no error. The client puts its terminal in raw mode, so it runs under
`script` (util-linux) for a pseudo-terminal.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools.spawn import ServerSpec, SpawnedServer

SUITE = "test/audiohook-api-messages.test.ts"
CONFIG = "testconfig.cfg"
#: Where npm installs what the suite needs: the root (jest, ts-jest, configparser, uuid)
#: and the client (ws, wav); the reference server's own `app/` is not needed.
NPM_DIRS = (".", "client")
LOCKFILE = "package-lock.json"


def suite_config(url: str, api_key: str, client_secret: str) -> str:
    """testconfig.cfg for this server: stereo, mono and the transcript connector on."""
    return "\n".join(
        [
            "[EndPoint]",
            f"url={url}",
            "",
            "[Authentication]",
            f"apiKey={api_key}",
            f"clientSecret={client_secret}",
            "",
            "[OpenParameters]",
            "customConfig={}",
            "language=en-US",
            "",
            "[Features]",
            "singleChannel=true",
            "doubleChannel=true",
            "transcriptionConnector=true",
            "",
        ]
    )


def credentials() -> tuple[str, str]:
    """A fresh API key (the suite's pattern: base64url characters) and client secret."""
    return secrets.token_urlsafe(24), base64.b64encode(secrets.token_bytes(32)).decode()


def install(reference: Path) -> None:
    """npm dependencies resolved afresh, the private-registry lockfiles set aside."""
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is not on PATH: install Node.js 18 or newer")
    for folder in NPM_DIRS:
        where = reference / folder
        lock = where / LOCKFILE
        if lock.exists():
            lock.rename(where / f"{LOCKFILE}.genesys")
        command = [npm, "install", "--no-audit", "--no-fund", "--no-package-lock"]
        subprocess.run(command, cwd=where, check=True)


@contextmanager
def suite_config_file(reference: Path, text: str) -> Iterator[None]:
    """The suite's config replaced by `text` while the suite runs, then put back."""
    path = reference / CONFIG
    original = path.read_bytes() if path.exists() else None
    path.write_text(text)
    try:
        yield
    finally:
        if original is None:
            path.unlink()
        else:
            path.write_bytes(original)


@dataclass(frozen=True)
class Served:
    """A server started for Genesys' client: its process, `/audiohook` URL and the
    credentials that client signs with."""

    server: SpawnedServer
    url: str
    api_key: str
    client_secret: str


@contextmanager
def serving(server_args: Sequence[str]) -> Iterator[Served]:
    """`python -m server` with a fresh API key and AudioHook client secret, once ready."""
    api_key, client_secret = credentials()
    args = ("--api-keys", f"genesys:{api_key}", "--audiohook-client-secret", client_secret)
    spec = ServerSpec(args=(*args, *server_args), cwd=Path(__file__).resolve().parent.parent)
    with SpawnedServer(spec) as server:
        server.wait_ready()
        url = server.url.removesuffix("/ws") + "/audiohook"
        print(f"server ready at {url}", flush=True)
        yield Served(server, url, api_key, client_secret)


def run_suite(reference: Path, server_args: Sequence[str], jest_args: Sequence[str]) -> int:
    """Start the server, run the suite against it; jest's exit code."""
    with serving(server_args) as served:
        url, api_key, client_secret = served.url, served.api_key, served.client_secret
        with suite_config_file(reference, suite_config(url, api_key, client_secret)):
            command = ["npx", "jest", "--verbose", SUITE, *jest_args]
            return subprocess.run(command, cwd=reference, check=False).returncode


#: What the reference client logs when it takes the server's messages of a hand-off.
RECONNECT_SEEN = ("onReconnectMessage - state=OPEN", "reason: completed")
#: How far into the call the server is stopped, and how long the call's tone lasts.
STOP_AT_S = 4.0
CALL_S = 30


def run_reconnect(reference: Path, server_args: Sequence[str]) -> int:
    """The reference client through a server stopped mid-call: 0 when it took the
    `reconnect` and the `disconnect` after it without an error, else 1."""
    with serving(server_args) as served:
        client = (
            f"npx ts-node src/index.ts --uri {shlex.quote(served.url)} "
            f"--api-key {served.api_key} --client-secret {served.client_secret} "
            f"--max-stream-duration {CALL_S}"
        )
        with subprocess.Popen(
            ["script", "-qec", client, "/dev/null"],
            cwd=reference / "client",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as played:
            time.sleep(STOP_AT_S)  # the call is under way: the server is stopped
            served.server.proc.send_signal(signal.SIGTERM)
            log, _ = played.communicate(timeout=CALL_S + 60)
    print(log)
    errors = [line for line in log.splitlines() if "ERROR" in line]
    missing = [seen for seen in RECONNECT_SEEN if seen not in log]
    if errors or missing:
        print(f"reconnect check failed: errors {errors}, not seen {missing}", file=sys.stderr)
        return 1
    print("the reference client took reconnect, then disconnect", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path, help="a checkout of Genesys' reference")
    parser.add_argument(
        "--install", action="store_true", help="first resolve the suite's npm dependencies"
    )
    parser.add_argument(
        "--server-args", default="", help='more `python -m server` options ("--model DIR")'
    )
    parser.add_argument("--jest-args", default="", help="more jest options (-t NAME)")
    parser.add_argument(
        "--reconnect", action="store_true", help="then the reference client's reconnect path"
    )
    ns = parser.parse_args(argv)
    reference: Path = ns.reference.resolve()
    if not (reference / SUITE).is_file():
        parser.error(f"{reference} is not a checkout of the reference: no {SUITE}")
    if ns.install:
        install(reference)
    if not (reference / "node_modules" / ".bin" / "jest").exists():
        parser.error("the suite's dependencies are not installed: run once with --install")
    code = run_suite(reference, shlex.split(ns.server_args), shlex.split(ns.jest_args))
    print(f"Genesys' AudioHook suite exited with {code}", file=sys.stderr)
    if ns.reconnect:
        code = code or run_reconnect(reference, shlex.split(ns.server_args))
    return code
