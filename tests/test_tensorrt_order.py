"""The order of trtwarm's first TensorRT calls, the build-progress state under real threads, and ONNX Runtime's
TensorRT-EP key and EPContext logic. No TensorRT and no onnxruntime-gpu here: the call order is observed with a
recording stand-in for the ``tensorrt`` module that records each call and refuses to produce anything (it raises at
the first call that would need TensorRT), so nothing here pretends to build or load an engine."""

from __future__ import annotations

import gc
import json
import threading
import weakref
from pathlib import Path

import onnx
import pytest
from conftest import run_trtwarm
from onnx import TensorProto, helper

from trtwarm.builders.ort_tensorrt import (
    check_context_model,
    check_ort_for_tensorrt,
    foreign_nodes,
    libnvinfer_version,
    warmup_shapes,
)
from trtwarm.builders.tensorrt import runtime
from trtwarm.builders.tensorrt.compat import config_plan
from trtwarm.builders.tensorrt.network import BuildJob, build_plan
from trtwarm.builders.tensorrt.progress import ProgressLog
from trtwarm.config import Settings, parse_shape
from trtwarm.cli.demo import make_model
from trtwarm.errors import BuildError, ConfigError
from trtwarm.model import inspect_uncached


class Refused(Exception):
    """Raised by the stand-in at the first call that would need TensorRT to produce something."""


class ModuleRecorder:
    """Stands in for the ``tensorrt`` module at its boundary: records calls; only plugin registration succeeds."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def init_libnvinfer_plugins(self, logger: object, namespace: str) -> bool:
        self.calls.append("init_libnvinfer_plugins")
        return True

    def __getattr__(self, name: str) -> object:
        def refuse(*args: object, **kwargs: object) -> object:
            self.calls.append(name)
            raise Refused(name)

        return refuse


class Logger:
    """Any object: the logger TensorRT would keep a pointer to."""


def job(tmp_path: Path) -> BuildJob:
    plan = config_plan(Settings(model=tmp_path / "m.onnx"), 10, 16, "fp16", (9, 0))
    return BuildJob(plan=plan, model=tmp_path / "m.onnx", output=tmp_path / "engine.plan")


def test_bundled_plugins_are_registered_before_the_builder_exists_without_any_plugin_flag(tmp_path: Path) -> None:
    trt = ModuleRecorder()
    with pytest.raises(Refused):
        build_plan(trt, Logger(), job(tmp_path))
    assert trt.calls == ["init_libnvinfer_plugins", "Builder"]  # so before OnnxParser and parse_from_file


def test_bundled_plugins_are_registered_before_the_runtime_deserializes() -> None:
    trt = ModuleRecorder()
    with pytest.raises(Refused):
        runtime.deserialize(trt, Logger(), b"plan", (), host_code=False)
    assert trt.calls == ["init_libnvinfer_plugins", "Runtime"]


def test_plugins_are_registered_once_per_process_and_their_logger_is_kept_alive(tmp_path: Path) -> None:
    trt, logger = ModuleRecorder(), Logger()
    alive = weakref.ref(logger)
    for _ in range(2):
        with pytest.raises(Refused):
            runtime.deserialize(trt, logger, b"plan", (), host_code=False)
    with pytest.raises(Refused):
        build_plan(trt, Logger(), job(tmp_path))
    assert trt.calls.count("init_libnvinfer_plugins") == 1
    del logger
    gc.collect()
    assert alive() is not None  # the binding keeps a raw pointer to it: it must outlive every plugin


# --- build progress under real threads ------------------------------------------------------------------------

def test_progress_state_survives_concurrent_phases_from_several_threads() -> None:
    progress = ProgressLog()
    progress.start("Building engine", None, 4)
    start = threading.Barrier(8)
    seen: list[str] = []

    def phase(i: int) -> None:
        start.wait()
        progress.start(f"Tactic search {i}", "Building engine", 50)
        for step in range(50):
            progress.step(f"Tactic search {i}", step)
            seen.append(progress.describe())
        progress.finish(f"Tactic search {i}")

    threads = [threading.Thread(target=phase, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(line.startswith("Building engine 0/4 > Tactic search ") for line in seen)
    assert progress.describe() == "Building engine 0/4"
    progress.step("Building engine", 0)
    progress.finish("a phase that never started")
    assert progress.describe() == "Building engine 1/4"
    progress.finish("Building engine")
    assert progress.describe() == ""


# --- ONNX Runtime's TensorRT EP ----------------------------------------------------------------------------------

def _libdir(root: Path, version: str) -> Path:
    """A directory laid out like a TensorRT tar/deb install: the soname link to the versioned library."""
    root.mkdir(parents=True)
    (root / f"libnvinfer.so.{version}").write_bytes(b"\x7fELF")
    (root / f"libnvinfer.so.{version.split('.')[0]}").symlink_to(f"libnvinfer.so.{version}")
    return root


def test_the_ort_tensorrt_key_changes_with_the_tensorrt_version_and_the_ep_options(tmp_path: Path) -> None:
    from trtwarm.builders.onnxruntime import OrtBuilder

    old, new = _libdir(tmp_path / "a", "10.13.3"), _libdir(tmp_path / "b", "10.16.1")
    assert libnvinfer_version([str(tmp_path / "none"), str(new), str(old)]) == "10.16.1"

    def identity(libdir: Path, *shapes: str) -> dict[str, object]:
        s = Settings(model=tmp_path / "m.onnx", builder="onnxruntime", ort_provider="tensorrt",
                     shapes=tuple(parse_shape(x) for x in shapes), environ={"LD_LIBRARY_PATH": str(libdir)})
        return OrtBuilder(s).identity()

    first, upgraded = identity(old), identity(new)
    assert first["tensorrt"] == "10.13.3" and upgraded["tensorrt"] == "10.16.1" and first != upgraded
    profiled = identity(new, "input=1x16:8x16:32x16")
    assert profiled["ep_options"] == {"trt_profile_max_shapes": "input:32x16", "trt_profile_min_shapes": "input:1x16",
                                      "trt_profile_opt_shapes": "input:8x16"}
    assert "tensorrt" not in OrtBuilder(Settings(model=tmp_path / "m.onnx", builder="onnxruntime")).identity()


def test_tensorrt_11_needs_onnxruntime_1_27() -> None:
    with pytest.raises(ConfigError, match="needs onnxruntime 1.27"):
        check_ort_for_tensorrt("1.26.2", "11.1.0.106")
    check_ort_for_tensorrt("1.27.0", "11.1.0.106")
    check_ort_for_tensorrt("1.22.0", "10.16.1.11")
    with pytest.raises(ConfigError, match="needs onnxruntime 1.18"):
        check_ort_for_tensorrt("1.17.3", "10.0.1.6")


def test_a_dynamic_epcontext_build_runs_one_inference_at_the_opt_shapes(tmp_path: Path) -> None:
    dynamic = inspect_uncached(make_model(tmp_path / "dyn.onnx", dynamic=True)).inputs
    static = inspect_uncached(make_model(tmp_path / "static.onnx", dynamic=False)).inputs
    assert warmup_shapes(dynamic, (parse_shape("input=1x16:8x16:32x16"),)) == {"input": (8, 16)}
    assert warmup_shapes(static, ()) is None  # static shapes: the EP builds at session creation
    with pytest.raises(ConfigError, match="needs --shape for the dynamic inputs input"):
        warmup_shapes(dynamic, ())


def test_a_context_model_must_hold_the_whole_model_in_tensorrt(tmp_path: Path) -> None:
    ctx = helper.make_node("EPContext", ["input"], ["h"], name="trt0", domain="com.microsoft", embed_mode=1)
    relu = helper.make_node("Relu", ["h"], ["output"], name="relu_on_cpu")
    io = ([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])])
    assert foreign_nodes(helper.make_graph([ctx], "whole", *io)) == []
    partial = helper.make_model(helper.make_graph([ctx, relu], "partial", *io))
    onnx.save_model(partial, str(tmp_path / "partial.onnx"))
    with pytest.raises(BuildError, match=r"1 node\(s\) outside it, e.g. Relu \(relu_on_cpu\)"):
        check_context_model(tmp_path / "partial.onnx")
    with pytest.raises(BuildError, match="wrote no EPContext model"):
        check_context_model(tmp_path / "missing.onnx")


def test_ort_tensorrt_without_a_findable_tensorrt_is_a_clear_exit_2(model: Path) -> None:
    """What a user sees here (no TensorRT anywhere): the key cannot be made honest, so nothing is built."""
    run = run_trtwarm("key", "--builder", "onnxruntime", "--ort-provider", "tensorrt", "--model", str(model),
                      "--cache-dir", str(model.parent / "c"))
    assert run.returncode == 2, run.stderr
    assert "cannot tell which TensorRT ONNX Runtime will load" in run.stderr and "LD_LIBRARY_PATH" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("cuda") is not None,
                    reason="cuda-bindings is installed here")
def test_selftest_inference_asks_for_cuda_bindings_instead_of_loading_a_libcudart() -> None:
    from trtwarm.cli.selftest import _cudart

    with pytest.raises(ConfigError) as err:
        _cudart()
    assert "cuda-bindings" in err.value.message and "trtwarm[tensorrt]" in (err.value.hint or "")


def test_tensorrt_only_options_are_named_and_left_out_of_other_builders_keys(model: Path) -> None:
    base = ["key", "--builder", "onnxruntime", "--model", str(model), "--cache-dir", str(model.parent / "c"), "--json"]
    plain = run_trtwarm(*base)
    given = run_trtwarm(*base, "--strip-weights", "--calibration-cache", "calib.cache", "--layer-info", "detailed")
    assert plain.returncode == given.returncode == 0, given.stderr
    assert "ignores --calibration-cache, --strip-weights, --layer-info" in given.stderr
    assert json.loads(plain.stdout)["key"] == json.loads(given.stdout)["key"]
