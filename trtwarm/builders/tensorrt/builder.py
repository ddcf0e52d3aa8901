"""The ``tensorrt`` builder (default): a serialized TensorRT engine, built and checked on this container's GPU.

Needs the ``tensorrt`` package (``pip install 'trtwarm[tensorrt]'``), the same version as the inference server's.
Written against the documented Python API of TensorRT 10.x and 11.x: a strongly typed network where precision
comes from the model (the only mode on 11.x; ``--precision model``), or on 10.x a weakly typed one with the
deprecated precision flags; ``OnnxParser.parse_from_file`` (external weights); one optimization profile from
``--shape``; the shared timing cache; a progress monitor where the API has one. Flags are applied by name
(:mod:`trtwarm.builders.tensorrt.compat`), so an option the running TensorRT lacks is a clear error, never a wrong flag.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from trtwarm.builders.base import Builder, dist_witnesses
from trtwarm.builders.tensorrt.cudamajor import cuda_major, from_dist, installed_library
from trtwarm.builders.tensorrt.compat import (
    ConfigPlan,
    built_on,
    config_plan,
    default_precision,
    load_verdict,
    parse_version,
    plan_header,
    timing_cache_id,
)
from trtwarm.builders.tensorrt.network import BuildJob, build_plan, capturing_logger
from trtwarm.builders.tensorrt.precision import PRECISIONS, calibrator_for, check_model, quantization
from trtwarm.builders.tensorrt.progress import ProgressLog
from trtwarm.builders.tensorrt.runtime import deserialize, refit_from_onnx
from trtwarm.builders.tensorrt.runtime import engine_info as read_engine_info
from trtwarm.builders.tensorrt.timing_cache import TimingCacheFile
from trtwarm.builders.tensorrt.version import INSTALL_HINT, declared_version, tensorrt_version
from trtwarm.errors import ConfigError, EntryInvalid
from trtwarm.fs.ops import TooLarge, read_bounded, sha256_file
from trtwarm.model import ModelFacts
from trtwarm.volume.layout import Layout
from trtwarm.volume.entry import read_manifest

log = logging.getLogger("trtwarm.build")
CALIBRATION_LIMIT = 64 << 20  # calibration caches are text, one line per tensor: a few hundred KiB at most
class TensorRTBuilder(Builder):
    """Build a serialized TensorRT engine on this container's GPU."""

    name = "tensorrt"
    checks_load = True
    engine_filename = "engine.plan"
    precisions = ("fp32", "fp16", "bf16", "int8", "fp8", "model")
    uses_trt_options = True

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        declared = settings.tensorrt_version
        self._dist, self._version = declared_version(declared) if declared else tensorrt_version()
        self.major, self.minor = (parse_version(self._version) + (0, 0))[:2]
        self.phases = ProgressLog()  # fed by TensorRT's progress monitor from its build threads
        self.engine_info: dict[str, Any] = {}  # what the last loaded engine reported (see runtime.engine_info)
        self._plan: ConfigPlan | None = None
        self.timing_cache_used = False
        self._built = False

    @property
    def precision(self) -> str:
        """``--precision``, else ``fp16`` on TensorRT 10 and ``model`` on 11."""
        return self.settings.precision or default_precision(self.major)

    @property
    def plan(self) -> ConfigPlan:
        """The build configuration by name. :raises ConfigError: an option this TensorRT or GPU cannot honour."""
        if self._plan is None:
            calibrator = calibrator_for(self.calibration[0][:256]) if self.calibration and self.major < 11 else None
            self._plan = config_plan(self.settings, self.major, self.minor, self.precision,
                                     self._compute_capability(), calibrator)
        return self._plan

    def _compute_capability(self) -> tuple[int, int] | None:
        """The build GPU's; None where no GPU is visible and TensorRT was only declared (``remote coverage`` plans
        keys for GPUs it does not have: the rules that need the GPU are checked where the engine is built)."""
        if self.settings.tensorrt_version:
            try:
                return self.gpu_info.compute_capability
            except ConfigError:
                return None
        return self.gpu_info.compute_capability

    @functools.cached_property
    def calibration(self) -> tuple[bytes, str] | None:
        """``--calibration-cache``'s bytes and SHA-256, read once. :raises ConfigError: unreadable or too large."""
        path = self.settings.calibration_cache
        if path is None:
            return None
        try:
            data = read_bounded(path, CALIBRATION_LIMIT, follow=True)  # the operator's (a ConfigMap's link)
        except (OSError, TooLarge) as exc:
            raise ConfigError(f"--calibration-cache {path}: {getattr(exc, 'strerror', None) or exc}",
                              hint="mount the calibration cache into the init container") from exc
        return data, hashlib.sha256(data).hexdigest()

    def identity(self) -> dict[str, Any]:
        """TensorRT's exact version and the CUDA major it runs on (:attr:`cuda`).

        Not the distribution's name itself: the same TensorRT from ``tensorrt`` or ``tensorrt-cu12-bindings``
        builds the same engines.
        """
        return {"name": "tensorrt", "version": self._version, "cuda": self.cuda}

    @functools.cached_property
    def cuda(self) -> str:
        """The CUDA major: a declared ``+cuN``, else what the installed TensorRT says (:mod:`.cudamajor`). A declared
        one must agree with the installed TensorRT where that tells. :raises ConfigError: neither says it (exit 2)"""
        declared = from_dist(self._dist) if self.settings.tensorrt_version else None
        if importlib.util.find_spec("tensorrt") is None:
            if declared:
                return declared
            raise ConfigError(f"--tensorrt-version {self._version} does not say which CUDA major the server's "
                              "TensorRT runs on, and no TensorRT is installed here to tell: a key without it would be "
                              "shared by the CUDA 12 and CUDA 13 builds of this TensorRT",
                              hint=f"give it: --tensorrt-version {self._version}+cu12 (or +cu13)")
        dist = tensorrt_version()[0] if self.settings.tensorrt_version else self._dist
        try:
            found, why = cuda_major(dist, self._version, self.settings.environ)
        except ConfigError:
            if declared:
                return declared
            raise
        if declared and declared != found:
            raise ConfigError(f"--tensorrt-version {self._version}+cu{declared} differs from the installed TensorRT, "
                              f"which runs on CUDA {found} ({why})",
                              hint="drop --tensorrt-version where TensorRT is installed, or match the server's")
        return found

    def device_probe(self) -> tuple[str, str]:
        """This container's GPU whatever ``--device`` says (:attr:`gpu_info` reads it once through NVML)."""
        return "gpu", self.settings.hardware_compat

    def replay_witnesses(self) -> list[Path] | None:
        """TensorRT's installed distribution, the plugin libraries and the calibration cache: what the key's
        ``builder`` and ``build`` sections read. None for a declared ``--tensorrt-version`` (a pull-only consumer,
        whose installed TensorRT, if any, must match it: nothing on disk pins that) or TensorRT without metadata.
        Not run here: no TensorRT on any machine of this project (docs/tensorrt.md, What has run where)."""
        if self.settings.tensorrt_version:
            return None
        found = dist_witnesses(self._dist)
        calibration = [self.settings.calibration_cache] if self.settings.calibration_cache else []
        nvinfer = installed_library(self._version, self.settings.environ)  # what the CUDA major may be read from
        libraries = [nvinfer, Path(os.path.realpath(nvinfer))] if nvinfer else []
        return None if found is None else [*found, *libraries, *self.settings.plugins, *calibration]

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
                "plugins": [self._plugin_field(p) for p in s.plugins], **self._optional_fields()}

    def _optional_fields(self) -> dict[str, Any]:
        """Fields added since the first release, present only when used, so existing keys do not change."""
        s, fields = self.settings, {}
        if self.calibration:
            fields["calibration_cache"] = {"sha256": self.calibration[1], "bytes": len(self.calibration[0]),
                                           "calibrator": self.plan.calibrator}
        if s.strip_weights:
            fields["strip_weights"] = True
        if s.layer_info == "detailed":
            fields["profiling_verbosity"] = "DETAILED"
        return fields

    @staticmethod
    def _plugin_field(path: Path) -> dict[str, Any]:
        try:
            digest, size = sha256_file(path)
        except OSError as exc:
            raise ConfigError(f"--plugin {path}: {exc.strerror}", hint="mount the plugin library into the "
                              "init container") from exc
        return {"name": path.name, "sha256": digest, "bytes": size}

    def build(self, model: Path, facts: ModelFacts, staging: Path) -> Path:
        """Parse, configure, build; write ``staging/engine.plan``. :raises BuildError: with TensorRT's messages."""
        _require_tensorrt()
        check_model(self.precision, quantization(model) if PRECISIONS[self.precision].needs else set(),
                    bool(self.calibration))
        import tensorrt as trt  # imported only to build or load: a digest-verified hit never pays for it

        logger = capturing_logger(trt)
        plan, settings = self.plan, self.settings
        cache_id = timing_cache_id(self._version, self.gpu_info, plan, self.identity()["cuda"])
        cache = TimingCacheFile(Layout(settings.cache_dir), cache_id)
        job = BuildJob(plan=plan, model=model, output=staging / self.engine_filename, plugins=settings.plugins,
                       calibration=self.calibration[0] if self.calibration else None, cache=cache,
                       progress=self.phases,
                       publish=lambda merge: cache.publish(merge, settings.identity, settings.lock_mode))
        self.timing_cache_used = build_plan(trt, logger, job)
        self._built = True
        return job.output

    def report(self) -> dict[str, Any]:
        """Whether the last build started from the shared timing cache, and what the engine reported after it."""
        if not self._built:
            return {}
        return {"timing_cache": "used" if self.timing_cache_used else "new", "engine_info": self.engine_info}

    def progress(self) -> str:
        """The current build phase, for the progress lines."""
        return self.phases.describe()

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
        """Deserialize on this GPU with a capturing logger (refitting a weight-stripped plan from the ONNX weights) and
        create an execution context. :raises EntryInvalid: None, an error or a GPU warning, or a failed refit."""
        self.precheck(engine)
        _require_tensorrt()
        import tensorrt as trt

        logger = capturing_logger(trt, echo=1)
        versioned = bool(self.settings.version_compatible)  # its plugin libraries are inside the plan (plugins.py)
        _runtime, loaded = deserialize(trt, logger, engine.read_bytes(), () if versioned else self.settings.plugins,
                                      host_code=versioned)
        logger.check()
        verdict = load_verdict(list(logger.records))
        if loaded is None or verdict:
            raise EntryInvalid(f"does not load in TensorRT {self._version} on driver "
                               f"{self.gpu_info.driver_version or 'unknown'}{_built_on(engine)}: "
                               f"{verdict or 'deserialization returned None'}")
        if self.settings.strip_weights:
            refit_from_onnx(trt, logger, loaded, self.settings.model)
        if loaded.create_execution_context() is None:
            raise EntryInvalid(f"TensorRT could not create an execution context: {logger.tail(3)}")
        try:
            info = read_engine_info(trt, loaded)
        except (AttributeError, RuntimeError, TypeError, ValueError) as exc:  # facts are a report, never a failure
            log.warning("could not read the engine's facts back: %s", exc)
            info = {"error": str(exc)}
        info.update(version_compatible=bool(self.settings.version_compatible), tensorrt=self._version,
                    driver_version=self.gpu_info.driver_version, cuda_driver_version=self.gpu_info.cuda_driver_version)
        self.engine_info = info


def _require_tensorrt() -> None:
    """A declared ``--tensorrt-version`` keys and pulls without TensorRT; building or loading needs it."""
    if importlib.util.find_spec("tensorrt") is None:
        raise ConfigError("this init has no TensorRT to build or load with (only --tensorrt-version was given)",
                          hint=INSTALL_HINT)


def _built_on(engine: Path) -> str:
    """`` (built on driver X)`` from the entry's manifest, when it has one: engines failing after a driver change
    are a known pain, and this names the change."""
    try:
        built = built_on(read_manifest(engine.parent))
    except EntryInvalid:
        return ""
    return f" ({built})" if built else ""


__all__ = ["CALIBRATION_LIMIT", "INSTALL_HINT", "TensorRTBuilder", "declared_version",
           "tensorrt_version"]
