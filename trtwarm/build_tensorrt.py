"""The ``tensorrt`` builder (default). Needs the ``tensorrt`` package: ``pip install 'trtwarm[tensorrt]'``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from trtwarm.builders import Builder
from trtwarm.errors import BuildError, ConfigError
from trtwarm.model import ModelFacts

INSTALL_HINT = ("install TensorRT into this image: pip install 'trtwarm[tensorrt]' (the same TensorRT version as "
                "your inference server), or use --builder onnxruntime / --builder command")


class TensorRTBuilder(Builder):
    """Build a serialized TensorRT engine on this container's GPU."""

    name = "tensorrt"
    engine_filename = "engine.plan"
    precisions = ("fp32", "fp16", "bf16", "int8", "fp8", "model")
    default_precision = "fp16"
    uses_trt_options = True

    def identity(self) -> dict[str, Any]:
        """TensorRT's exact version. :raises ConfigError: TensorRT is not installed (exit 2)."""
        if importlib.util.find_spec("tensorrt") is None:
            raise ConfigError("--builder tensorrt needs the tensorrt Python package, which is not installed",
                              hint=INSTALL_HINT)
        raise ConfigError("the TensorRT builder is not available in this trtwarm version", hint=INSTALL_HINT)

    def build(self, model: Path, facts: ModelFacts, staging: Path) -> Path:
        """Not reached: :meth:`identity` refuses first."""
        raise BuildError("the TensorRT builder is not available in this trtwarm version")


__all__ = ["INSTALL_HINT", "TensorRTBuilder"]
