"""Genesys' own AudioHook API test suite, run against this server's `/audiohook`.

Genesys publishes a reference implementation of AudioHook with a jest suite that plays a
client against any server (`purecloudlabs/audiohook-reference-implementation`:
`test/audiohook-api-messages.test.ts`, configured by `testconfig.cfg`). Given a checkout
of it, this starts `python -m server` on a free port with a fresh API key and client
secret (so every handshake is signed and verified), points the suite's config at it, runs
the suite, and puts the config back. Nothing is fetched at run time; `--install` first
resolves the suite's npm dependencies afresh (its lockfiles name Genesys' private
registry, so they are set aside), which needs the npm registry once.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


def run_suite(reference: Path, server_args: Sequence[str], jest_args: Sequence[str]) -> int:
    """Start the server, run the suite against it; jest's exit code."""
    api_key, client_secret = credentials()
    args = ("--api-keys", f"genesys:{api_key}", "--audiohook-client-secret", client_secret)
    spec = ServerSpec(args=(*args, *server_args), cwd=Path(__file__).resolve().parent.parent)
    with SpawnedServer(spec) as server:
        server.wait_ready()
        url = server.url.removesuffix("/ws") + "/audiohook"
        print(f"server ready at {url}", flush=True)
        with suite_config_file(reference, suite_config(url, api_key, client_secret)):
            command = ["npx", "jest", "--verbose", SUITE, *jest_args]
            return subprocess.run(command, cwd=reference, check=False).returncode


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
    return code
