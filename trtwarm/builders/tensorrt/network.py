"""The TensorRT build itself: plugins, network, parser, builder config, calibration, timing cache, serialization.

Follows NVIDIA's own 10.x/11.x samples (``samples/python/introductory_parser_samples``, ``common.py``): the portable
``1 << STRONGLY_TYPED`` network flag, ``parse_from_file`` for external weights, ``set_memory_pool_limit`` for the
workspace, one ``add_optimization_profile`` per profile, a strict ``set_timing_cache``; the plugin registry is ready
before the builder exists (:func:`~trtwarm.builders.tensorrt.runtime.ready`), and the plan is streamed to its file
(``build_serialized_network_to_stream``, 10.13+) or written from its buffer without a copy. Only
:mod:`trtwarm.builders.tensorrt.builder` calls it, with ``tensorrt`` imported (tests pass a recording stand-in).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from trtwarm.builders.tensorrt.compat import ConfigPlan
from trtwarm.builders.tensorrt.logger import capturing_logger
from trtwarm.builders.tensorrt.plugins import serialize_plugins
from trtwarm.builders.tensorrt.progress import ProgressLog, progress_monitor, run_cancellable
from trtwarm.builders.tensorrt.runtime import ready
from trtwarm.builders.tensorrt.timing_cache import TimingCacheFile
from trtwarm.errors import BuildError, ConfigError

log = logging.getLogger("trtwarm.build")


def parser_errors(parser: Any) -> list[str]:
    """Every ONNX parser error as ``node N (name, Op): message``."""
    out = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        name = getattr(err, "node_name", lambda: "")()
        op = getattr(err, "node_operator", lambda: "")()
        where = f"node {err.node()}" + (f" ({name}, {op})" if name or op else "")
        out.append(f"{where}: {err.desc()}")
    return out


def _flag(trt: Any, name: str) -> Any:
    flag = getattr(trt.BuilderFlag, name, None)
    if flag is None:
        raise ConfigError(f"this TensorRT ({trt.__version__}) has no BuilderFlag.{name}",
                          hint="drop the option that needs it, or use a TensorRT version that has it")
    return flag


def network(trt: Any, builder: Any, plan: ConfigPlan) -> Any:
    """An explicit-batch network; strongly typed when the plan says so (on 11.x the flag is ignored: always on)."""
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if plan.strongly_typed else 0
    return builder.create_network(flags)


def parse(trt: Any, net: Any, logger: Any, model: Path) -> Any:
    """Parse the ONNX file by path (so external weights are found) and return the parser, which must live until the
    build ends (it owns the weights the network points to). :raises BuildError: every parser error."""
    parser = trt.OnnxParser(net, logger)
    if not parser.parse_from_file(str(model)):
        errors = parser_errors(parser)
        for line in errors:
            log.error("ONNX parser: %s", line)
        raise BuildError(f"TensorRT could not parse {model.name}: {errors[0] if errors else 'unknown error'}",
                         hint="the operator or attribute above is not supported by this TensorRT; see the ONNX "
                         "operator support matrix, or export the model with another opset",
                         log_tail="\n".join(errors))
    return parser


def configure(trt: Any, builder: Any, plan: ConfigPlan) -> Any:
    """The builder config from the plan (by flag name)."""
    config = builder.create_builder_config()
    if plan.workspace:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, plan.workspace)
    if plan.opt_level is not None:
        config.builder_optimization_level = plan.opt_level
    config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, plan.hardware_level)
    for name in plan.set_flags:
        config.set_flag(_flag(trt, name))
    for name in plan.clear_flags:
        config.clear_flag(_flag(trt, name))
    config.profiling_verbosity = getattr(trt.ProfilingVerbosity, plan.profiling_verbosity)
    for number, shapes in enumerate(plan.profiles, 1):
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in shapes.items():
            profile.set_shape(name, low, opt, high)
        # the profile's index, or -1 "for invalid input" (NvInfer.h release/10.16 L11419-11430; pyCore.cpp binds it
        # as an int): e.g. a second profile for a refittable engine, min > max, or a name the network lacks
        if config.add_optimization_profile(profile) < 0:
            raise BuildError(f"TensorRT refused optimization profile {number} ({', '.join(shapes)})",
                             hint="check each --shape/--profile: every dynamic input of the model, min <= opt <= "
                             "max, and one profile only with --strip-weights")
    return config


def cache_calibrator(trt: Any, class_name: str, cache: bytes) -> Any:
    """A calibrator that only replays an existing cache, as ``trtexec --int8 --calib=FILE`` does.

    TensorRT 10.x ``python/src/infer/pyInt8.cpp`` (release/10.16): the trampoline calls ``get_batch(names)`` (None:
    no more data), ``read_calibration_cache()`` (a buffer, or None to calibrate) and ``write_calibration_cache``.
    With a valid cache TensorRT never asks for a batch; if it rejects the cache, ``get_batch`` returns None and the
    build fails instead of silently calibrating on nothing.
    """
    base = getattr(trt, class_name)

    class ReplayCalibrator(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)

        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names: list[str]) -> None:
            log.error("TensorRT asked for calibration data: it did not accept --calibration-cache")
            return None

        def read_calibration_cache(self) -> bytes:
            return cache

        def write_calibration_cache(self, data: Any) -> None:
            return None

    return ReplayCalibrator()


def set_calibration(trt: Any, builder: Any, config: Any, plan: ConfigPlan, cache: bytes) -> Any:
    """Attach the replay calibrator (10.x ``config.int8_calibrator``, pyCore.cpp release/10.16 L1820) and, for
    dynamic shapes, a calibration profile at the first profile's opt shapes (``set_calibration_profile`` L1834, as
    trtexec's ``setupNetworkAndConfig`` does). Returns the calibrator: it must live until the build ends."""
    calibrator = cache_calibrator(trt, str(plan.calibrator), cache)
    config.int8_calibrator = calibrator
    if plan.profiles:
        profile = builder.create_optimization_profile()
        for name, (_low, opt, _high) in plan.profiles[0].items():
            profile.set_shape(name, opt, opt, opt)
        config.set_calibration_profile(profile)
    return calibrator


def load_timing_cache(config: Any, cache: TimingCacheFile) -> bool:
    """Give the build the shared timing cache, strictly; a corrupt or mismatched one is ignored (and replaced)."""
    data = cache.read()
    if data:
        try:
            loaded = config.create_timing_cache(data)
            if loaded is not None and config.set_timing_cache(loaded, False):
                return True
        except (RuntimeError, TypeError, ValueError) as exc:  # the bindings raise on a malformed cache
            log.debug("timing cache rejected: %s", exc)
        log.warning("timing cache %s is corrupt or from another device or TensorRT; building without it and "
                    "replacing it", cache.path.name)
    config.set_timing_cache(config.create_timing_cache(b""), False)
    return False


def merge_timing_cache(config: Any, current: bytes | None) -> bytes | None:
    """The build's timing cache combined into the file's current one (or alone, if that one is unusable)."""
    ours = config.get_timing_cache()
    if current:
        try:
            theirs = config.create_timing_cache(current)
            if theirs is not None and theirs.combine(ours, False):
                return bytes(theirs.serialize())
        except (RuntimeError, TypeError, ValueError) as exc:
            log.debug("cannot merge into the current timing cache: %s", exc)
    return bytes(ours.serialize())


@dataclass
class BuildJob:
    """What one build needs besides TensorRT: the configuration by name and where things go."""

    plan: ConfigPlan
    model: Path
    output: Path
    plugins: tuple[Path, ...] = ()
    calibration: bytes | None = None
    cache: TimingCacheFile | None = None
    progress: ProgressLog = field(default_factory=ProgressLog)
    publish: Callable[[Callable[[bytes | None], bytes | None]], bool] | None = None


def file_writer(trt: Any, handle: BinaryIO) -> Any:
    """A ``trt.IStreamWriter`` that appends each chunk to *handle* (``write(data) -> bytes written``; the binding's
    ``PyStreamWriter`` passes one ``bytes`` argument, pyCore.cpp release/10.16 L874-905)."""

    class FileWriter(trt.IStreamWriter):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IStreamWriter.__init__(self)
            self.error: OSError | None = None

        def write(self, data: bytes) -> int:
            try:
                return handle.write(data)
            except OSError as exc:  # the binding would swallow it into "0 bytes written": keep it for the caller
                self.error = exc
                return 0

    return FileWriter()


def serialize_to(trt: Any, builder: Any, net: Any, config: Any, output: Path) -> bool:
    """Build straight into *output*: ``build_serialized_network_to_stream`` (10.13+) never holds the whole plan in
    host memory; before 10.13, ``build_serialized_network`` and one write from its buffer (no ``bytes()`` copy)."""
    with open(output, "wb") as handle:
        if hasattr(builder, "build_serialized_network_to_stream"):
            writer = file_writer(trt, handle)
            done = bool(builder.build_serialized_network_to_stream(net, config, writer))
            if writer.error is not None:
                raise writer.error  # a full or read-only volume, reported as such by warm
            return done
        serialized = builder.build_serialized_network(net, config)
        if serialized is None:
            return False
        handle.write(memoryview(serialized))
        return True


def build_plan(trt: Any, logger: Any, job: BuildJob) -> bool:
    """Build the serialized engine into ``job.output``; return whether the shared timing cache was used.

    The plugin registry is ready before anything else touches TensorRT (:func:`~.runtime.ready`). The TensorRT calls
    run in a worker thread that SIGTERM cancels through the progress monitor (:func:`~.progress.run_cancellable`).
    :raises BuildError: with TensorRT's errors; :raises ConfigError: an option this TensorRT lacks
    """
    used = run_cancellable(lambda: _build(trt, logger, job), job.progress)
    logger.check()
    return used


def _build(trt: Any, logger: Any, job: BuildJob) -> bool:
    versioned = "VERSION_COMPATIBLE" in job.plan.set_flags
    handles = ready(trt, logger, job.plugins, versioned)  # a version-compatible build: through the registry
    builder = trt.Builder(logger)
    net = network(trt, builder, job.plan)
    parser = parse(trt, net, logger, job.model)
    config = configure(trt, builder, job.plan)
    if versioned:
        log.info("plugin libraries serialized into the engine: %s", serialize_plugins(config, parser, job.plugins))
    calibrator = set_calibration(trt, builder, config, job.plan, job.calibration) if job.calibration else None
    monitor = progress_monitor(trt, job.progress)
    if monitor is not None:
        config.progress_monitor = monitor
    used = load_timing_cache(config, job.cache) if job.cache else False
    start = time.monotonic()
    built = serialize_to(trt, builder, net, config, job.output)
    if job.progress.cancelled:
        raise BuildError("the TensorRT build was cancelled")  # the waiting thread raises the signal's exception
    if not built:
        raise BuildError("TensorRT could not build the engine (build_serialized_network returned None)",
                         log_tail=logger.tail())
    del calibrator, parser, handles  # kept alive through the build: TensorRT holds only raw pointers to them
    log.info("TensorRT built the engine in %.1f s (timing cache %s)", time.monotonic() - start,
             "used" if used else "new")
    if job.cache and job.publish:
        job.publish(lambda current: merge_timing_cache(config, current))
    return used


__all__ = ["BuildJob", "build_plan", "cache_calibrator", "capturing_logger", "configure", "file_writer",
           "load_timing_cache", "merge_timing_cache", "network", "parse", "parser_errors", "serialize_to"]
