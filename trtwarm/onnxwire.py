"""Read what the key needs from an ONNX file without the ``onnx`` package: a protobuf wire-format reader of the few
ModelProto fields trtwarm uses (the IR version, the graph's nodes, outputs and inputs, and where external data
lives). Importing ``onnx`` costs 0.5-2.4 s on a small node, which a pull-only init paid on every fresh volume (the
stat cache misses) for three facts; this reads them in milliseconds.

Field numbers are onnx.proto3's (ONNX IR 3-10, stable since: protobuf field numbers are never reused). Malformed
input raises :class:`WireError`; unknown fields are skipped as protobuf does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

#: TensorProto.DataType names by number (onnx.proto3), for the input's ``dtype``
DTYPES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
          8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64",
          15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2",
          20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2",
          27: "FLOAT6E2M3", 28: "FLOAT6E3M2"}
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


class WireError(ValueError):
    """Not a protobuf message of the expected shape."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """``(field number, wire type, value)`` of every field of the message *buf*: an int for varints and fixed
    widths, a memoryview for length-delimited fields. :raises WireError:"""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise WireError("a length-delimited field runs past its message")
            yield number, wire, buf[pos:pos + length]
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise WireError("a fixed-width field runs past its message")
            yield number, wire, int.from_bytes(buf[pos:pos + size], "little")
            pos += size
        else:
            raise WireError(f"unsupported wire type {wire}")


def _subs(buf: memoryview, number: int) -> list[memoryview]:
    return [v for n, w, v in fields(buf) if n == number and w == 2 and isinstance(v, memoryview)]


def _int(buf: memoryview, number: int, default: int = 0) -> int:
    values = [v for n, w, v in fields(buf) if n == number and w == 0 and isinstance(v, int)]
    return values[-1] if values else default


def _text(buf: memoryview, number: int) -> str:
    values = _subs(buf, number)
    try:
        return bytes(values[-1]).decode() if values else ""
    except UnicodeDecodeError:
        raise WireError("a string field is not UTF-8") from None


@dataclass
class Model:
    """The facts of a ModelProto trtwarm needs."""

    ir_version: int = 0
    nodes: int = 0
    outputs: int = 0
    #: (name, dtype name, dims with None for a symbolic or absent dim) of the graph inputs that are not initializers
    inputs: list[tuple[str, str, tuple[int | None, ...]]] = field(default_factory=list)
    #: external-data location -> the bytes the model needs from it (offset + length, the largest)
    external: dict[str, int] = field(default_factory=dict)


def _tensor_external(tensor: memoryview, needed: dict[str, int]) -> None:
    """Record *tensor*'s external data, if it has any (TensorProto: 13 external_data, 14 data_location)."""
    if _int(tensor, 14) != _EXTERNAL:
        return
    info = {_text(e, 1): _text(e, 2) for e in _subs(tensor, 13)}
    try:
        end = int(info.get("offset") or 0) + int(info.get("length") or 0)
    except ValueError:
        raise WireError("an external-data offset or length is not a number") from None
    location = info.get("location", "")
    needed[location] = max(needed.get(location, 0), end)


def _graph_tensors(graph: memoryview, needed: dict[str, int], depth: int = 0) -> None:
    """External data of *graph*'s initializers (5), sparse initializers (15: values 1, indices 2) and node
    attributes (node 1 → attribute 5: t 5, g 6, tensors 10, graphs 11), subgraphs included."""
    if depth > 64:
        raise WireError("subgraphs nested too deep")
    for tensor in _subs(graph, 5):
        _tensor_external(tensor, needed)
    for sparse in _subs(graph, 15):
        for tensor in _subs(sparse, 1) + _subs(sparse, 2):
            _tensor_external(tensor, needed)
    for node in _subs(graph, 1):
        for attr in _subs(node, 5):
            for tensor in _subs(attr, 5) + _subs(attr, 10):
                _tensor_external(tensor, needed)
            for sub in _subs(attr, 6) + _subs(attr, 11):
                _graph_tensors(sub, needed, depth + 1)


def _input(value: memoryview) -> tuple[str, str, tuple[int | None, ...]]:
    """ValueInfoProto (1 name, 2 type) → TypeProto (1 tensor_type) → (1 elem_type, 2 shape) → dim (1) →
    (1 dim_value, 2 dim_param)."""
    tensor = next(iter(_subs(next(iter(_subs(value, 2)), memoryview(b"")), 1)), memoryview(b""))
    shape = next(iter(_subs(tensor, 2)), memoryview(b""))
    dims = []
    for dim in _subs(shape, 1):
        has_value = any(n == 1 and w == 0 for n, w, _v in fields(dim))
        dims.append(_int(dim, 1) if has_value else None)
    elem = _int(tensor, 1)
    return _text(value, 1), DTYPES.get(elem, str(elem)), tuple(dims)


def read_model(data: bytes) -> Model:
    """Read a serialized ModelProto (7 graph, 1 ir_version). :raises WireError:"""
    buf = memoryview(data)
    model = Model(ir_version=_int(buf, 1))
    graphs = _subs(buf, 7)
    if not graphs:
        return model
    graph = graphs[-1]
    model.nodes, model.outputs = len(_subs(graph, 1)), len(_subs(graph, 12))
    weights = {_text(t, 8) for t in _subs(graph, 5)}
    model.inputs = [i for i in (_input(v) for v in _subs(graph, 11)) if i[0] not in weights]
    _graph_tensors(graph, model.external)
    return model


__all__ = ["DTYPES", "Model", "WireError", "fields", "read_model"]
