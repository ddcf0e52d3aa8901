"""The TensorRT build itself: network, parser, builder config, timing cache, ``build_serialized_network``.

Follows NVIDIA's own 10.x/11.x samples (``samples/python/introductory_parser_samples``, ``common.py``): the portable
``1 << STRONGLY_TYPED`` network flag, ``parse_from_file`` for external weights, ``set_memory_pool_limit`` for the
workspace, one ``add_optimization_profile`` per profile, a strict ``set_timing_cache`` and a ``None`` check on the
serialized plan. Only :mod:`trtwarm.builders.tensorrt.builder` calls it, with ``tensorrt`` imported.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from trtwarm.builders.tensorrt.compat import ConfigPlan, timing_cache_id
from trtwarm.builders.tensorrt.timing_cache import TimingCacheFile
from trtwarm.errors import BuildError, ConfigError

log = logging.getLogger("trtwarm.build")


def capturing_logger(trt: Any, echo: int = 2) -> Any:
    """A ``trt.ILogger`` that keeps ``(severity, message)`` records and echoes warnings and errors to our log."""

    class CapturingLogger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)  # the binding requires the explicit base __init__
            self.records: list[tuple[int, str]] = []

        def log(self, severity: Any, msg: str) -> None:
            level = int(severity)
            self.records.append((level, msg))
            if level <= echo:
                log.log(logging.ERROR if level <= 1 else logging.WARNING, "TensorRT: %s", msg)

        def tail(self, n: int = 20) -> str:
            return "\n".join([m for s, m in self.records if s <= 2][-n:])

    return CapturingLogger()


def progress_monitor(trt: Any, phases: list[list[Any]]) -> Any | None:
    """A ``trt.IProgressMonitor`` keeping ``[phase, steps done, steps]`` entries in *phases* (None: no such API)."""
    if not hasattr(trt, "IProgressMonitor"):
        return None

    class Monitor(trt.IProgressMonitor):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            phases.append([phase_name, 0, num_steps])

        def step_complete(self, phase_name: str, step: int) -> bool:
            if phases and phases[-1][0] == phase_name:
                phases[-1][1] = step + 1
            return True  # False would cancel the build

        def phase_finish(self, phase_name: str) -> None:
            if phases and phases[-1][0] == phase_name:
                phases.pop()

    return Monitor()


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


def parse(trt: Any, net: Any, logger: Any, model: Path) -> None:
    """Parse the ONNX file by path (so external weights are found). :raises BuildError: every parser error."""
    parser = trt.OnnxParser(net, logger)
    if not parser.parse_from_file(str(model)):
        errors = parser_errors(parser)
        for line in errors:
            log.error("ONNX parser: %s", line)
        raise BuildError(f"TensorRT could not parse {model.name}: {errors[0] if errors else 'unknown error'}",
                         hint="the operator or attribute above is not supported by this TensorRT; see the ONNX "
                         "operator support matrix, or export the model with another opset",
                         log_tail="\n".join(errors))


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
    for shapes in plan.profiles:
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in shapes.items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)
    return config


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


def build_plan(builder_: Any, trt: Any, logger: Any, model: Path) -> bytes:
    """Build the serialized engine for *builder_* (a TensorRTBuilder). :raises BuildError: with TensorRT's errors."""
    plan, settings = builder_.plan, builder_.settings
    builder = trt.Builder(logger)
    if settings.plugins:
        trt.init_libnvinfer_plugins(logger, "")
    net = network(trt, builder, plan)
    parse(trt, net, logger, model)
    config = configure(trt, builder, plan)
    monitor = progress_monitor(trt, builder_.phases)
    if monitor is not None:
        config.progress_monitor = monitor
    from trtwarm.volume.layout import Layout

    cache = TimingCacheFile(Layout(settings.cache_dir), timing_cache_id(builder_.version, builder_.device(), plan))
    builder_.timing_cache_used = load_timing_cache(config, cache)
    start = time.monotonic()
    serialized = builder.build_serialized_network(net, config)
    if serialized is None:
        raise BuildError("TensorRT could not build the engine (build_serialized_network returned None)",
                         log_tail=logger.tail())
    log.info("TensorRT built the engine in %.1f s (timing cache %s)", time.monotonic() - start,
             "used" if builder_.timing_cache_used else "new")
    cache.publish(lambda current: merge_timing_cache(config, current), settings.identity, settings.lock_mode)
    return bytes(serialized)


__all__ = ["build_plan", "capturing_logger", "configure", "load_timing_cache", "merge_timing_cache", "network", "parse",
           "parser_errors", "progress_monitor"]
