"""Inference backends (onnxruntime, torch), how one is chosen, and ONNX export."""
