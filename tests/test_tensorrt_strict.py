"""Real ``trtwarm`` processes against the stricter stand-ins of :mod:`strict_standins` (onnxruntime-gpu as its wheel
installs it, a plugin registry that opens libraries with the dynamic loader, NVML with MIG): where trtwarm's keys
and builds must follow what the real stack does. No TensorRT runs here (docs/tensorrt.md, What has run where)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_trtwarm

import standins as st
import strict_standins as strict
from trtwarm.cli.demo import make_model

SHAPE = "input=1x16:8x16:32x16"


def ep_key(standins: Path, model: Path, tmp_path: Path, **env: str) -> tuple[int, dict, str]:
    run = run_trtwarm("key", "--json", "--builder", "onnxruntime", "--ort-provider", "tensorrt", "--model", str(model),
                      "--cache-dir", str(tmp_path / "c"), env={**st.pythonpath(standins), **env})
    return run.returncode, (json.loads(run.stdout)["document"]["builder"] if run.returncode == 0 else {}), run.stderr


# --- ONNX Runtime's TensorRT EP ----------------------------------------------------------------------------------------

def test_the_ep_key_names_the_onnxruntime_whose_files_are_imported(tmp_path: Path) -> None:
    """onnxruntime-gpu 1.20.1 installed over a CPU onnxruntime (both wheels write one ``onnxruntime`` package, as
    the CPU 1.32 here and the stand-in do): the key names 1.20.1, which ``import onnxruntime`` loads, not the other
    distribution's metadata; so TensorRT 11 under it is refused (its EP needs 1.27), not keyed as 1.32's."""
    model = make_model(tmp_path / "static.onnx", dynamic=False)
    ten = st.libnvinfer(tmp_path / "trt10", version=(10, 16, 1, 11), cuda=12)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.onnxruntime(standins, version="1.20.1")
    code, builder, err = ep_key(standins, model, tmp_path, LD_LIBRARY_PATH=str(ten.parent))
    assert code == 0, err
    assert (builder["distribution"], builder["version"], builder["tensorrt"]) == ("onnxruntime-gpu", "1.20.1",
                                                                                   "10.16.1.11")
    assert "installed together" in err
    eleven = st.libnvinfer(tmp_path / "trt11", version=(11, 1, 0, 106), cuda=13)
    newer = strict.pynvml(tmp_path / "s11", [strict.H100])
    strict.onnxruntime(newer, version="1.20.1", cuda="13.0", nvinfer=11, cudart=13)
    code, _builder, err = ep_key(newer, model, tmp_path, LD_LIBRARY_PATH=str(eleven.parent))
    assert code == 2 and "onnxruntime 1.20.1 cannot drive TensorRT 11.1.0.106" in err, err


def test_the_ep_key_names_the_libnvinfer_major_the_provider_library_links(tmp_path: Path) -> None:
    """TensorRT 10 and 11 side by side in one library directory (two Debian packages, libnvinfer10 and
    libnvinfer11): the EP loads the ``libnvinfer.so.10`` its provider library names in DT_NEEDED, so the key holds
    10.16.1.11, not the newer 11 that happens to be there; with only TensorRT 11 there, the EP cannot load, and the
    key is refused (exit 2) rather than naming a TensorRT the EP never runs."""
    model = make_model(tmp_path / "static.onnx", dynamic=False)
    both = tmp_path / "lib"
    st.libnvinfer(both, version=(10, 16, 1, 11), cuda=12)
    st.libnvinfer(both, version=(11, 1, 0, 106), cuda=13)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.onnxruntime(standins, version="1.27.0", nvinfer=10)
    code, builder, err = ep_key(standins, model, tmp_path, LD_LIBRARY_PATH=str(both))
    assert code == 0 and builder["tensorrt"] == "10.16.1.11", err
    only11 = st.libnvinfer(tmp_path / "only11", version=(11, 1, 0, 106), cuda=13)
    code, _builder, err = ep_key(standins, model, tmp_path, LD_LIBRARY_PATH=str(only11.parent))
    assert code == 2 and "no libnvinfer.so.10" in err and "Traceback" not in err, err


def test_the_ep_key_never_holds_cuda_null(tmp_path: Path) -> None:
    """An onnxruntime build whose build info names no CUDA and a TensorRT with a static CUDA runtime: the CUDA the
    provider library links decides (libcudart.so.12); where nothing names one, exit 2, never ``cuda: null``."""
    model = make_model(tmp_path / "static.onnx", dynamic=False)
    static = st.libnvinfer(tmp_path / "static", cuda=None)
    linked = strict.pynvml(tmp_path / "linked", [strict.H100])
    strict.onnxruntime(linked, cuda=None, cudart=12)
    code, builder, err = ep_key(linked, model, tmp_path, LD_LIBRARY_PATH=str(static.parent))
    assert code == 0 and builder["cuda"] == "12", err
    bare = strict.pynvml(tmp_path / "bare", [strict.H100])
    strict.onnxruntime(bare, cuda=None, cudart=None)
    code, _builder, err = ep_key(bare, model, tmp_path, LD_LIBRARY_PATH=str(static.parent))
    assert code == 2 and "cannot tell which CUDA major ONNX Runtime's TensorRT EP runs on" in err, err


#: every variable ONNX Runtime's TensorRT EP reads when it is given no options (``tensorrt_env_vars`` in
#: ``onnxruntime/core/providers/tensorrt/tensorrt_execution_provider.h``, 1.18 to 1.2x)
ORT_TENSORRT_VARIABLES = {
    "ORT_TENSORRT_MAX_PARTITION_ITERATIONS": "10", "ORT_TENSORRT_MIN_SUBGRAPH_SIZE": "5",
    "ORT_TENSORRT_MAX_WORKSPACE_SIZE": "1073741824", "ORT_TENSORRT_FP16_ENABLE": "1", "ORT_TENSORRT_INT8_ENABLE": "1",
    "ORT_TENSORRT_INT8_CALIBRATION_TABLE_NAME": "calib", "ORT_TENSORRT_INT8_USE_NATIVE_CALIBRATION_TABLE": "1",
    "ORT_TENSORRT_DLA_ENABLE": "1", "ORT_TENSORRT_DLA_CORE": "1", "ORT_TENSORRT_DUMP_SUBGRAPHS": "1",
    "ORT_TENSORRT_ENGINE_CACHE_ENABLE": "1", "ORT_TENSORRT_CACHE_PATH": "/tmp/ort-cache",
    "ORT_TENSORRT_ENGINE_CACHE_PATH": "/tmp/ort-cache", "ORT_TENSORRT_ENGINE_DECRYPTION_ENABLE": "0",
    "ORT_TENSORRT_ENGINE_DECRYPTION_LIB_PATH": "/x.so", "ORT_TENSORRT_FORCE_SEQUENTIAL_ENGINE_BUILD": "1",
    "ORT_TENSORRT_CONTEXT_MEMORY_SHARING_ENABLE": "1", "ORT_TENSORRT_LAYER_NORM_FP32_FALLBACK": "1",
    "ORT_TENSORRT_TIMING_CACHE_ENABLE": "1", "ORT_TENSORRT_FORCE_TIMING_CACHE_ENABLE": "1",
    "ORT_TENSORRT_DETAILED_BUILD_LOG_ENABLE": "1", "ORT_TENSORRT_BUILD_HEURISTICS_ENABLE": "1",
    "ORT_TENSORRT_SPARSITY_ENABLE": "1", "ORT_TENSORRT_BUILDER_OPTIMIZATION_LEVEL": "5",
    "ORT_TENSORRT_AUXILIARY_STREAMS": "0", "ORT_TENSORRT_TACTIC_SOURCES": "-CUDNN",
    "ORT_TENSORRT_EXTRA_PLUGIN_LIB_PATHS": "/x.so", "ORT_TENSORRT_PROFILE_MIN_SHAPES": "input:1x16",
    "ORT_TENSORRT_PROFILE_OPT_SHAPES": "input:2x16", "ORT_TENSORRT_PROFILE_MAX_SHAPES": "input:4x16",
    "ORT_TENSORRT_CUDA_GRAPH_ENABLE": "1", "ORT_DUMP_EP_CONTEXT_MODEL": "1", "ORT_EP_CONTEXT_EMBED_MODE": "0",
    "ORT_EP_CONTEXT_COMPUTE_CAPABILITY_ENABLE": "1", "ORT_TENSORRT_CACHE_PREFIX": "p"}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_no_ort_tensorrt_variable_reaches_the_ep_or_splits_the_key(tmp_path: Path, dynamic: bool) -> None:
    """Every ``ORT_TENSORRT_*`` variable set for one Pod and none for the next: one key (the second start is a hit
    on the entry the first built); every session the EP got had options, in the form Python's
    ``providers=[(name, {str: str})]`` takes them (the stand-in parses them as ``onnxruntime_pybind_state.cc``
    does: an unknown key or a boolean other than True/False raises), so the EP read no variable."""
    model = make_model(tmp_path / "m.onnx", dynamic=dynamic)
    lib = st.libnvinfer(tmp_path / "lib", cuda=12)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.onnxruntime(standins, version="1.27.0")
    log = tmp_path / "sessions.log"
    env = {**st.pythonpath(standins), "LD_LIBRARY_PATH": str(lib.parent), "STANDIN_ORT_LOG": str(log)}
    args = ["init", "--builder", "onnxruntime", "--ort-provider", "tensorrt", "--model", str(model), "--cache-dir",
            str(tmp_path / "cache"), *(("--shape", SHAPE) if dynamic else ())]
    first = run_trtwarm(*args, "--handoff-dir", str(tmp_path / "h1"), env={**env, **ORT_TENSORRT_VARIABLES})
    assert first.returncode == 0 and first.summary["result"] == "built", first.stderr
    second = run_trtwarm(*args, "--handoff-dir", str(tmp_path / "h2"), env=env)
    assert second.returncode == 0 and second.summary["result"] == "hit", second.stderr
    assert second.summary["key"] == first.summary["key"]
    sessions = [json.loads(line) for line in log.read_text().splitlines()]
    assert sessions and all(s["settings"] == {"fp16": False, "from": "options"} for s in sessions)
    assert all(s["options"]["trt_fp16_enable"] == "False" and s["options"]["device_id"] == "0" for s in sessions)
    assert all(("trt_profile_min_shapes" in s["options"]) == dynamic for s in sessions)


# --- the CUDA major of TensorRT from a tarball or an NGC image --------------------------------------------------------

def trt_key(standins: Path, model: Path, tmp_path: Path, **env: str) -> tuple[int, dict, str]:
    run = run_trtwarm("key", "--json", "--model", str(model), "--shape", SHAPE, "--cache-dir", str(tmp_path / "c"),
                      env={**st.pythonpath(standins), **env})
    return run.returncode, (json.loads(run.stdout)["document"]["builder"] if run.returncode == 0 else {}), run.stderr


def test_an_ngc_tensorrt_is_keyed_by_its_debian_package_in_dpkgs_database(tmp_path: Path, model: Path) -> None:
    """An NGC-style image: a wheel named plain ``tensorrt``, libnvinfer with a static CUDA runtime, and the Debian
    package ``libnvinfer10 10.16.1.11-1+cuda12.9`` in dpkg's database, found where dpkg finds it
    (``DPKG_ADMINDIR``, dpkg(1)); without it nothing tells, and the key is refused asking for ``+cuN``."""
    from trtwarm.builders.tensorrt.cudamajor import from_packages

    if from_packages(10) is not None:
        pytest.skip(f"this machine has a CUDA package that names a major: {from_packages(10)}")
    lib = st.libnvinfer(tmp_path / "lib", cuda=None)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.tensorrt(standins, dists=("tensorrt",))
    admin = tmp_path / "dpkg"
    admin.mkdir()
    (admin / "status").write_text("Package: libnvinfer10\nStatus: install ok installed\nVersion: 10.16.1.11-1+cuda12.9"
                                  "\n\nPackage: cuda-cudart-13-0\nStatus: deinstall ok config-files\nVersion: 13.0.1-1\n")
    code, builder, err = trt_key(standins, model, tmp_path, LD_LIBRARY_PATH=str(lib.parent), DPKG_ADMINDIR=str(admin))
    assert code == 0 and builder["cuda"] == "12", err
    assert "(the Debian package libnvinfer10 10.16.1.11-1+cuda12.9)" in err
    code, _builder, err = trt_key(standins, model, tmp_path, LD_LIBRARY_PATH=str(lib.parent))
    assert code == 2 and "--tensorrt-version 10.16.1.11+cu12" in err, err


def test_tensorrt_wheels_of_two_cuda_majors_leave_the_library_to_say_which(tmp_path: Path, model: Path) -> None:
    """tensorrt-cu13-bindings left behind beside tensorrt-cu12-bindings (both write the one ``tensorrt`` package):
    the distribution names cannot say whose files are there, so the library the bindings load decides (cu12),
    not the first name in trtwarm's list (cu13)."""
    lib = st.libnvinfer(tmp_path / "lib", cuda=12)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.tensorrt(standins, dists=("tensorrt-cu12-bindings", "tensorrt-cu13-bindings"))
    code, builder, err = trt_key(standins, model, tmp_path, LD_LIBRARY_PATH=str(lib.parent))
    assert code == 0 and builder["cuda"] == "12", err
    assert "several CUDA majors are installed" in err


@pytest.mark.parametrize("rpath", [False, True], ids=["runpath", "rpath"])
def test_the_cuda_major_is_read_from_the_libnvinfer_the_loader_picks(tmp_path: Path, model: Path, rpath: bool) -> None:
    """The bindings name one TensorRT directory in their DT_RUNPATH (or DT_RPATH) and LD_LIBRARY_PATH another, of
    another CUDA major: the key names the one the dynamic loader itself maps (asked here: the real ld.so loads the
    bindings in a child process), LD_LIBRARY_PATH's for DT_RUNPATH, the bindings' own for DT_RPATH (ld.so(8))."""
    import subprocess
    import sys

    cu12, cu13 = st.libnvinfer(tmp_path / "cu12", cuda=12), st.libnvinfer(tmp_path / "cu13", cuda=13)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    package = strict.tensorrt(standins, dists=("tensorrt",))
    extension = strict.bindings(package, 10, cu12.parent, rpath=rpath)
    env = {"LD_LIBRARY_PATH": str(cu13.parent)}
    probe = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(extension)!r}); "
                            "print(''.join(l for l in open('/proc/self/maps') if 'libcudart' in l).split()[-1])"],
                           capture_output=True, text=True, env=env, check=True)
    loaded = "12" if "/cu12/" in probe.stdout else "13"
    assert loaded == ("12" if rpath else "13")
    code, builder, err = trt_key(standins, model, tmp_path, **env)
    assert code == 0 and builder["cuda"] == loaded, err


# --- the GPU CUDA uses: MIG beside whole GPUs, and CUDA_VISIBLE_DEVICES naming nothing --------------------------------

def gpu_key(standins: Path, model: Path, tmp_path: Path, **env: str) -> tuple[int, dict, str]:
    run = run_trtwarm("key", "--json", "--builder", "command", "--builder-version", "t1", "--build-command",
                      "cp {model} {output}", "--device", "gpu", "--model", str(model), "--shape", SHAPE,
                      "--cache-dir", str(tmp_path / "c"), env={**st.pythonpath(standins), **env})
    return run.returncode, (json.loads(run.stdout)["document"]["device"] if run.returncode == 0 else {}), run.stderr


MIG_3G = {"uuid": "MIG-aaaa1111-2222-3333-4444-555566667777", "profile": "3g.40gb", "gi": 1, "ci": 0,
          "memory": 40 << 30}
MIG_1G = {"uuid": "MIG-bbbb1111-2222-3333-4444-555566667777", "profile": "1g.10gb", "gi": 9, "ci": 0,
          "memory": 10 << 30}


def test_a_gpu_outside_mig_mode_stays_visible_beside_one_in_it(tmp_path: Path, model: Path) -> None:
    """MIG is per GPU: beside an H100 in MIG mode (CUDA sees its MIG device, not the H100), a whole A100 is still a
    CUDA device. Named by UUID it is the key's GPU; first in PCI bus order (01 before 81) it is device 0; under
    the default FASTEST_FIRST, whether CUDA puts a MIG slice or the A100 first is not knowable: refused (exit 2).
    Before, every GPU outside MIG was dropped, and the key named the MIG slice in all three cases."""
    standins = strict.pynvml(tmp_path / "s", [strict.A100, {**strict.H100, "mig": [MIG_3G]}])
    code, device, err = gpu_key(standins, model, tmp_path, CUDA_VISIBLE_DEVICES=strict.A100["uuid"])
    assert code == 0 and device["product"] == strict.A100["name"], err
    code, device, err = gpu_key(standins, model, tmp_path, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert code == 0 and device["product"] == strict.A100["name"], err
    code, device, err = gpu_key(standins, model, tmp_path, CUDA_VISIBLE_DEVICES="MIG-aaaa1111")
    assert code == 0 and device["mig_profile"] == "3g.40gb" and device["memory_gib"] == 40, err
    code, _device, err = gpu_key(standins, model, tmp_path)
    assert code == 2 and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in err and "Traceback" not in err, err


def test_mig_devices_of_one_gpu_are_named_or_refused(tmp_path: Path, model: Path) -> None:
    """Two MIG profiles on one H100 share its PCI bus id, so not even CUDA_DEVICE_ORDER=PCI_BUS_ID orders them:
    an index is refused (exit 2); a MIG UUID (prefix) or ``MIG-GPU-<uuid>/<gi>/<ci>`` names one."""
    standins = strict.pynvml(tmp_path / "s", [{**strict.H100, "mig": [MIG_3G, MIG_1G]}])
    code, _device, err = gpu_key(standins, model, tmp_path, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert code == 2 and "MIG devices of one GPU (one PCI bus id)" in err, err
    code, device, err = gpu_key(standins, model, tmp_path, CUDA_VISIBLE_DEVICES="MIG-bbbb1111")
    assert code == 0 and device["mig_profile"] == "1g.10gb", err
    code, device, err = gpu_key(standins, model, tmp_path, CUDA_VISIBLE_DEVICES=f"MIG-{strict.H100['uuid']}/1/0")
    assert code == 0 and device["mig_profile"] == "3g.40gb", err
    # the GPU given whole (NVIDIA_VISIBLE_DEVICES=<its UUID>, mig.strategy=none) shows CUDA its MIG devices
    code, device, err = gpu_key(standins, model, tmp_path, NVIDIA_VISIBLE_DEVICES=strict.H100["uuid"],
                                CUDA_VISIBLE_DEVICES="MIG-bbbb1111")
    assert code == 0 and device["mig_profile"] == "1g.10gb", err


@pytest.mark.parametrize("value", ["2,0", "-1", "GPU-ffff", "abc,0"])
def test_cuda_visible_devices_naming_no_gpu_says_so(tmp_path: Path, model: Path, value: str) -> None:
    """CUDA ignores an invalid first entry and every entry after it, so it sees no GPU: exit 2 naming the variable
    and this container's GPUs (before: only "no GPU is visible to this container" and a hint to request one)."""
    standins = strict.pynvml(tmp_path / "s", [strict.A100, strict.H100])
    code, _device, err = gpu_key(standins, model, tmp_path, CUDA_VISIBLE_DEVICES=value)
    assert code == 2 and f"CUDA_VISIBLE_DEVICES={value!r} names none of this container's" in err, err
    assert strict.H100["uuid"] in err and "Traceback" not in err
    code, device, err = gpu_key(standins, model, tmp_path, CUDA_VISIBLE_DEVICES="GPU-8932f937,0")
    assert code == 0 and device["product"] == strict.H100["name"], err


def test_an_older_nvml_binding_keys_the_gpu(tmp_path: Path, model: Path) -> None:
    """The old ``pynvml`` package (and nvidia-ml-py before 11.515) has no MIG calls, no ``_v2`` driver query and
    no core count, and returns C strings as bytes: the GPU is keyed all the same (before: exit 1, "a bug in
    trtwarm", on the missing nvmlSystemGetCudaDriverVersion_v2)."""
    standins = strict.old_pynvml(tmp_path / "s", [strict.H100])
    code, device, err = gpu_key(standins, model, tmp_path)
    assert code == 0 and (device["product"], device["compute_capability"], device["memory_gib"]) == \
        (strict.H100["name"], "9.0", 80), err


# --- version-compatible plugins in a batch: the registry identifies creators by name, libraries by the loader ---------

def warm_plugins(tmp_path: Path, name: str, plugins: list[Path], **env: str) -> tuple[list[dict], list[list[str]], str]:
    """``warm --list`` of two version-compatible builds, one --plugin each; the rows and what TensorRT was asked."""
    lib = tmp_path / "lib"
    if not lib.exists():
        st.libnvinfer(lib, cuda=12)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.tensorrt(standins, dists=("tensorrt-cu12-bindings",))
    models = [make_model(tmp_path / "models" / f"m{seed}.onnx", seed=seed) for seed in (1, 2)]
    listing = tmp_path / f"{name}.json"
    listing.write_text(json.dumps({"defaults": {"version-compatible": True, "shape": [SHAPE]},
                                   "models": [{"model": str(m), "plugin": [str(p)]} for m, p in zip(models, plugins)]}))
    log = tmp_path / f"{name}.log"
    run = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(tmp_path / f"{name}-cache"), "--json",
                      env={**st.pythonpath(standins), "LD_LIBRARY_PATH": str(lib), "STRICT_LOG": str(log), **env})
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return json.loads(run.stdout) if run.stdout.startswith("[") else [], calls, run.stderr


def test_one_plugin_by_another_path_or_a_link_is_loaded_once(tmp_path: Path) -> None:
    """The same library by a symbolic link and by an identical copy elsewhere: TensorRT's registry refuses creators
    it holds, whatever the path, so the library is loaded once and each engine serializes the path it named."""
    plugin = strict.plugin(tmp_path / "a", "PluginA_TRT")
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "libalias.so").symlink_to(plugin)
    copy = tmp_path / "copy" / plugin.name
    copy.parent.mkdir()
    copy.write_bytes(plugin.read_bytes())
    for name, second in (("link", tmp_path / "link" / "libalias.so"), ("copy", copy)):
        rows, calls, err = warm_plugins(tmp_path, name, [plugin, second])
        assert [r["result"] for r in rows] == ["built", "built"], err
        assert [c[0] for c in calls if c[0].startswith("load_library")] == ["load_library"]
        assert [c[1] for c in calls if c[0] == "plugins_to_serialize"] == [str(plugin), str(second)]


@pytest.mark.parametrize("unloads", [True, False], ids=["unloaded", "kept-mapped"])
def test_a_plugin_replaced_on_disk_between_two_builds(tmp_path: Path, unloads: bool) -> None:
    """The plugin file is replaced (a new build, renamed into place) after the first build of a batch. Where the
    registry's deregister_library unloads the old library, the second build loads the new one and is built with
    its creators. Where the process keeps the old copy mapped (a library ld.so cannot unload), loading the path
    again returns the old code: the second build is refused (exit 4) instead of building the old plugin under the
    new one's key."""
    work = tmp_path / "plugins"
    plugin = strict.plugin(work, "PluginA_TRT")
    newer = strict.plugin(tmp_path / "next", "PluginA_TRT,PluginA2_TRT")
    swap = f"cp {newer} {work}/.next && mv {work}/.next {plugin}"
    rows, calls, err = warm_plugins(tmp_path, "swap", [plugin, plugin], STRICT_AFTER_BUILD=swap,
                                    STRICT_TRT_DLCLOSE="1" if unloads else "0")
    builds = [c[1] for c in calls if c[0] == "build"]
    assert rows[0]["result"] == "built" and builds[0] == "PluginA_TRT", err
    assert ["deregister_library", "PluginA_TRT"] in calls
    if unloads:
        assert rows[1]["result"] == "built" and builds[1:] == ["PluginA2_TRT,PluginA_TRT"], err
    else:
        assert rows[1]["result"] == "error" and rows[1]["exit_code"] == 4 and len(builds) == 1, err
        assert "still maps the old library" in rows[1]["error"] and "new process" in rows[1]["hint"]


# --- a build that TensorRT does not end after SIGTERM, in a batch -----------------------------------------------------

@pytest.mark.parametrize("command", ["warm", "prebuild"])
def test_a_stuck_build_in_a_batch_ends_the_process_with_143(tmp_path: Path, request: pytest.FixtureRequest,
                                                           command: str) -> None:
    """``warm --list`` and ``prebuild`` of two models; SIGTERM while TensorRT is inside the first build and never
    asks the progress monitor again: after the grace period the process exits 143 (os._exit, no teardown under the
    running thread), the staging directory (prebuild: its whole temporary cache) is gone, nothing is published and
    the second model never started."""
    import os
    import signal
    import subprocess
    import time

    from conftest import env_for, trtwarm_argv, wait_until

    from trtwarm.builders.tensorrt.progress import CANCEL_GRACE_SECONDS

    lib = st.libnvinfer(tmp_path / "lib", cuda=12)
    standins = strict.pynvml(tmp_path / "s", [strict.H100])
    strict.tensorrt(standins, dists=("tensorrt-cu12-bindings",))
    for seed in (1, 2):
        make_model(tmp_path / f"m{seed}.onnx", seed=seed)
    log, cache, scratch = tmp_path / "trt.log", tmp_path / "cache", tmp_path / "tmp"
    scratch.mkdir()
    env = {**st.pythonpath(standins), "LD_LIBRARY_PATH": str(lib.parent), "STRICT_LOG": str(log),
           "STRICT_TRT_BUILD": "stuck", "TMPDIR": str(scratch)}
    if command == "warm":
        (tmp_path / "list.json").write_text(json.dumps({"defaults": {"shape": [SHAPE]}, "models": [
            {"model": str(tmp_path / f"m{seed}.onnx")} for seed in (1, 2)]}))
        args = ["warm", "--list", str(tmp_path / "list.json"), "--cache-dir", str(cache)]
    else:
        env.update(request.getfixturevalue("s3").env())
        (tmp_path / "matrix.json").write_text(json.dumps({"models": [
            {"model": f"m{seed}.onnx", "shape": [SHAPE]} for seed in (1, 2)], "options": {"builder": "tensorrt"}}))
        args = ["prebuild", "--matrix", str(tmp_path / "matrix.json"), "--remote", "s3://engines/stuck"]
    with open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(trtwarm_argv(*args), stdout=subprocess.DEVNULL, stderr=stderr, env=env_for(env),
                                start_new_session=True)
    wait_until(lambda: log.exists() and '"build"' in log.read_text(), timeout=60, what="the first build")
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=CANCEL_GRACE_SECONDS + 60) == 143
    took, err = time.monotonic() - sent, (tmp_path / "stderr").read_text()
    assert CANCEL_GRACE_SECONDS - 1 < took < CANCEL_GRACE_SECONDS + 20, err
    assert "exiting with 143 now" in err and "Traceback" not in err and "Fatal Python error" not in err
    assert log.read_text().count('["build"') == 1  # the second model never started
    if command == "warm":
        assert not list((cache / ".staging").iterdir()) and not list((cache / "entries").iterdir())
    else:
        assert list(scratch.iterdir()) == []
