"""trtwarm: build a TensorRT (or ONNX Runtime) engine once per cache key on a shared volume, reuse it everywhere.

The package is flat, one concept per module: :mod:`trtwarm.key` (what makes two engines interchangeable),
:mod:`trtwarm.layout` (where things live on the volume), :mod:`trtwarm.lock` (single-flight),
:mod:`trtwarm.store` (verified lookup and atomic publish), :mod:`trtwarm.builders` (the builder interface),
:mod:`trtwarm.warm` (the init-container algorithm) and :mod:`trtwarm.cli` (entrypoints and exit codes).
Heavy libraries (onnx, onnxruntime, tensorrt, prometheus_client) are imported lazily so a cache hit stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
