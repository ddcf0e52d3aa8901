"""Stand-ins for what no machine here has: the ``tensorrt``, ``pynvml`` and ``onnxruntime`` modules and TensorRT's
shared libraries, written into a test's directory and put first on a real ``trtwarm`` process's ``PYTHONPATH``.

Each follows the documented behaviour it stands in for, and only that (the source is cited next to each): NVML's
queries and error codes, ``IPluginRegistry.load_library`` refusing a library whose plugins are registered,
``IProgressMonitor.step_complete`` answering False to cancel, the TensorRT EP reading ``ORT_TENSORRT_*`` only when
given no options, the library's ``getInferLib*Version`` functions. They make no engine: what a test checks with
them is trtwarm's side of each contract. What needs real TensorRT is marked and skipped elsewhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT


def compile_library(directory: Path, filename: str, source: str, soname: str | None = None,
                    link: tuple[str, ...] = ()) -> Path:
    """A real shared object built with ``cc`` (skips the test where there is none): *link* are file names in
    *directory* it must name in ``DT_NEEDED`` (linked with ``--no-as-needed``, found at run time through
    ``$ORIGIN``)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here to make a shared object")
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / f"{filename}.c"
    src.write_text(source)
    args = ["cc", "-shared", "-fPIC", "-o", str(directory / filename), str(src), "-Wl,-rpath,$ORIGIN"]
    if soname:
        args.append(f"-Wl,-soname,{soname}")
    if link:
        args += ["-L", str(directory), "-Wl,--no-as-needed", *(f"-l:{name}" for name in link)]
    subprocess.run(args, check=True)
    src.unlink()
    return directory / filename


def cuda_runtime(directory: Path, major: int) -> Path:
    """A library named and sonamed ``libcudart.so.<major>`` (what a CUDA runtime's file is called)."""
    return compile_library(directory, f"libcudart.so.{major}", "int cudaStandIn(void) { return 0; }\n",
                           soname=f"libcudart.so.{major}")


def libnvinfer(directory: Path, version: tuple[int, int, int, int] = (10, 16, 1, 11), cuda: int | None = 12,
               versioned_name: bool = True) -> Path:
    """``libnvinfer.so.<major>`` as a tarball lays it out (the soname link to ``libnvinfer.so.M.m.p``), exporting
    ``getInferLib{Major,Minor,Patch,Build}Version`` (``include/NvInferRuntime.h``, ``extern "C"``) and linking
    ``libcudart.so.<cuda>`` (none: a static CUDA runtime). :return: the soname link"""
    major = version[0]
    link = (cuda_runtime(directory, cuda).name,) if cuda is not None else ()
    functions = "".join(f"int getInferLib{part}Version(void) {{ return {number}; }}\n"
                        for part, number in zip(("Major", "Minor", "Patch", "Build"), version))
    real = f"libnvinfer.so.{'.'.join(map(str, version[:3]))}" if versioned_name else f"libnvinfer.so.{major}.real"
    compile_library(directory, real, functions, soname=f"libnvinfer.so.{major}", link=link)
    (directory / f"libnvinfer.so.{major}").symlink_to(real)
    return directory / f"libnvinfer.so.{major}"


def plugin_library(directory: Path, name: str = "libmyplugin.so") -> Path:
    """A plugin library with the entry points ``IPluginRegistry.load_library`` needs (developer guide, Plugin Shared
    Libraries): ``setLoggerFinder`` and ``getPluginCreators``."""
    return compile_library(directory, name, "void setLoggerFinder(void *f) {}\n"
                           "void *getPluginCreators(int *n) { *n = 0; return 0; }\n")


def pythonpath(standins: Path) -> dict[str, str]:
    """The environment that puts *standins* before the checkout (and so before the venv's real packages)."""
    return {"PYTHONPATH": f"{standins}:{ROOT}"}


# --- NVML -------------------------------------------------------------------------------------------------------------

PYNVML = '''"""Stand-in for nvidia-ml-py's pynvml: the queries trtwarm makes, answered from DEVICES; NVMLError(code) as
pynvml raises them (nvmlDeviceGetMigMode on a GPU without MIG: NOT_SUPPORTED)."""
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_DEVICE_MIG_ENABLE, NVML_CLOCK_SM = 3, 2, 1, 1
DEVICES = {devices}


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


class _Pci:
    def __init__(self, bus):
        self.busId = bus


class _Memory:
    def __init__(self, total):
        self.total = total


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "580.159.03"


def nvmlSystemGetCudaDriverVersion_v2():
    return 13000


def nvmlDeviceGetCount():
    return len(DEVICES)


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetName(h):
    return DEVICES[h]["name"]


def nvmlDeviceGetUUID(h):
    return DEVICES[h]["uuid"]


def nvmlDeviceGetCudaComputeCapability(h):
    return tuple(DEVICES[h]["cc"])


def nvmlDeviceGetPciInfo(h):
    return _Pci(DEVICES[h]["pci"])


def nvmlDeviceGetMemoryInfo(h):
    return _Memory(DEVICES[h]["memory"])


def nvmlDeviceGetMigMode(h):
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h):
    raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetAttributes_v2(h):
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
'''
NVML_FACTS = '''

def nvmlDeviceGetNumGpuCores(h):
    return DEVICES[h]["cores"]


def nvmlDeviceGetMaxClockInfo(h, clock):
    return DEVICES[h]["clock"]
'''
H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-11111111-2222-3333-4444-555555555555", "cc": [9, 0],
        "pci": "00000000:81:00.0", "memory": 85520809984, "cores": 16896, "clock": 1980}
A100 = {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "cc": [8, 0],
        "pci": "00000000:01:00.0", "memory": 42949672960, "cores": 6912, "clock": 1410}


def pynvml(standins: Path, devices: list[dict[str, object]], facts: bool = True) -> Path:
    """Write the stand-in ``pynvml`` for *devices* (NVML index order); *facts*: it answers the core count and the
    maximum SM clock too (older bindings lack ``nvmlDeviceGetNumGpuCores``)."""
    standins.mkdir(parents=True, exist_ok=True)
    (standins / "pynvml.py").write_text(PYNVML.format(devices=json.dumps(devices)) + (NVML_FACTS if facts else ""))
    return standins


# --- TensorRT ---------------------------------------------------------------------------------------------------------

TENSORRT = '''"""Stand-in for the tensorrt module: the calls trtwarm's build and load make (python/src/infer/pyCore.cpp,
pyPlugin.cpp, pyOnnx.cpp), recording each in $STANDIN_TRT_LOG. $STANDIN_TRT_BUILD=ignore-cancel makes the build
ignore step_complete's False and never return (a TensorRT stuck in a tactic)."""
import json, os, struct, time

__version__ = "{version}"


def _record(*what):
    if os.environ.get("STANDIN_TRT_LOG"):
        with open(os.environ["STANDIN_TRT_LOG"], "a") as log:
            log.write(json.dumps([str(w) for w in what]) + "\\n")


class _Names:
    def __init__(self, *names):
        for i, name in enumerate(names):
            setattr(self, name, type(name, (), {{"name": name, "__int__": lambda s, i=i: i}})())


BuilderFlag = _Names("FP16", "INT8", "BF16", "TF32", "VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME", "STRIP_PLAN")
NetworkDefinitionCreationFlag = _Names("EXPLICIT_BATCH", "STRONGLY_TYPED")
MemoryPoolType = _Names("WORKSPACE")
HardwareCompatibilityLevel = _Names("NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY")
ProfilingVerbosity = _Names("LAYER_NAMES_ONLY", "NONE", "DETAILED")


class ILogger:
    def __init__(self):
        pass


class IProgressMonitor:
    def __init__(self):
        pass


def init_libnvinfer_plugins(logger, namespace):
    _record("init_libnvinfer_plugins")
    return True


class _Registry:
    def __init__(self):
        self.libraries = {{}}

    def load_library(self, path):
        # IPluginRegistryDoc.load_library: "The call will fail and return None if any of the plugins are already
        # registered"
        real = os.path.realpath(path)
        if real in self.libraries:
            _record("load_library refused", path)
            return None
        _record("load_library", path)
        self.libraries[real] = object()
        return self.libraries[real]

    def deregister_library(self, handle):
        self.libraries = {{k: v for k, v in self.libraries.items() if v is not handle}}


_REGISTRY = _Registry()


def get_plugin_registry():
    return _REGISTRY


class _Profile:
    def set_shape(self, name, low, opt, high):
        pass


class _Cache:
    def serialize(self):
        return b"timing cache"

    def combine(self, other, ignore_mismatch):
        return True


class _Config:
    progress_monitor = None

    def __init__(self):
        self.profiles = 0

    def __setattr__(self, name, value):
        if name == "plugins_to_serialize":
            _record("plugins_to_serialize", *value)
        object.__setattr__(self, name, value)

    def set_memory_pool_limit(self, pool, size):
        pass

    def set_flag(self, flag):
        pass

    def clear_flag(self, flag):
        pass

    def add_optimization_profile(self, profile):
        self.profiles += 1
        return self.profiles - 1

    def create_timing_cache(self, data):
        return _Cache()

    def set_timing_cache(self, cache, ignore_mismatch):
        return True

    def get_timing_cache(self):
        return _Cache()


class _Parser:
    num_errors = 0

    def __init__(self, network, logger):
        pass

    def parse_from_file(self, path):
        return True

    def get_used_vc_plugin_libraries(self):
        return []


OnnxParser = _Parser


def _plan():
    # the plan header trtexec --getPlanVersionOnly reads (samples/common/sampleEngines.cpp printPlanVersion)
    major, minor, patch, build = (int(p) for p in __version__.split("."))
    return struct.pack("<II", 0x74727466, 0) + bytes(16) + bytes([major, minor, patch, build % 256]) + bytes(64)


class Builder:
    def __init__(self, logger):
        _record("Builder")

    def create_network(self, flags=0):
        return object()

    def create_builder_config(self):
        return _Config()

    def create_optimization_profile(self):
        return _Profile()

    def build_serialized_network(self, network, config):
        _record("build started")
        step = 0
        while True:  # IProgressMonitor.step_complete: "return false to cancel the build"
            go_on = config.progress_monitor is None or config.progress_monitor.step_complete("Building engine", step)
            if os.environ.get("STANDIN_TRT_BUILD") == "ignore-cancel":
                time.sleep(0.05)
                step += 1
                continue
            if not go_on:
                return None
            if step >= 3:
                return _plan()
            step += 1


class _Engine:
    num_layers, num_optimization_profiles, device_memory_size_v2, refittable = 3, 1, 0, False
    hardware_compatibility_level = HardwareCompatibilityLevel.NONE
    profiling_verbosity = ProfilingVerbosity.LAYER_NAMES_ONLY

    def create_execution_context(self):
        return object()

    def create_engine_inspector(self):
        return None


class Runtime:
    engine_host_code_allowed = False

    def __init__(self, logger):
        pass

    def deserialize_cuda_engine(self, blob):
        return _Engine() if bytes(blob[:4]) == struct.pack("<I", 0x74727466) else None
'''


def tensorrt(standins: Path, version: str = "10.16.1.11", dist: str | None = None) -> Path:
    """Write the stand-in ``tensorrt`` package; *dist*: also the ``.dist-info`` of that distribution name (the
    tarball's wheel is named ``tensorrt``, pip's ``tensorrt-cu12-bindings``)."""
    package = standins / "tensorrt"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(TENSORRT.format(version=version))
    if dist:
        info = standins / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return package


# --- ONNX Runtime -----------------------------------------------------------------------------------------------------

ONNXRUNTIME = '''"""Stand-in for onnxruntime-gpu with its TensorRT EP. As ONNX Runtime's source has it, the EP
takes every setting from its provider options when given any (tensorrt_execution_provider.cc:
`if (info.has_trt_options)`), and reads ORT_TENSORRT_* only when given none (Python passes no options struct for an
empty dict: GenerateProviderOptionsMap).
The "engine" is a string of the settings it was built with, embedded in the EPContext model; each session's
options are recorded in $STANDIN_ORT_LOG."""
import json, os

import numpy as np
import onnx
from onnx import helper

from onnxruntime.capi import onnxruntime_pybind11_state  # noqa: F401


class GraphOptimizationLevel:
    ORT_ENABLE_ALL = 99


class SessionOptions:
    def __init__(self):
        self.entries, self.log_severity_level = {}, 2

    def add_session_config_entry(self, key, value):
        self.entries[key] = value


def get_available_providers():
    return ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def ep_settings(options):
    if options:
        return {"fp16": options.get("trt_fp16_enable", "False") in ("True", "true")}
    return {"fp16": os.environ.get("ORT_TENSORRT_FP16_ENABLE", "0") not in ("", "0")}


class _Input:
    def __init__(self, value):
        self.name, self.type = value.name, "tensor(float)"
        self.shape = [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]


class InferenceSession:
    def __init__(self, path, options, providers):
        name, ep_options = providers[0] if isinstance(providers[0], tuple) else (providers[0], {})
        settings = ep_settings(ep_options)
        if os.environ.get("STANDIN_ORT_LOG"):
            with open(os.environ["STANDIN_ORT_LOG"], "a") as log:
                log.write(json.dumps({"provider": name, "options": ep_options, "settings": settings}) + "\\n")
        model = onnx.load(str(path), load_external_data=False)
        self.inputs = [_Input(v) for v in model.graph.input]
        target = options.entries.get("ep.context_file_path")
        if options.entries.get("ep.context_enable") == "1" and target:
            node = helper.make_node("EPContext", [i.name for i in model.graph.input],
                                    [o.name for o in model.graph.output], domain="com.microsoft", embed_mode=1,
                                    ep_cache_context=f"engine {json.dumps(settings, sort_keys=True)}")
            graph = helper.make_graph([node], "ctx", list(model.graph.input), list(model.graph.output))
            onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("com.microsoft", 1)]), target)

    def get_inputs(self):
        return self.inputs

    def run(self, outputs, feeds):
        return [np.zeros((1, 4), dtype="float32")]
'''


def onnxruntime(standins: Path, cuda_version: str = "12.8") -> Path:
    """Write the stand-in ``onnxruntime`` package (its ``capi/build_and_package_info.py`` names *cuda_version*, as an
    onnxruntime-gpu build's does)."""
    capi = standins / "onnxruntime" / "capi"
    capi.mkdir(parents=True, exist_ok=True)
    (standins / "onnxruntime" / "__init__.py").write_text(ONNXRUNTIME)
    (capi / "__init__.py").write_text("")
    (capi / "onnxruntime_pybind11_state.py").write_text("class Fail(Exception):\n    pass\n")
    (capi / "build_and_package_info.py").write_text(f"package_name = 'onnxruntime-gpu'\ncuda_version = "
                                                    f"'{cuda_version}'\n")
    return standins / "onnxruntime"
