"""trtwarm: build a TensorRT (or ONNX Runtime) engine once per cache key on a shared volume, reuse it everywhere.

At the top: :mod:`trtwarm.init.warm` (the init-container algorithm), :mod:`trtwarm.key` (what makes two engines
interchangeable), :mod:`trtwarm.model`, :mod:`trtwarm.config`, :mod:`trtwarm.errors` and :mod:`trtwarm.cli.main`.
The rest is grouped by concept: :mod:`trtwarm.volume` (the shared volume's machinery), :mod:`trtwarm.builders`
(the builder interface and each builder), :mod:`trtwarm.lifecycle` (the operator's commands) and
:mod:`trtwarm.sidecar` (metrics and readiness). Heavy libraries (onnx, onnxruntime, tensorrt, prometheus_client)
are imported lazily so a cache hit stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
