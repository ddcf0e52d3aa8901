"""Stricter stand-ins for what no machine here has: :mod:`standins`' sources with what differs appended (later
definitions win), to follow more of the real stack's documented behaviour where trtwarm's can depart from it:

* ``pynvml`` (nvidia-ml-py): ``NVMLError(code)`` builds the code's subclass; handles are objects; MIG mode per GPU,
  MIG devices answering NOT_SUPPORTED for PCI info and core counts and reporting their own memory, the parent's
  ``nvmlDeviceGetMemoryInfo`` refused in MIG mode (NO_PERMISSION), GPU and compute instance ids.
* ``tensorrt``: ``import tensorrt`` maps ``libnvinfer.so.<major>`` (the bindings' extension links it);
  ``IPluginRegistry.load_library`` opens the library with the dynamic loader, asks it for its creators' names and
  "will fail and return None if any of the plugins are already registered" (by name, not by path);
  ``deregister_library`` forgets them and, with ``$STRICT_TRT_DLCLOSE=1``, closes the library (so a changed file
  can be loaded again; without, the process keeps the old copy mapped, as ld.so does for a library that cannot be
  unloaded). ``$STRICT_TRT_BUILD=stuck``: the build never returns nor asks the progress monitor again.
* ``onnxruntime`` (onnxruntime-gpu): ``capi/build_and_package_info.py`` naming ``package_name``, ``__version__`` and
  ``cuda_version``; a ``libonnxruntime_providers_tensorrt.so`` whose ``DT_NEEDED`` names ``libnvinfer.so.<major>``
  and ``libcudart.so.<major>``; provider options parsed as ``onnxruntime_pybind_state.cc`` does (an unknown key or a
  malformed boolean raises); the EP reads the ``ORT_TENSORRT_*`` variables only when given no options.

What TensorRT is asked is recorded as JSON lines in ``$STRICT_LOG``; the EP's sessions in ``$STANDIN_ORT_LOG``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import standins as st

H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "cc": [9, 0],
        "pci": "00000000:81:00.0", "memory": 85520809984, "cores": 16896, "clock": 1980}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-1d0e3a2b-5c6d-4e7f-8a9b-0c1d2e3f4a5b", "cc": [8, 0],
        "pci": "00000000:01:00.0", "memory": 85899345920, "cores": 6912, "clock": 1410}

PYNVML = r'''
import json as _json
NVML_ERROR_UNINITIALIZED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED = 1, 2, 3
NVML_ERROR_NO_PERMISSION, NVML_ERROR_NOT_FOUND = 4, 6
NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE = 0, 1
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
_GPUS = _json.loads(%r)


class NVMLError(Exception):
    _classes = {}

    def __new__(cls, value):
        obj = Exception.__new__(NVMLError._classes.get(value, cls) if cls is NVMLError else cls)
        obj.value = value
        return obj

    def __init__(self, value):
        Exception.__init__(self, value)


for _code, _name in ((2, "InvalidArgument"), (3, "NotSupported"), (4, "NoPermission"), (6, "NotFound")):
    NVMLError._classes[_code] = globals()["NVMLError_" + _name] = type("NVMLError_" + _name, (NVMLError,), {})


class _Handle:
    def __init__(self, gpu, mig=None):
        self.gpu, self.mig = gpu, mig


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "580.95.05"


def nvmlSystemGetCudaDriverVersion_v2():
    return 13000


def nvmlDeviceGetCount():
    return len(_GPUS)


def nvmlDeviceGetHandleByIndex(i):
    return _Handle(_GPUS[i])


def nvmlDeviceGetName(h):
    return h.gpu["name"] + (" MIG " + h.mig["profile"] if h.mig else "")


def nvmlDeviceGetUUID(h):
    return (h.mig or h.gpu)["uuid"]


def nvmlDeviceGetCudaComputeCapability(h):
    return tuple(h.gpu["cc"])


def nvmlDeviceGetPciInfo(h):
    if h.mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _Struct(busId=h.gpu["pci"])


def nvmlDeviceGetMemoryInfo(h):
    if h.mig is None and h.gpu.get("mig"):
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    return _Struct(total=(h.mig or h.gpu)["memory"])


def nvmlDeviceGetAttributes_v2(h):
    if not h.mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _Struct(memorySizeMB=h.mig["memory"] >> 20)


def nvmlDeviceGetNumGpuCores(h):
    if h.mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return h.gpu["cores"]


def nvmlDeviceGetMaxClockInfo(h, clock):
    return h.gpu["clock"]


def nvmlDeviceGetMigMode(h):
    if "mig" not in h.gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return [int(bool(h.gpu["mig"]))] * 2


def nvmlDeviceGetMaxMigDeviceCount(h):
    return 7


def nvmlDeviceGetMigDeviceHandleByIndex(h, i):
    if i >= len(h.gpu.get("mig") or []):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Handle(h.gpu, h.gpu["mig"][i])


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h):
    if not h.mig:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(h.gpu)


def nvmlDeviceGetGpuInstanceId(h):
    return h.mig["gi"]


def nvmlDeviceGetComputeInstanceId(h):
    return h.mig["ci"]
'''


def pynvml(standins: Path, gpus: list[dict[str, object]]) -> Path:
    """The stand-in ``pynvml`` for *gpus* (NVML index order; a GPU with ``"mig": [...]`` is in MIG mode)."""
    standins.mkdir(parents=True, exist_ok=True)
    (standins / "pynvml.py").write_text(PYNVML % json.dumps(gpus))
    return standins


#: appended to :data:`standins.TENSORRT` (later definitions win): what this stand-in does differently
#: appended to :data:`PYNVML`: an older binding (the old ``pynvml`` package, nvidia-ml-py before 11.515)
OLD_PYNVML = r'''
del nvmlSystemGetCudaDriverVersion_v2, nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetNumGpuCores
del nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetDeviceHandleFromMigDeviceHandle, nvmlDeviceGetAttributes_v2
_text = (nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlSystemGetDriverVersion)


def nvmlDeviceGetName(h):
    return _text[0](h).encode()


def nvmlDeviceGetUUID(h):
    return _text[1](h).encode()


def nvmlSystemGetDriverVersion():
    return _text[2]().encode()


def nvmlDeviceGetPciInfo(h):
    return _Struct(busId=h.gpu["pci"].encode())
'''


def old_pynvml(standins: Path, gpus: list[dict[str, object]]) -> Path:
    """:func:`pynvml` as an older binding answers: no MIG calls, no ``_v2`` driver query, no core count, and C
    strings as ``bytes``."""
    pynvml(standins, gpus)
    (standins / "pynvml.py").write_text((standins / "pynvml.py").read_text() + OLD_PYNVML)
    return standins


TENSORRT = r'''
import ctypes, time

_lib = ctypes.CDLL("libnvinfer.so.{major}", mode=ctypes.RTLD_GLOBAL)  # what the bindings' extension links


def _record(*what):
    if os.environ.get("STRICT_LOG"):
        with open(os.environ["STRICT_LOG"], "a") as log:
            log.write(json.dumps([str(w) for w in what]) + "\n")


class IStreamWriter:
    def __init__(self):
        pass


class IPluginRegistry:
    def __init__(self):
        self.creators, self.libraries = {{}}, []

    def load_library(self, plugin_path):
        lib = ctypes.CDLL(os.path.abspath(plugin_path), mode=ctypes.RTLD_LOCAL)
        lib.strictCreatorNames.restype = ctypes.c_char_p
        names = lib.strictCreatorNames().decode().split(",")
        if any(n in self.creators for n in names):  # "fail and return None if any ... are already registered"
            _record("load_library refused", plugin_path, *names)
            return None
        handle = ctypes.c_void_p(lib._handle)
        self.libraries.append((handle, lib, names))
        self.creators.update(dict.fromkeys(names, handle))
        _record("load_library", plugin_path, *names)
        return handle

    def deregister_library(self, handle):
        for entry in list(self.libraries):
            if entry[0] is handle:
                self.libraries.remove(entry)
                for name in entry[2]:
                    del self.creators[name]
                _record("deregister_library", *entry[2])
                if os.environ.get("STRICT_TRT_DLCLOSE") == "1":
                    import _ctypes
                    _ctypes.dlclose(entry[1]._handle)


_REGISTRY = IPluginRegistry()


class Builder(Builder):
    def build_serialized_network_to_stream(self, network, config, writer):
        _record("build", ",".join(sorted(_REGISTRY.creators)))
        while os.environ.get("STRICT_TRT_BUILD") == "stuck":  # inside one tactic: never asks step_complete again
            time.sleep(0.05)
        plan = _plan()
        done = writer.write(plan) == len(plan)
        if os.environ.get("STRICT_AFTER_BUILD"):  # e.g. replace a plugin on disk between two builds of a batch
            os.system(os.environ.pop("STRICT_AFTER_BUILD"))
        return done
'''


def tensorrt(standins: Path, version: str = "10.16.1.11", dists: tuple[str, ...] = ("tensorrt",)) -> Path:
    """The stand-in ``tensorrt`` package and the ``.dist-info`` of each of *dists* (plain ``tensorrt``: the tarball's
    or an NGC image's wheel). ``import tensorrt`` needs ``libnvinfer.so.<major>`` on ``LD_LIBRARY_PATH``."""
    package = st.tensorrt(standins, version)
    strict = TENSORRT.format(major=version.split(".")[0])
    (package / "__init__.py").write_text((package / "__init__.py").read_text() + strict)
    for dist in dists:
        dist_info(standins, dist, version)
    return package


def dist_info(standins: Path, dist: str, version: str) -> None:
    info = standins / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def plugin(directory: Path, creators: str, name: str = "libplugin.so") -> Path:
    """A plugin library with ``load_library``'s entry points, naming its creators through ``strictCreatorNames``."""
    return st.compile_library(directory, name, "void setLoggerFinder(void *f) {}\n"
                              "void *getPluginCreators(int *n) { *n = 0; return 0; }\n"
                              f'const char *strictCreatorNames(void) {{ return "{creators}"; }}\n')


#: appended to :data:`standins.ONNXRUNTIME`: the options parsed as the Python binding parses them
ONNXRUNTIME = r'''
_BOOLS = {"True": True, "true": True, "False": False, "false": False}
_KNOWN = {"device_id", "trt_max_partition_iterations", "trt_min_subgraph_size", "trt_max_workspace_size",
          "trt_fp16_enable", "trt_int8_enable", "trt_engine_cache_enable", "trt_timing_cache_enable",
          "trt_builder_optimization_level", "trt_layer_norm_fp32_fallback", "trt_sparsity_enable",
          "trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes", "trt_dump_ep_context_model",
          "trt_ep_context_file_path", "trt_ep_context_embed_mode", "trt_auxiliary_streams", "trt_tactic_sources"}


def ep_settings(options):
    if not options:  # no options struct: the EP reads its variables
        return {"fp16": os.environ.get("ORT_TENSORRT_FP16_ENABLE", "0") != "0", "from": "environment"}
    for key, value in options.items():
        if not isinstance(value, str):
            raise TypeError("provider options are passed to the binding as strings")
        if key not in _KNOWN:
            raise onnxruntime_pybind11_state.InvalidArgument("Invalid TensorRT EP option: " + key)
        if key.endswith(("_enable", "_fallback")) and value not in _BOOLS:
            raise onnxruntime_pybind11_state.InvalidArgument(f"The value for the key '{key}' should be 'True' or "
                                                             "'False'.")
    return {"fp16": _BOOLS[options.get("trt_fp16_enable", "False")], "from": "options"}
'''


def onnxruntime(standins: Path, version: str = "1.20.1", cuda: str | None = "12.2", nvinfer: int = 10,
                cudart: int | None = 12) -> Path:
    """onnxruntime-gpu *version* as its wheel installs it: the package, its ``.dist-info``, its build info naming
    *cuda* (None: none), and its TensorRT provider library linking ``libnvinfer.so.<nvinfer>`` and
    ``libcudart.so.<cudart>`` (found through its RUNPATH ``$ORIGIN``, where they are not)."""
    st.onnxruntime(standins)
    capi = standins / "onnxruntime" / "capi"
    (standins / "onnxruntime" / "__init__.py").write_text((standins / "onnxruntime" / "__init__.py").read_text()
                                                          + ONNXRUNTIME)
    (capi / "onnxruntime_pybind11_state.py").write_text("class Fail(Exception):\n    pass\n\n\n"
                                                       "class InvalidArgument(Exception):\n    pass\n")
    info = f"package_name = 'onnxruntime-gpu'\n__version__ = '{version}'\n"
    (capi / "build_and_package_info.py").write_text(info + (f"cuda_version = '{cuda}'\n" if cuda else ""))
    dist_info(standins, "onnxruntime-gpu", version)
    scratch = standins / "link-time"
    links = [st.compile_library(scratch, f"libnvinfer.so.{nvinfer}", "int a(void) { return 0; }\n",
                                soname=f"libnvinfer.so.{nvinfer}").name]
    if cudart is not None:
        links.append(st.cuda_runtime(scratch, cudart).name)
    provider = st.compile_library(scratch, "libonnxruntime_providers_tensorrt.so", "int b(void) { return 0; }\n",
                                  link=tuple(links))
    shutil.move(str(provider), capi / provider.name)
    shutil.rmtree(scratch)
    return standins / "onnxruntime"


def bindings(package: Path, major: int, search: Path, rpath: bool = False) -> Path:
    """The bindings' extension module in *package*: ``DT_NEEDED`` ``libnvinfer.so.<major>``, found through *search*
    as a ``DT_RUNPATH`` (ld.so looks there after ``LD_LIBRARY_PATH``) or, with *rpath*, a ``DT_RPATH`` (before)."""
    import subprocess

    st.compile_library(package / "link-time", f"libnvinfer.so.{major}", "int a(void) { return 0; }\n",
                       soname=f"libnvinfer.so.{major}")
    source = package / "bindings.c"
    source.write_text("int PyInit_tensorrt_bindings(void) { return 0; }\n")
    target = package / "tensorrt.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(target), str(source), "-L", str(package / "link-time"),
                    "-Wl,--no-as-needed", f"-l:libnvinfer.so.{major}", f"-Wl,-rpath,{search}",
                    "-Wl,--disable-new-dtags" if rpath else "-Wl,--enable-new-dtags"], check=True)
    source.unlink()
    shutil.rmtree(package / "link-time")
    return target
