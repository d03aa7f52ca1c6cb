"""The project's toolkit: what the command lines in scripts/ and the tests share.

One module per job: `client` speaks protocol v1, `speech` makes espeak-ng speech, `spawn`
starts a server and waits until it is ready, `http` reads its plain HTTP endpoints; the
benchmarks and the soak build on them. Nothing here runs at import time.
"""
