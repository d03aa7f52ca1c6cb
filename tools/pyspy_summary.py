"""Summarise a py-spy `--format raw` profile: each thread's share and its busiest frames.

The command line is scripts/pyspy_summary.py.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# Frames that mean "waiting", not working, when py-spy samples with --idle. With uvloop
# the loop's wait for I/O is native code under `Runner.run`, so a sample whose last Python
# frame is `Runner.run` is the loop idle in epoll (or waiting for the GIL after it), never
# Python work: it counts as waiting.
IDLE = re.compile(
    r"\b(select|poll|epoll_wait|wait|_worker|run_forever|_run_once|acquire|Runner\.run)\b"
)


def parse(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    """(stack from thread to leaf, sample count) per line of py-spy's collapsed output."""
    out = []
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def thread_name(frame: str) -> str:
    """py-spy's `thread (123): name` or `process 1:"cmd";thread ...` -> the thread's name."""
    return frame.split(":", 1)[-1].strip().strip('"') if "thread" in frame else frame


def summarise(stacks: Sequence[tuple[list[str], int]], top: int) -> dict[str, Any]:
    total = sum(n for _, n in stacks) or 1
    threads: Counter[str] = Counter()
    busy: Counter[str] = Counter()
    leaves: dict[str, Counter[str]] = {}
    for frames, n in stacks:
        thread_frame = next((f for f in frames if f.startswith("thread")), frames[0])
        name = re.sub(r"_\d+$", "", thread_name(thread_frame))
        threads[name] += n
        leaf = frames[-1]
        if IDLE.search(leaf):
            continue
        busy[name] += n
        leaves.setdefault(name, Counter())[re.sub(r" \(.*", "", leaf)] += n
    return {
        "samples": total,
        "threads": {
            name: {
                "share_of_samples": round(count / total, 3),
                "busy_share_of_thread": round(busy[name] / count, 3) if count else 0.0,
                "top_frames": [
                    {"frame": f, "share_of_thread": round(c / count, 3)}
                    for f, c in leaves.get(name, Counter()).most_common(top)
                ],
            }
            for name, count in threads.most_common()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy record -f raw output")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    summary = summarise(parse(args.profile.read_text().splitlines()), args.top)
    text = json.dumps(summary, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0
