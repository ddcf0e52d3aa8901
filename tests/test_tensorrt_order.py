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
from trtwarm.config import Settings
from trtwarm.model import parse_shape
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
    """The TensorRT the EP loads (all four numbers, from the library) and the profile options are in the key, and
    so is the CUDA major: here, with a CPU onnxruntime that names none, the one the library links; a library that
    links none (and nothing else telling) is refused (exit 2), never keyed ``cuda: null``."""
    import standins as st

    from trtwarm.builders.onnxruntime import OrtBuilder

    assert libnvinfer_version([str(tmp_path / "none"), str(_libdir(tmp_path / "n", "10.16.1"))]) == "10.16.1"
    old = st.libnvinfer(tmp_path / "a", version=(10, 13, 3, 9), cuda=12)
    new = st.libnvinfer(tmp_path / "b", version=(10, 16, 1, 11), cuda=12)

    def identity(libdir: Path, *shapes: str) -> dict[str, object]:
        s = Settings(model=tmp_path / "m.onnx", builder="onnxruntime", ort_provider="tensorrt",
                     shapes=tuple(parse_shape(x) for x in shapes), environ={"LD_LIBRARY_PATH": str(libdir)})
        return OrtBuilder(s).identity()

    first, upgraded = identity(old.parent), identity(new.parent)
    assert first["tensorrt"] == "10.13.3.9" and upgraded["tensorrt"] == "10.16.1.11" and first != upgraded
    assert first["cuda"] == upgraded["cuda"] == "12"
    profiled = identity(new.parent, "input=1x16:8x16:32x16")
    assert profiled["ep_options"] == {"trt_profile_max_shapes": "input:32x16", "trt_profile_min_shapes": "input:1x16",
                                      "trt_profile_opt_shapes": "input:8x16"}
    assert "tensorrt" not in OrtBuilder(Settings(model=tmp_path / "m.onnx", builder="onnxruntime")).identity()
    static = st.libnvinfer(tmp_path / "static", cuda=None)
    with pytest.raises(ConfigError, match="cannot tell which CUDA major ONNX Runtime's TensorRT EP runs on"):
        identity(static.parent)


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


# --- cancelling a build, the logger's tail (issue 29) ---------------------------------------------------------------

CANCEL_SCRIPT = r'''
import sys, time
from trtwarm.builders.tensorrt.progress import ProgressLog, run_cancellable
from trtwarm.errors import exit_code_for
from trtwarm.init.stopping import stop_on_signals

progress, answers = ProgressLog(), []

def work():
    # NOT TensorRT: a long call that, like build_serialized_network with trtwarm's progress monitor, asks
    # step_complete after each step and gives up when it answers False
    progress.start("Building engine", None, 10 ** 9)
    step = 0
    while True:
        answers.append(progress.step("Building engine", step))
        if not answers[-1]:
            return False
        step += 1
        time.sleep(0.002)

stop_on_signals()
print("ready", flush=True)
try:
    run_cancellable(work, progress, grace=10)
except BaseException as exc:
    print(f"stopped: cancelled={progress.cancelled} last={answers[-1]} steps={len(answers)}", flush=True)
    sys.exit(exit_code_for(exc))
'''


def test_sigterm_cancels_a_build_through_step_complete_and_exits_143(tmp_path: Path) -> None:
    """A real SIGTERM to a real process: the main thread waits in Python, the signal's exception arrives there, the
    progress state turns cancelled, the next step_complete answer is False, the worker ends, exit 143. The worker is
    a Python loop standing in for TensorRT's build (which calls step_complete the same way): what is tested is
    trtwarm's side of the contract, not TensorRT's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import env_for

    proc = subprocess.Popen([sys.executable, "-c", CANCEL_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_for())
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # some steps done
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert time.monotonic() - sent < 3
    assert "stopped: cancelled=True last=False" in out and "cancelling the TensorRT build" in err


def test_a_cancelled_progress_log_answers_false_and_a_failing_build_reraises() -> None:
    progress = ProgressLog()
    progress.start("Building engine", None, 3)
    assert progress.step("Building engine", 0) is True
    progress.cancel()
    assert progress.step("Building engine", 1) is False and progress.step("no such phase", 0) is False
    from trtwarm.builders.tensorrt.progress import run_cancellable

    assert run_cancellable(lambda: 7, ProgressLog()) == 7
    with pytest.raises(BuildError, match="inside"):
        run_cancellable(lambda: (_ for _ in ()).throw(BuildError("inside")), ProgressLog())


class ILoggerBase:
    """Stands in for ``trt.ILogger`` as a base class only (our subclass calls its ``__init__``): the test exercises
    trtwarm's ``log`` method, which TensorRT would call; nothing here imitates TensorRT."""

    def __init__(self) -> None:
        pass


class Severity:
    """A severity whose conversion to int fails: what an unexpected value from the binding would do."""

    def __int__(self) -> int:
        raise KeyboardInterrupt  # as a signal's exception arriving inside log() would


def test_the_logger_keeps_a_bounded_tail_and_raises_nothing_into_tensorrt() -> None:
    from types import SimpleNamespace

    from trtwarm.builders.tensorrt.logger import TAIL_LINES, capturing_logger

    logger = capturing_logger(SimpleNamespace(ILogger=ILoggerBase), echo=0)
    for i in range(20000):
        logger.log(4 if i % 2 else 3, f"verbose {i}")  # INFO/VERBOSE: never kept
    for i in range(TAIL_LINES + 50):
        logger.log(2, f"warning {i}")
    logger.log(1, "the error")
    assert len(logger.records) == TAIL_LINES and logger.records[-1] == (1, "the error")
    assert logger.records[0] == (2, "warning 51") and logger.tail(2) == f"warning {TAIL_LINES + 49}\nthe error"
    logger.log(Severity(), "whatever")  # returns: nothing crosses back into C++
    with pytest.raises(KeyboardInterrupt):
        logger.check()  # ... and the exception is raised once TensorRT has returned
    logger.check()


# --- ONNX Runtime's TensorRT EP, third review ------------------------------------------------------------------------

def test_input_names_the_ep_profile_strings_cannot_express_are_refused(tmp_path: Path, model: Path) -> None:
    """ORT's TensorRT EP reads a profile name up to its first ':' and splits the list at every ',' (no escape)."""
    from trtwarm.builders.ort_tensorrt import ep_options

    assert ep_options((parse_shape("input=1x16:8x16:32x16"),))["trt_profile_min_shapes"] == "input:1x16"
    for name in ("x:0", "a,b"):
        with pytest.raises(ConfigError, match="cannot give a profile for the input") as err:
            ep_options((parse_shape(f"{name}=1x16:8x16:32x16"),))
        assert "rename the inputs" in (err.value.hint or "")
    libdir = _libdir(tmp_path / "lib", "10.16.1")
    run = run_trtwarm("key", "--builder", "onnxruntime", "--ort-provider", "tensorrt", "--model", str(model),
                      "--shape", "x:0=1x16:8x16:32x16", "--cache-dir", str(tmp_path / "c"),
                      env={"LD_LIBRARY_PATH": str(libdir)})
    assert run.returncode == 2 and "reads a name in trt_profile_*_shapes up to its first ':'" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_ep_key_reads_three_version_parts_from_either_source_and_the_cuda_major(tmp_path: Path) -> None:
    from trtwarm.builders.onnxruntime import OrtBuilder
    from trtwarm.builders.ort_tensorrt import _three, ort_cuda_major

    assert _three("10.16.1.11") == _three("10.16.01.11") == "10.16.1" and _three("10.7.0.post1") == "10.7.0"
    gpu_build = tmp_path / "onnxruntime"
    (gpu_build / "capi").mkdir(parents=True)
    (gpu_build / "capi" / "build_and_package_info.py").write_text(
        "package_name = 'onnxruntime-gpu'\n__version__ = '1.32.0'\ncuda_version = '12.8'\n")
    assert ort_cuda_major(gpu_build) == "12"
    assert ort_cuda_major() is None  # the CPU onnxruntime installed here has no cuda_version
    import standins as st

    # a library this process cannot load (its CUDA runtime is missing here): three numbers from its file name, the
    # CUDA major from its DT_NEEDED (11: no other test of this process has a libcudart.so.11 loaded, which the
    # loader would reuse by its soname)
    lib = st.libnvinfer(tmp_path / "lib", version=(10, 16, 1, 11), cuda=11)
    (lib.parent / "libcudart.so.11").unlink()
    s = Settings(model=tmp_path / "m.onnx", builder="onnxruntime", ort_provider="tensorrt",
                 shapes=(parse_shape("input=1x16:8x16:32x16"),), environ={"LD_LIBRARY_PATH": str(lib.parent)})
    builder = OrtBuilder(s)
    doc = builder.identity()
    assert doc["tensorrt"] == "10.16.1" and doc["cuda"] == "11"
    assert builder.load_shapes() == [{"input": (1, 16)}, {"input": (8, 16)}, {"input": (32, 16)}]
    assert builder._log_level() == 2  # the EP's warnings (a profile it could not use) are not hidden
    cpu = OrtBuilder(Settings(model=tmp_path / "m.onnx", builder="onnxruntime"))
    assert cpu.load_shapes() == [None] and cpu._log_level() == 3
