"""scripts/bench.py: how many live streams one server holds, one job per module.

The live load itself (`corpus`, `plan`, `load`, `scrape`, `latency`, `server_load`,
`targets`) is also what `tools.bench.calls` drives its calls with. `workers` runs one arm
per front-end worker count (`--workers`), optionally all on `fake_engine`, a declared-cost
engine process that decodes nothing."""
