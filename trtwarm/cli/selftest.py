"""``trtwarm selftest``: the first thing to run on a new cluster's GPU node.

Prints the GPU identity (NVML), the driver, CUDA driver and TensorRT versions, then builds a tiny generated ONNX
model through the whole ``trtwarm init`` path (key, lock, build, load check, publish) in a temporary cache, starts
again (a hit), and runs one inference on the engine, comparing it with NumPy. Without a GPU or TensorRT it says
exactly what is missing and exits 2.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.node import gpu
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
    memory = "memory not reported" if chosen.memory_gib is None else f"{chosen.memory_gib} GiB"
    _say("GPU", f"{chosen.name} (cc {chosen.compute_capability[0]}.{chosen.compute_capability[1]}, "
         f"{memory}{', MIG ' + chosen.mig_profile if chosen.mig_profile else ''})")
    _say("GPU UUID", chosen.uuid)
    _say("driver", f"{chosen.driver_version} (CUDA {cuda // 1000}.{cuda % 1000 // 10})")
    return chosen


def _cudart() -> Any:
    """NVIDIA's CUDA runtime bindings (``cuda-bindings``, the ``cuda`` extra), as TensorRT's own samples use them
    (``samples/python/common_runtime.py``, release/10.16: ``from cuda.bindings import runtime as cudart``).
    :raises ConfigError: not installed (exit 2), instead of loading whatever libcudart a search finds."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError as exc:
        raise ConfigError("selftest's inference needs NVIDIA's CUDA Python bindings (cuda-bindings), which are not "
                          "installed", hint="pip install 'trtwarm[tensorrt]' (it includes cuda-bindings 12.x; for a "
                          "CUDA 13 TensorRT install cuda-bindings 13.x)") from exc
    return cudart


def _check(result: Any) -> Any:
    """Every ``cuda.bindings`` call returns ``(cudaError_t, *values)``; raise on an error, return the value(s)."""
    err, *values = result
    if int(err) != 0:
        raise BuildError(f"CUDA call failed: {err!r}", hint="check the driver with nvidia-smi; the CUDA version of "
                         "cuda-bindings must not be newer than the driver supports")
    return values[0] if len(values) == 1 else (values or None)


def infer(engine_path: Path, batch: Any) -> Any:
    """Run the engine once on *batch* (the demo model's ``input``) on a stream of its own (TensorRT warns about the
    legacy default stream, which also synchronises with every other stream) and return ``output``."""
    import numpy as np
    import tensorrt as trt

    from trtwarm.builders.tensorrt.runtime import deserialize

    cudart = _cudart()
    logger = trt.Logger(trt.Logger.WARNING)
    _runtime, engine = deserialize(trt, logger, engine_path.read_bytes(), (), host_code=False)  # plugins first
    if engine is None:
        raise BuildError("TensorRT could not deserialize the selftest engine for the inference")
    context = engine.create_execution_context()
    out = np.empty((batch.shape[0], 4), dtype=np.float32)
    host = {"input": np.ascontiguousarray(batch, dtype=np.float32), "output": out}
    stream = _check(cudart.cudaStreamCreate())
    device: dict[str, int] = {}
    kinds = cudart.cudaMemcpyKind
    try:
        for name, array in host.items():
            device[name] = _check(cudart.cudaMalloc(array.nbytes))
            context.set_tensor_address(name, device[name])
        context.set_input_shape("input", host["input"].shape)
        _check(cudart.cudaMemcpyAsync(device["input"], host["input"].ctypes.data, host["input"].nbytes,
                                      kinds.cudaMemcpyHostToDevice, stream))
        if not context.execute_async_v3(int(stream)):  # stream_handle is a size_t (pyCore.cpp release/10.16 L113)
            raise BuildError("TensorRT could not run the test inference")
        _check(cudart.cudaMemcpyAsync(out.ctypes.data, device["output"], out.nbytes, kinds.cudaMemcpyDeviceToHost,
                                      stream))
        _check(cudart.cudaStreamSynchronize(stream))
    finally:
        for ptr in device.values():
            cudart.cudaFree(ptr)
        cudart.cudaStreamDestroy(stream)
    return out


def run(environ: Mapping[str, str], keep: Path | None = None) -> int:
    """The selftest; returns 0, or raises a :class:`~trtwarm.errors.TrtwarmError` saying what is missing."""
    import numpy as np

    from trtwarm.builders.tensorrt.builder import tensorrt_version
    from trtwarm.cli.demo import make_model
    from trtwarm.init.warm import warm

    identity(environ)
    try:
        dist, version = tensorrt_version()
    except ConfigError:
        _say("TensorRT", "not installed")
        raise
    _say("TensorRT", f"{version} ({dist})")
    _say("CUDA bindings", getattr(_cudart(), "__name__", "cuda.bindings.runtime"))  # before a build, not after it
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
