"""The ONNX reader without ``onnx`` (trtwarm/onnxwire.py) against the ``onnx`` package itself: the same facts for
real models (inputs, dtypes, symbolic dims, external data in initializers, sparse initializers and subgraphs), and
for mutated bytes either a WireError or the same facts as onnx (Hypothesis). A pull-only init never imports onnx."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtwarm.cli.demo import make_model
from trtwarm.onnxwire import WireError, read_model


def onnx_facts(data: bytes) -> tuple[list[Any], dict[str, int]]:
    """What trtwarm took from onnx before onnxwire (the removed trtwarm.model code, restated)."""
    import onnx

    proto = onnx.ModelProto.FromString(data)
    graph = proto.graph
    weights = {t.name for t in graph.initializer}
    inputs = []
    for value in graph.input:
        if value.name in weights:
            continue
        tt = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        inputs.append((value.name, onnx.TensorProto.DataType.Name(tt.elem_type), dims))

    def tensors(g: Any) -> list[Any]:
        out = list(g.initializer) + [t for s in g.sparse_initializer for t in (s.values, s.indices)]
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    out.append(attr.t)
                out.extend(attr.tensors)
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    out += tensors(sub)
        return out

    needed: dict[str, int] = {}
    for t in tensors(graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
            needed[info.get("location", "")] = max(needed.get(info.get("location", ""), 0), end)
    return inputs, needed


def rich_model() -> bytes:
    """Subgraphs (If), a sparse initializer, external data in all three places, an initializer listed as input,
    a fixed and a symbolic dim, an int64 input."""
    import numpy as np
    from onnx import TensorProto, external_data_helper, helper, numpy_helper

    def external(t: Any, offset: int) -> Any:
        external_data_helper.set_external_data(t, location="w.bin", offset=offset, length=64)
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        return t

    w = external(numpy_helper.from_array(np.ones((4, 4), "float32"), "w"), 0)
    inner = external(numpy_helper.from_array(np.ones((4, 4), "float32"), "inner"), 4096)
    then = helper.make_graph([helper.make_node("Constant", [], ["c"], value=inner)], "then", [],
                             [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4, 4])])
    sparse = helper.make_sparse_tensor(external(numpy_helper.from_array(np.ones(2, "float32"), "sv"), 8192),
                                       numpy_helper.from_array(np.array([0, 5], "int64"), "si"), [4, 4])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=then)], "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", 7]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 4])], [w], sparse_initializer=[sparse])
    model = helper.make_model(graph)
    return model.SerializeToString()


@pytest.mark.parametrize("kind", ["dynamic", "static", "external", "rich"])
def test_the_wire_reader_reads_what_onnx_reads(tmp_path: Path, kind: str) -> None:
    if kind == "rich":
        data = rich_model()
    else:
        path = make_model(tmp_path / "m.onnx", dynamic=kind != "static", external=kind == "external")
        data = path.read_bytes()
    model = read_model(data)
    inputs, needed = onnx_facts(data)
    assert model.inputs == inputs and model.external == needed
    assert model.nodes >= 1 and model.outputs == 1 and model.ir_version > 0
    if kind == "rich":
        assert needed == {"w.bin": 8192 + 64} and [i[0] for i in inputs] == ["cond", "ids"]
        assert inputs[1] == ("ids", "INT64", (None, 7))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_models_are_refused_or_read_as_onnx_reads_them(data: st.DataObject) -> None:
    original = bytearray(rich_model())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(original) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            original[pos] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del original[pos:pos + data.draw(st.integers(1, 8))]
        else:
            original[pos:pos] = bytes(data.draw(st.lists(st.integers(0, 255), max_size=4)))
    blob = bytes(original)
    try:
        model = read_model(blob)
    except WireError:
        return
    try:
        inputs, needed = onnx_facts(blob)
    except Exception:  # noqa: BLE001 (onnx refuses more: UTF-8 checks, unknown enum names)
        return
    assert (model.inputs, model.external) == (inputs, needed)


def test_a_pull_only_consumer_never_imports_onnx(tmp_path: Path) -> None:
    path = make_model(tmp_path / "m.onnx", external=True)
    code = ("import sys; from pathlib import Path; from trtwarm.model import inspect_uncached; "
            f"facts = inspect_uncached(Path({str(path)!r})); "
            "assert 'onnx' not in sys.modules and 'google.protobuf' not in sys.modules, sorted(sys.modules); "
            "print(facts.inputs[0].dims)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=Path(__file__).resolve().parent.parent)
    assert run.returncode == 0 and run.stdout.strip() == "(None, 16)", run.stderr
