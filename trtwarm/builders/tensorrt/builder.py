"""The ``tensorrt`` builder (default): a serialized TensorRT engine, built and checked on this container's GPU.

Needs the ``tensorrt`` package (``pip install 'trtwarm[tensorrt]'``), the same version as the inference server's.
Written against the documented Python API of TensorRT 10.x and 11.x: a strongly typed network where precision
comes from the model (the only mode on 11.x; ``--precision model``), or on 10.x a weakly typed one with the
deprecated precision flags; ``OnnxParser.parse_from_file`` (external weights); one optimization profile from
``--shape``; the shared timing cache; a progress monitor where the API has one. Flags are applied by name
(:mod:`trtwarm.builders.tensorrt.compat`), so an option the running TensorRT lacks is a clear error, never a wrong flag.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
from importlib import metadata
from pathlib import Path
from typing import Any

from trtwarm import gpu
from trtwarm.builders.base import Builder
from trtwarm.builders.tensorrt.compat import (
    ConfigPlan,
    config_plan,
    default_precision,
    load_verdict,
    parse_version,
    plan_header,
)
from trtwarm.builders.tensorrt.network import build_plan, capturing_logger
from trtwarm.errors import ConfigError, EntryInvalid
from trtwarm.fsutil import sha256_file
from trtwarm.model import ModelFacts

log = logging.getLogger("trtwarm.build")
INSTALL_HINT = ("install TensorRT into this image: pip install 'trtwarm[tensorrt]' (the same TensorRT version as "
                "your inference server), or use --builder onnxruntime / --builder command")
#: distributions that provide the ``tensorrt`` module, most specific first (pip wheels, then NGC / system packages)
DISTRIBUTIONS = ("tensorrt-cu13-bindings", "tensorrt-cu12-bindings", "tensorrt-cu11-bindings", "tensorrt-cu13",
                 "tensorrt-cu12", "tensorrt-cu11", "tensorrt")


def tensorrt_version() -> tuple[str, str]:
    """``(distribution, version)`` of the installed TensorRT without importing it (a hit must stay fast).

    :raises ConfigError: TensorRT is not installed (exit 2, naming the extra and the pip command)
    """
    if importlib.util.find_spec("tensorrt") is None:
        raise ConfigError("--builder tensorrt needs the tensorrt Python package, which is not installed",
                          hint=INSTALL_HINT)
    for dist in DISTRIBUTIONS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    import tensorrt as trt  # a source or vendored install without metadata

    return "tensorrt", str(trt.__version__)


class TensorRTBuilder(Builder):
    """Build a serialized TensorRT engine on this container's GPU."""

    name = "tensorrt"
    engine_filename = "engine.plan"
    precisions = ("fp32", "fp16", "bf16", "int8", "fp8", "model")
    uses_trt_options = True

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._dist, self._version = tensorrt_version()
        self.major, self.minor = (parse_version(self._version) + (0, 0))[:2]
        self.phases: list[list[Any]] = []  # [phase, steps done, steps], fed by TensorRT's progress monitor
        self._plan: ConfigPlan | None = None
        self.timing_cache_used = False
        self._built = False

    @property
    def precision(self) -> str:
        """``--precision``, else ``fp16`` on TensorRT 10 and ``model`` on 11."""
        return self.settings.precision or default_precision(self.major)

    @property
    def plan(self) -> ConfigPlan:
        """The build configuration by name. :raises ConfigError: an option this TensorRT cannot honour."""
        if self._plan is None:
            self._plan = config_plan(self.settings, self.major, self.minor, self.precision)
        return self._plan

    def identity(self) -> dict[str, Any]:
        """TensorRT's exact version and the CUDA major of its wheel (None where the distribution does not say).

        Not the distribution's name itself: the same TensorRT from ``tensorrt`` or ``tensorrt-cu12-bindings``
        builds the same engines.
        """
        cuda = next((part[2:] for part in self._dist.split("-") if part[:2] == "cu" and part[2:].isdigit()), None)
        return {"name": "tensorrt", "version": self._version, "cuda": cuda}

    @functools.cached_property
    def gpu_info(self) -> gpu.GpuInfo:
        """This container's GPU whatever ``--device`` says, read once through NVML. :raises ConfigError: none."""
        return gpu.current(self.settings.environ)

    @property
    def version(self) -> str:
        """The exact TensorRT version."""
        return self._version

    def trt_fields(self) -> dict[str, Any]:
        """The TensorRT options by name; plugins by content."""
        s, plan = self.settings, self.plan
        return {"workspace": s.workspace, "opt_level": s.opt_level, "hardware_compat": s.hardware_compat,
                "version_compatible": s.version_compatible, "exclude_lean_runtime": s.exclude_lean_runtime,
                "tf32": s.tf32, "strongly_typed": plan.strongly_typed, "flags": sorted(plan.set_flags),
                "plugins": [self._plugin_field(p) for p in s.plugins]}

    @staticmethod
    def _plugin_field(path: Path) -> dict[str, Any]:
        try:
            digest, size = sha256_file(path)
        except OSError as exc:
            raise ConfigError(f"--plugin {path}: {exc.strerror}", hint="mount the plugin library into the "
                              "init container") from exc
        return {"name": path.name, "sha256": digest, "bytes": size}

    def _import(self) -> Any:
        import tensorrt as trt  # imported only to build or load: a digest-verified hit never pays for it

        if self.settings.plugins:
            for plugin in self.settings.plugins:
                ctypes.CDLL(str(plugin), mode=ctypes.RTLD_GLOBAL)
        return trt

    def build(self, model: Path, facts: ModelFacts, staging: Path) -> Path:
        """Parse, configure, build; write ``staging/engine.plan``. :raises BuildError: with TensorRT's messages."""
        trt = self._import()
        logger = capturing_logger(trt)
        blob = build_plan(self, trt, logger, model)
        self._built = True
        output = staging / self.engine_filename
        with open(output, "wb") as handle:
            handle.write(memoryview(blob))
        return output

    def report(self) -> dict[str, Any]:
        """Whether the last build started from the shared timing cache."""
        return {"timing_cache": "used" if self.timing_cache_used else "new"} if self._built else {}

    def progress(self) -> str:
        """The current build phase, for the progress lines."""
        return " > ".join(f"{name} {done}/{total}" if total else str(name) for name, done, total in self.phases[-2:])

    def precheck(self, engine: Path) -> None:
        """Before TensorRT is touched: the plan header must name this TensorRT. :raises EntryInvalid:"""
        try:
            with open(engine, "rb") as handle:
                head = handle.read(28)
        except OSError as exc:
            raise EntryInvalid(f"engine unreadable: {exc.strerror}") from exc
        reason = plan_header(head).mismatch(self._version)
        if reason:
            raise EntryInvalid(reason)

    def load(self, engine: Path, facts: ModelFacts) -> None:
        """Deserialize on this GPU with a capturing logger. :raises EntryInvalid: None, an error or a GPU warning."""
        self.precheck(engine)
        trt = self._import()
        logger = capturing_logger(trt, echo=1)
        runtime = trt.Runtime(logger)
        if self.settings.plugins:
            trt.init_libnvinfer_plugins(logger, "")
        # plans with embedded host code (the lean runtime) are executable: only for version-compatible builds
        runtime.engine_host_code_allowed = bool(self.settings.version_compatible)
        loaded = runtime.deserialize_cuda_engine(engine.read_bytes())
        verdict = load_verdict(logger.records)
        if loaded is None or verdict:
            raise EntryInvalid(f"does not load in TensorRT {self._version}: "
                               f"{verdict or 'deserialization returned None'}")
        if loaded.create_execution_context() is None:
            raise EntryInvalid(f"TensorRT could not create an execution context: {logger.tail(3)}")


__all__ = ["DISTRIBUTIONS", "INSTALL_HINT", "TensorRTBuilder", "tensorrt_version"]
