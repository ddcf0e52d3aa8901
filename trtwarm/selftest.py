"""``trtwarm selftest``: the first thing to run on a new cluster's GPU node.

Prints the GPU identity (NVML), the driver, CUDA driver and TensorRT versions, then builds a tiny generated ONNX
model through the whole ``trtwarm init`` path (key, lock, build, load check, publish) in a temporary cache, starts
again (a hit), and runs one inference on the engine, comparing it with NumPy. Without a GPU or TensorRT it says
exactly what is missing and exits 2.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import glob
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm import gpu
from trtwarm.config import Identity, Settings
from trtwarm.errors import BuildError, ConfigError


def _say(label: str, value: object) -> None:
    print(f"{label:<20}{value}", flush=True)


def identity(environ: Mapping[str, str]) -> gpu.GpuInfo:
    """Print and return this container's GPU. :raises ConfigError: none visible (exit 2)."""
    found = gpu.detect()
    if not found:
        _say("GPU", "none visible through NVML")
        raise ConfigError("no NVIDIA GPU is visible to this container (NVML found no driver or no device)",
                          hint="run selftest in a container that requests nvidia.com/gpu, with the NVIDIA runtime")
    chosen = gpu.select(found, environ)
    cuda = chosen.cuda_driver_version
    _say("GPU", f"{chosen.name} (cc {chosen.compute_capability[0]}.{chosen.compute_capability[1]}, "
         f"{chosen.memory_gib} GiB{', MIG ' + chosen.mig_profile if chosen.mig_profile else ''})")
    _say("GPU UUID", chosen.uuid)
    _say("driver", f"{chosen.driver_version} (CUDA {cuda // 1000}.{cuda % 1000 // 10})")
    return chosen


class _Cudart:
    """The few CUDA runtime calls one inference needs, through ctypes (no extra Python dependency)."""

    def __init__(self) -> None:
        names = [ctypes.util.find_library("cudart"), "libcudart.so", "libcudart.so.13", "libcudart.so.12"]
        names += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cu*", "lib",
                                        "libcudart.so*"))
        names += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "cuda_runtime",
                                        "lib", "libcudart.so*"))
        for name in filter(None, names):
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            raise BuildError("cannot load the CUDA runtime (libcudart) to run the test inference",
                             hint="use a CUDA runtime base image, or pip install nvidia-cuda-runtime-cu12")

    def call(self, name: str, *args: Any) -> None:
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise BuildError(f"CUDA {name} failed with error {code}")

    def malloc(self, size: int) -> int:
        ptr = ctypes.c_void_p()
        self.call("cudaMalloc", ctypes.byref(ptr), ctypes.c_size_t(size))
        return int(ptr.value or 0)

    def copy(self, dst: int, src: int, size: int, kind: int) -> None:  # kind 1: host->device, 2: device->host
        self.call("cudaMemcpy", ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(size), kind)


def infer(engine_path: Path, batch: Any) -> Any:
    """Run the engine once on *batch* (the demo model's ``input``) and return ``output`` as a NumPy array."""
    import numpy as np
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())
    context = engine.create_execution_context()
    cuda, buffers = _Cudart(), []
    out = np.empty((batch.shape[0], 4), dtype=np.float32)
    try:
        for name, host in (("input", np.ascontiguousarray(batch, dtype=np.float32)), ("output", out)):
            ptr = cuda.malloc(host.nbytes)
            buffers.append(ptr)
            context.set_tensor_address(name, ptr)
            if name == "input":
                context.set_input_shape(name, host.shape)
                cuda.copy(ptr, host.ctypes.data, host.nbytes, 1)
        if not context.execute_async_v3(0):  # the legacy default stream, synchronous with cudaMemcpy
            raise BuildError("TensorRT could not run the test inference")
        cuda.copy(out.ctypes.data, buffers[1], out.nbytes, 2)
    finally:
        for ptr in buffers:
            cuda.lib.cudaFree(ctypes.c_void_p(ptr))
    return out


def run(environ: Mapping[str, str], keep: Path | None = None) -> int:
    """The selftest; returns 0, or raises a :class:`~trtwarm.errors.TrtwarmError` saying what is missing."""
    import numpy as np

    from trtwarm.builders.tensorrt.builder import tensorrt_version
    from trtwarm.demo import make_model
    from trtwarm.warm import warm

    identity(environ)
    try:
        dist, version = tensorrt_version()
    except ConfigError:
        _say("TensorRT", "not installed")
        raise
    _say("TensorRT", f"{version} ({dist})")
    work = keep or Path(tempfile.mkdtemp(prefix="trtwarm-selftest-"))
    model = make_model(work / "selftest.onnx", dynamic=False)
    base = Settings(model=model, cache_dir=work / "cache", builder="tensorrt", handoff_dir=work / "h1",
                    identity=Identity.from_env(environ), environ=dict(environ), verify="load")
    built = warm(base)
    _say("build", f"{built.seconds['build']:.2f} s ({built.engine_bytes} bytes, timing cache "
         f"{built.extra.get('timing_cache', '?')})")
    hit = warm(dataclasses.replace(base, handoff_dir=work / "h2"))
    _say("load (a hit)", f"{hit.seconds['total']:.3f} s, deserialized and checked on this GPU")
    batch = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    start = time.monotonic()
    got = infer(Path(hit.path), batch)
    want = _reference(model, batch)
    error = float(np.max(np.abs(got - want)))
    _say("inference", f"{(time.monotonic() - start) * 1000:.1f} ms, max |error| vs NumPy {error:.2e}")
    if not error < 1e-2 * max(1.0, float(np.max(np.abs(want)))):
        raise BuildError(f"the test engine computed wrong results (max error {error})")
    print("selftest ok: this node can build, cache, load and run TensorRT engines")
    return 0


def _reference(model: Path, batch: Any) -> Any:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model)).graph.initializer}
    return np.maximum(batch @ weights["w1"], 0) @ weights["w2"]


__all__ = ["identity", "infer", "run"]
