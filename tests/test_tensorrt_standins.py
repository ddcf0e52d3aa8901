"""Real ``trtwarm`` processes against stand-in ``tensorrt``, ``pynvml`` and ``onnxruntime`` modules and stand-in
TensorRT libraries (:mod:`standins`, each following the documented behaviour it stands in for): what TensorRT's
packaging, its libraries and ONNX Runtime's TensorRT EP say, and what trtwarm keys and does with it. No TensorRT
runs here (docs/tensorrt.md, What has run where)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import env_for, run_trtwarm

import standins as st
from trtwarm.builders.tensorrt.cudamajor import from_packages

SHAPE = ("--shape", "input=1x16:8x16:32x16")


def trt_key(model: Path, tmp_path: Path, env: dict[str, str], *extra: str) -> tuple[int, dict, str]:
    run = run_trtwarm("key", "--json", "--model", str(model), *SHAPE, "--cache-dir", str(tmp_path / "c"), *extra,
                      env=env)
    return run.returncode, (json.loads(run.stdout) if run.returncode == 0 else {}), run.stderr


# --- the CUDA major of a tarball or NGC TensorRT ---------------------------------------------------------------------

def test_a_tarball_tensorrt_is_keyed_by_the_cuda_major_its_libnvinfer_links(tmp_path: Path, model: Path) -> None:
    """NVIDIA's tarball installs a wheel named plain ``tensorrt``: the CUDA major comes from the ``libcudart.so.N``
    that the ``libnvinfer.so.10`` on LD_LIBRARY_PATH links (its DT_NEEDED, read from the file); a CUDA 12 and a CUDA
    13 build of one TensorRT get two keys."""
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.tensorrt(standins, dist="tensorrt")
    keys = {}
    for cuda in (12, 13):
        lib = st.libnvinfer(tmp_path / f"TensorRT-cu{cuda}" / "lib", cuda=cuda)
        code, doc, err = trt_key(model, tmp_path, {**st.pythonpath(standins), "LD_LIBRARY_PATH": str(lib.parent)})
        assert code == 0, err
        assert doc["document"]["builder"] == {"name": "tensorrt", "version": "10.16.1.11", "cuda": str(cuda)}
        assert f"runs on CUDA {cuda} (libcudart.so.{cuda} (linked by libnvinfer.so.10))" in err
        keys[cuda] = doc["key"]
    assert keys[12] != keys[13]


def test_a_tensorrt_whose_cuda_major_cannot_be_told_is_refused_with_a_hint(tmp_path: Path, model: Path) -> None:
    """A static CUDA runtime (no libcudart in DT_NEEDED), a wheel named ``tensorrt``, no CUDA package beside it and
    nothing loaded by ``import tensorrt``: exit 2 asking for ``+cuN``, never a key with ``cuda: null``. Declared, the
    key holds it; a declaration the library contradicts is refused."""
    if from_packages(10) is not None:
        pytest.skip(f"this machine has a CUDA package that names a major: {from_packages(10)}")
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.tensorrt(standins, dist="tensorrt")
    static = st.libnvinfer(tmp_path / "static" / "lib", cuda=None)
    env = {**st.pythonpath(standins), "LD_LIBRARY_PATH": str(static.parent)}
    code, _doc, err = trt_key(model, tmp_path, env)
    assert code == 2 and "cannot tell which CUDA major TensorRT 10.16.1.11 runs on" in err, err
    assert "--tensorrt-version 10.16.1.11+cu12" in err and "Traceback" not in err
    code, doc, err = trt_key(model, tmp_path, env, "--tensorrt-version", "10.16.1.11+cu13")
    assert code == 0 and doc["document"]["builder"]["cuda"] == "13", err
    linked = st.libnvinfer(tmp_path / "cu12" / "lib", cuda=12)
    code, _doc, err = trt_key(model, tmp_path, {**env, "LD_LIBRARY_PATH": str(linked.parent)}, "--tensorrt-version",
                              "10.16.1.11+cu13")
    assert code == 2 and "differs from the installed TensorRT, which runs on CUDA 12" in err


def test_a_declared_version_without_its_cuda_major_and_no_tensorrt_is_refused(tmp_path: Path, model: Path) -> None:
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    code, _doc, err = trt_key(model, tmp_path, st.pythonpath(standins), "--tensorrt-version", "10.16.1.11")
    assert code == 2 and "does not say which CUDA major" in err and "10.16.1.11+cu12" in err
    code, doc, err = trt_key(model, tmp_path, st.pythonpath(standins), "--tensorrt-version", "10.16.1.11+cu12")
    assert code == 0 and doc["document"]["builder"]["cuda"] == "12", err


# --- ONNX Runtime's TensorRT EP: its four version numbers, and no setting from the environment -----------------------

def ort_env(standins: Path, lib: Path, **extra: str) -> dict[str, str]:
    return {**st.pythonpath(standins), "LD_LIBRARY_PATH": str(lib.parent), "STANDIN_ORT_LOG": str(standins / "ort.log"),
            **extra}


def test_the_ep_key_holds_all_four_numbers_of_the_library_the_ep_loads(tmp_path: Path) -> None:
    """The build number is read from the library itself (getInferLibBuildVersion): two TensorRT builds of one
    10.16.1 get two keys, where the file name (``libnvinfer.so.10.16.1``) could not tell them apart."""
    from trtwarm.cli.demo import make_model

    model = make_model(tmp_path / "static.onnx", dynamic=False)
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.onnxruntime(standins)
    keys = set()
    for build in (11, 12):
        lib = st.libnvinfer(tmp_path / f"build{build}" / "lib", version=(10, 16, 1, build))
        run = run_trtwarm("key", "--json", "--builder", "onnxruntime", "--ort-provider", "tensorrt", "--model",
                          str(model), "--cache-dir", str(tmp_path / "c"), env=ort_env(standins, lib))
        assert run.returncode == 0, run.stderr
        builder = json.loads(run.stdout)["document"]["builder"]
        assert builder["tensorrt"] == f"10.16.1.{build}" and builder["cuda"] == "12"
        assert builder["ep_pinned_options"]["trt_fp16_enable"] == "False"
        keys.add(json.loads(run.stdout)["key"])
    assert len(keys) == 2


def test_no_ort_tensorrt_variable_changes_the_engine_or_shares_an_entry(tmp_path: Path) -> None:
    """A static-shape model, the TensorRT EP, and ORT_TENSORRT_FP16_ENABLE set differently for two starts on one
    volume: the EP is always given options (so, as ONNX Runtime documents, it reads no variable), the engine is
    built without FP16 both times, and the second start is a hit on the same, correct entry. The stand-in builds
    with FP16 when given no options: what trtwarm did before."""
    from trtwarm.cli.demo import make_model

    model = make_model(tmp_path / "static.onnx", dynamic=False)
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.onnxruntime(standins)
    lib = st.libnvinfer(tmp_path / "lib", version=(10, 16, 1, 11))
    args = ["init", "--builder", "onnxruntime", "--ort-provider", "tensorrt", "--model", str(model), "--cache-dir",
            str(tmp_path / "cache")]
    first = run_trtwarm(*args, "--handoff-dir", str(tmp_path / "h1"),
                        env=ort_env(standins, lib, ORT_TENSORRT_FP16_ENABLE="1"))
    assert first.returncode == 0 and first.summary["result"] == "built", first.stderr
    assert "ignoring ORT_TENSORRT_FP16_ENABLE" in first.stderr
    second = run_trtwarm(*args, "--handoff-dir", str(tmp_path / "h2"),
                         env=ort_env(standins, lib, ORT_TENSORRT_FP16_ENABLE="0"))
    assert second.returncode == 0 and second.summary["result"] == "hit", second.stderr
    assert second.summary["key"] == first.summary["key"]
    sessions = [json.loads(line) for line in (standins / "ort.log").read_text().splitlines()]
    assert sessions and all(s["options"]["trt_fp16_enable"] == "False" and s["settings"] == {"fp16": False}
                            for s in sessions)
    import onnx

    [node] = onnx.load(str(tmp_path / "h1" / "engine")).graph.node
    assert {a.name: a.s for a in node.attribute}["ep_cache_context"] == b'engine {"fp16": false}'
    control = subprocess.run([sys.executable, "-c", "import onnxruntime; print(onnxruntime.ep_settings({}))"],
                             capture_output=True, text=True, check=True,
                             env=env_for(ort_env(standins, lib, ORT_TENSORRT_FP16_ENABLE="1")))
    assert control.stdout.strip() == "{'fp16': True}"  # without options the stand-in EP reads the variable


# --- a cancelled build that TensorRT does not end ---------------------------------------------------------------------

def test_a_build_stuck_inside_tensorrt_after_sigterm_ends_the_process_with_143(tmp_path: Path, model: Path) -> None:
    """A real init, a real SIGTERM, and a stand-in build that ignores step_complete's False (as a TensorRT stuck in
    one tactic would): after the grace period the stop unwinds as usual (staging removed, termination message
    written, nothing published) and the process ends with os._exit(143), not with interpreter teardown under a
    running thread."""
    import os
    import signal
    import time

    from conftest import spawn, wait_until

    from trtwarm.builders.tensorrt.progress import CANCEL_GRACE_SECONDS

    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.tensorrt(standins, dist="tensorrt-cu12-bindings")
    term, calls = tmp_path / "termination-log", tmp_path / "trt.log"
    term.write_text("")
    cache = tmp_path / "cache"
    proc = spawn(["init", "--model", str(model), *SHAPE, "--cache-dir", str(cache), "--handoff-dir",
                  str(tmp_path / "h")], env={**st.pythonpath(standins), "STANDIN_TRT_BUILD": "ignore-cancel",
                                             "STANDIN_TRT_LOG": str(calls), "TRTWARM_TERMINATION_LOG": str(term)})
    wait_until(lambda: calls.exists() and "build started" in calls.read_text(), timeout=60, what="the build")
    assert any((cache / ".staging").iterdir())
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=CANCEL_GRACE_SECONDS + 60) == 143
    took = time.monotonic() - sent
    log = proc.log.read_text()  # type: ignore[attr-defined]
    assert CANCEL_GRACE_SECONDS - 1 < took < CANCEL_GRACE_SECONDS + 20, log
    assert "did not stop within 10 s of being cancelled" in log and "exiting with 143 now" in log
    assert "Fatal Python error" not in log and "Traceback" not in log
    assert not list((cache / ".staging").iterdir()) and not list((cache / "entries").iterdir())
    assert json.loads(term.read_text())["exit_code"] == 143


# --- version-compatible plugins in a batch ----------------------------------------------------------------------------

def test_two_version_compatible_plugin_builds_in_one_process_load_the_library_once(tmp_path: Path) -> None:
    """``warm --list`` builds two --version-compatible engines with one --plugin in one process. TensorRT's
    registry refuses a library whose plugins it holds ("The call will fail and return None if any of the plugins
    are already registered", IPluginRegistryDoc.load_library), as the stand-in does: the library is loaded once,
    and both engines carry it (plugins_to_serialize). Before, the second build exited 4."""
    from trtwarm.cli.demo import make_model

    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.tensorrt(standins, dist="tensorrt-cu12-bindings")
    plugin = st.plugin_library(tmp_path / "plugins")
    models = [make_model(tmp_path / "models" / f"m{seed}.onnx", seed=seed) for seed in (1, 2)]
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps({"defaults": {"version-compatible": True, "plugin": [str(plugin)],
                                                "shape": [SHAPE[1]]},
                                   "models": [{"model": str(m)} for m in models]}))
    calls = tmp_path / "trt.log"
    run = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(tmp_path / "cache"), "--json",
                      env={**st.pythonpath(standins), "STANDIN_TRT_LOG": str(calls)})
    assert run.returncode == 0, run.stderr
    assert [r["result"] for r in json.loads(run.stdout)] == ["built", "built"]
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [c for c in recorded if c[0].startswith("load_library")] == [["load_library", str(plugin)]]
    assert [c for c in recorded if c[0] == "plugins_to_serialize"] == [["plugins_to_serialize", str(plugin)]] * 2
