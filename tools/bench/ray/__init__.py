"""Engine replicas on Ray Serve against the in-process engine, side by side in one run.

Three targets share one workload and this machine's cores: the in-process engine (all
cores), one replica (all cores) and two replicas (half each). For each: the latency of
lone finals one after another (so `one replica - in-process` is what the Ray hop adds to
a request) and the throughput of a burst of finals from many sessions. The hop itself is
timed apart (a tick call carrying one request of 0-15 s of audio), with the bytes a
request and a result take on the wire and the gateway's CPU per request.

`workload` is what every target runs and how it is timed, `replicas` the Ray half (it
imports Ray, so it is imported only once the loopback cluster's environment is set) and
`cli` the command line, scripts/bench_ray.py.
"""
