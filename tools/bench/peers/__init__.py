"""Side-by-side benchmark of our engine and sherpa-onnx on the same weights (issue 20).

`scenarios` and `sherpa_worker` import only the standard library and numpy, because the
sherpa worker runs in a side virtual environment that holds sherpa-onnx and nothing of
ours (`pip install sherpa-onnx==1.12.40` there; see docs/benchmarks.md).
"""
