"""The raw-bytes batch-dimension edit: what the onnx package's own edit gives, byte for byte."""

from __future__ import annotations

import onnx
import pytest

from streaming.vad.fsmn import package_model_dir
from streaming.vad.onnx_batch_dim import ProtobufError, edit_field, with_symbolic_batch


def test_same_bytes_as_editing_with_the_onnx_package() -> None:
    raw = (package_model_dir() / "model.onnx").read_bytes()
    reference = onnx.load_from_string(raw)
    for value in [*reference.graph.input, *reference.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    edited = with_symbolic_batch(raw)
    assert edited == reference.SerializeToString()
    model = onnx.load_from_string(edited)
    dims = [v.type.tensor_type.shape.dim for v in [*model.graph.input, *model.graph.output]]
    assert all(d[0].dim_param == "batch" for d in dims)
    assert [len(d) for d in dims] == [
        len(v.type.tensor_type.shape.dim) for v in reference.graph.input
    ] + [len(v.type.tensor_type.shape.dim) for v in reference.graph.output]


def test_fields_other_than_the_edited_one_are_copied() -> None:
    # field 1 varint 150, field 2 bytes "ab", field 2 bytes "cd"
    message = bytes([0x08, 0x96, 0x01, 0x12, 0x02]) + b"ab" + bytes([0x12, 0x02]) + b"cd"
    edited = edit_field(message, 2, lambda payload: payload.upper(), first_only=True)
    assert edited == bytes([0x08, 0x96, 0x01, 0x12, 0x02]) + b"AB" + bytes([0x12, 0x02]) + b"cd"


def test_truncated_bytes_are_a_typed_error() -> None:
    with pytest.raises(ProtobufError):
        with_symbolic_batch(bytes([0x3A, 0x10, 0x01]))  # graph field claims 16 bytes, has 1
