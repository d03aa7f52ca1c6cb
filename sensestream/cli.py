"""The `sensestream` command: run the server, stream files to one, transcribe files here.

Each subcommand hands its arguments to the module that does the work, imported only when
it runs, so `sensestream --version` and `--help` load nothing heavy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

USAGE = """usage: sensestream COMMAND [ARGS...]

commands:
  serve [OPTIONS]              run the server (as `python -m server`; `serve --help`)
  stream FILE... [--url URL]   replay audio files to a server as live streams, print captions
  transcribe FILE... [OPTIONS] transcribe audio files here as the server does, a JSON line each
options:
  --version                    print the version and exit
  -h, --help                   print this help and exit
"""


def _serve(args: list[str]) -> int:
    from server.main import main

    return main(args)


def _stream(args: list[str]) -> int:
    from sensestream.stream.cli import main

    return main(args)


def _transcribe(args: list[str]) -> int:
    from sensestream.transcribe import main

    return main(args)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "serve": _serve,
    "stream": _stream,
    "transcribe": _transcribe,
}


def package_version() -> str:
    try:
        return version("sensestream")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; 2 for a missing or unknown one."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    if args and args[0] == "--version":
        print(f"sensestream {package_version()}")
        return 0
    command = COMMANDS.get(args[0]) if args else None
    if command is None:
        problem = f"unknown command {args[0]!r}" if args else "a command is needed"
        print(f"sensestream: {problem}\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(args[1:])
