"""Token confidence on the demo model, and its cost: tools/bench/confidence/cli.py says
how it is measured; scripts/bench_confidence.py runs it."""
