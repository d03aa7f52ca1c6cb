"""Live text at pauses against whole-utterance decoding: commit latency per word, the share
of each final committed before it, final latency and WER, at real pace on one server (the
demo model on espeak speech with pauses inside its utterances).

The work is done by tools/bench/live_text.py.

Example:
    python scripts/bench_live_text.py --json benchmarks/live-text-demo.json
"""

from tools.bench.live_text import main

if __name__ == "__main__":
    raise SystemExit(main())
