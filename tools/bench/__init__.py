"""The benchmarks: one module, or for the big ones one subpackage, per thing measured.

`capacity` (scripts/bench.py: live streams one server holds), `calls` (stereo calls
against mono streams), `peers` (our engine and server against sherpa-onnx's), `upload`
(live latency beside a long upload), `ray` (engine replicas on Ray Serve), `engine`,
`fairness`, `int8_recipes`, `partial_hold`, `partials`, `ready`, `scheduler` and `vad`;
each has a `main(argv)` that a thin script in scripts/ calls. What they all do alike is
in `common`, once: the result JSON with the machine it came from, percentiles and medians,
rounds that take turns, plots, and the flags every command line spells the same way.
Nothing here imports more than the standard library at package level (the sherpa-onnx
worker runs `python -m tools.bench.peers.sherpa_worker` in a side environment).
"""
