"""A child for the supervisor's tests: it counts its starts in a file, reports each one on
a Unix socket, then does what its plan says for that start: `run` (until its stdin
closes or a signal ends it) or exit with a status. The plan's last step repeats.

    python fake_child.py REPORT_SOCKET COUNT_FILE run,2,run
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path


def main(report: str, count: str, plan: str) -> int:
    counter = Path(count)
    start = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(start))
    steps = plan.split(",")
    step = steps[min(start, len(steps)) - 1]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(report)
        sock.sendall(f"{start}\n".encode())
    if step == "run":
        sys.stdin.read()
        return 0
    return int(step)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
