"""`python -m sensestream ...`: see sensestream.cli."""

from sensestream.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
