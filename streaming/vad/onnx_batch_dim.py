"""Give an ONNX model's inputs and outputs a symbolic batch dimension, on its raw bytes.

The FSMN-VAD export declares batch 1 on every input and output, so onnxruntime refuses
to score several streams in one call although nothing inside the graph depends on it.
Editing the declaration with the `onnx` package would cost its 0.8 s import at every
start; the declaration is a few nested protobuf fields, so this rewrites just those
(ModelProto.graph -> GraphProto.input/output -> ValueInfoProto.type -> TypeProto
.tensor_type -> shape -> first dim) and copies every other byte as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

Edit = Callable[[bytes], bytes]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# Field numbers in onnx.proto.
_MODEL_GRAPH, _GRAPH_INPUT, _GRAPH_OUTPUT = 7, 11, 12
_VALUE_TYPE, _TYPE_TENSOR, _TENSOR_SHAPE, _SHAPE_DIM, _DIM_PARAM = 2, 1, 2, 1, 2


class ProtobufError(ValueError):
    """The bytes are not the protobuf message they were taken for."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _fields(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start of the field's key, end of the field) per field."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, pos = _varint(buf, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            pos += size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ProtobufError("field runs past the message")
        yield field, wire, start, pos


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _encode_varint(field << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _payload(buf: bytes, start: int, end: int) -> bytes:
    _, pos = _varint(buf, start)  # the key
    _, pos = _varint(buf, pos)  # the length
    return buf[pos:end]


def edit_field(buf: bytes, field: int, edit: Edit, *, first_only: bool = False) -> bytes:
    """`buf` with each length-delimited `field` (or just the first) replaced by `edit` of it."""
    out = bytearray()
    done = False
    for number, wire, start, end in _fields(buf):
        if number == field and wire == _LEN and not done:
            out += _length_delimited(field, edit(_payload(buf, start, end)))
            done = first_only
        else:
            out += buf[start:end]
    return bytes(out)


def with_symbolic_batch(model: bytes, name: str = "batch") -> bytes:
    """The serialized ModelProto with every graph input's and output's first dim `name`."""

    def first_dim(shape: bytes) -> bytes:
        symbolic = _length_delimited(_DIM_PARAM, name.encode())
        return edit_field(shape, _SHAPE_DIM, lambda _dim: symbolic, first_only=True)

    def value_info(value: bytes) -> bytes:
        def tensor(t: bytes) -> bytes:
            return edit_field(t, _TENSOR_SHAPE, first_dim)

        return edit_field(value, _VALUE_TYPE, lambda ty: edit_field(ty, _TYPE_TENSOR, tensor))

    def graph(g: bytes) -> bytes:
        return edit_field(edit_field(g, _GRAPH_INPUT, value_info), _GRAPH_OUTPUT, value_info)

    return edit_field(model, _MODEL_GRAPH, graph)
