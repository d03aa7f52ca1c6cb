"""The benchmarks' command lines: a parser described by the module's docstring, and the
flags that every benchmark spells the same way."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

API_KEY_ENV = "SENSESTREAM_BENCH_API_KEY"


def parser_for(
    doc: str | None, *, prog: str | None = None, whole: bool = False
) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first paragraph (`whole`: all of it,
    for a docstring that says what to set up once)."""
    text = (doc or "").strip()
    return argparse.ArgumentParser(prog=prog, description=text if whole else text.split("\n\n")[0])


def counts(text: str) -> list[int]:
    """'1,4,16' to [1, 4, 16]: the stream or call counts of load levels (an argparse type)."""
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("positive integers, e.g. 1,4,16")
    return values


def add_json(
    parser: argparse.ArgumentParser,
    *,
    required: bool = False,
    default: Path | None = None,
    help: str = "write the results here",
) -> None:
    """--json PATH: where the result document goes."""
    parser.add_argument("--json", type=Path, required=required, default=default, help=help)


def add_rounds(
    parser: argparse.ArgumentParser,
    default: int,
    help: str = "rounds of each configuration, taking turns",
) -> None:
    """--rounds N: how many times each configuration runs."""
    parser.add_argument("--rounds", type=int, default=default, help=help)


def add_server_args(
    parser: argparse.ArgumentParser,
    help: str = "more `python -m server` options",
) -> None:
    """--server-args "...": options for a spawned server, split as a shell would."""
    parser.add_argument("--server-args", default="", help=help)


def add_api_key(parser: argparse.ArgumentParser) -> None:
    """--api-key: sent as a Bearer token (env SENSESTREAM_BENCH_API_KEY)."""
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"sent as a Bearer token on /ws, /stats and /metrics (env {API_KEY_ENV})",
    )
