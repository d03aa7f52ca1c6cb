"""Hotword biasing on the demo model: phrase recall on sentences with unseen names, cities,
teams and things, control WER and false insertions with the whole list active, and the
decode time of a final, greedy against biased at two boosts and two beam widths.

The work is done by tools/bench/hotwords.py.

Example:
    python scripts/bench_hotwords.py --json benchmarks/hotwords-demo.json
"""

from tools.bench.hotwords import main

if __name__ == "__main__":
    raise SystemExit(main())
