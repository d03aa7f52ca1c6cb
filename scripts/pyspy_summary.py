"""Summarise a py-spy `--format raw` profile: each thread's share and its busiest frames.

The work is done by tools/pyspy_summary.py.

Example:
    py-spy record -p PID --threads --idle -r 100 -d 60 -f raw -o server.txt
    python scripts/pyspy_summary.py server.txt --json benchmarks/profile.json
"""

from tools.pyspy_summary import main

if __name__ == "__main__":
    raise SystemExit(main())
