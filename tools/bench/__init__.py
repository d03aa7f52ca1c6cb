"""scripts/bench.py: how many live streams one server holds, one job per module."""
