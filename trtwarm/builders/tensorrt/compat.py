"""TensorRT facts that need no TensorRT: plan headers, logger-message verdicts, and the build configuration by name.

Everything here is pure, so it is tested on every machine; :mod:`~trtwarm.builders.tensorrt.builder` applies it
to the real API. Flags are handled by *name* (``BuilderFlag.FP16``), never by number: enum values shift between
10.x and 11.x (``VERSION_COMPATIBLE`` is 13 in 10.x and 12 in 11.x).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from trtwarm.builders.tensorrt.precision import check as precision_rules
from trtwarm.config import Settings
from trtwarm.errors import ConfigError
from trtwarm.node.gpu import GpuInfo, key_fields

PLAN_MAGIC = 0x74727466  # b"ftrt" little-endian: kPLAN_FILE_TAG in trtexec's printPlanVersion
PLAN_HEADER_BYTES = 28
HARDWARE_LEVELS = {"none": "NONE", "ampere+": "AMPERE_PLUS", "same-cc": "SAME_COMPUTE_CAPABILITY"}


def parse_version(text: str) -> tuple[int, ...]:
    """``"10.16.1.11"`` (or ``"10.7.0.post1"``) -> ``(10, 16, 1, 11)``: the leading numeric parts."""
    parts = []
    for piece in text.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def canonical_version(text: str) -> str | None:
    """TensorRT's library version in the one form the key holds, ``major.minor.patch.build`` without leading zeros
    (``10.16.01.11`` -> ``10.16.1.11``); None for anything else (two or three parts, a wheel's ``.postN``): a plan
    loads only in the TensorRT of the same four numbers (the plan header stores all four), so nothing shorter is
    exact, and a ``.postN`` is a packaging revision of the wheel, not TensorRT's version."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)\.(\d+)", text.strip())
    return ".".join(str(int(part)) for part in match.groups()) if match else None


@dataclass(frozen=True)
class PlanHeader:
    """What the first 28 bytes of a serialized engine say."""

    status: str  # ok | truncated | not-a-plan | unknown-format
    version: tuple[int, int, int, int] | None = None

    def mismatch(self, running: str) -> str | None:
        """A reason to treat the plan as a miss before touching TensorRT, or None (proceed to deserialize).

        Only a readable header that names another TensorRT version, or bytes that are no plan at all, are
        verdicts; an unknown header format is left to deserialization (the layout is a sample-code convention).
        """
        if self.status == "truncated":
            return "engine is shorter than a TensorRT plan header (truncated)"
        if self.status == "not-a-plan":
            return "engine is not a TensorRT plan (wrong magic)"
        if self.status != "ok" or self.version is None:
            return None
        want = parse_version(running)
        # the header stores the build number in one byte: compare it modulo 256
        if tuple(self.version[:3]) != tuple(want[:3]) or (len(want) > 3 and self.version[3] != want[3] % 256):
            return (f"engine was built by TensorRT {'.'.join(map(str, self.version))}, this is TensorRT {running}")
        return None


def plan_header(blob: bytes) -> PlanHeader:
    """Read the plan header (trtexec ``--getPlanVersionOnly``; TensorRT 8.6 and later)."""
    if len(blob) < PLAN_HEADER_BYTES:
        return PlanHeader("truncated")
    tag, serialization = struct.unpack_from("<II", blob, 0)
    if tag != PLAN_MAGIC:
        return PlanHeader("not-a-plan")
    if serialization != 0:
        return PlanHeader("unknown-format")
    major, minor, patch, build = blob[24:28]
    return PlanHeader("ok", (major, minor, patch, build))


#: (substring of a TensorRT log message, what it means for the user)
KNOWN_MESSAGES = (
    ("Version tag does not match", "the engine was built by another TensorRT version"),
    ("expecting library version", "the engine was built by another TensorRT version"),
    ("generated on an incompatible device", "the engine was built for another GPU architecture"),
    ("different models of devices", "the engine was built on another GPU model"),
    ("Magic tag does not match", "the file is not a TensorRT engine"),
    ("empty memory buffer", "the engine file is empty"),
    ("Engine deserialization failed", "TensorRT could not deserialize the engine"),
)
ERROR, WARNING = 1, 2  # trt.ILogger.Severity: INTERNAL_ERROR 0, ERROR 1, WARNING 2, INFO 3, VERBOSE 4


def load_verdict(records: list[tuple[int, str]]) -> str | None:
    """Why a deserialization must be rejected, from the captured ``(severity, message)`` records; None if clean.

    Any ERROR (or INTERNAL_ERROR) rejects; so does the warning that the plan comes from another GPU model, which
    TensorRT does not treat as an error although it "is likely to affect performance or even cause errors".
    """
    for severity, message in records:
        known = next((why for text, why in KNOWN_MESSAGES if text in message), None)
        if severity <= ERROR:
            return f"{known or 'TensorRT reported an error'}: {message.strip()}"
        if severity == WARNING and known and ("different models" in message or "incompatible device" in message):
            return f"{known}: {message.strip()}"
    return None


@dataclass(frozen=True)
class ConfigPlan:
    """The TensorRT build configuration, by name, for one TensorRT major version."""

    strongly_typed: bool
    set_flags: tuple[str, ...]
    clear_flags: tuple[str, ...]
    hardware_level: str
    workspace: int | None
    opt_level: int | None
    profiles: tuple[dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]], ...] = field(default=())
    calibrator: str | None = None  # the trt.IInt8*Calibrator class that replays --calibration-cache
    profiling_verbosity: str = "LAYER_NAMES_ONLY"  # trt.ProfilingVerbosity member (DETAILED: per-layer precision)

    @property
    def timing_cache_flags(self) -> tuple[str, ...]:
        """The flags that make a timing cache incompatible (TF32; STRIP_PLAN, which implies REFIT_IDENTICAL)."""
        return tuple(f for f in ("TF32",) if f not in self.clear_flags) + tuple(
            f for f in ("STRIP_PLAN",) if f in self.set_flags)


def default_precision(major: int) -> str:
    """``fp16`` on TensorRT 10 (the usual deployment), ``model`` on 11 (the only choice there)."""
    return "model" if major >= 11 else "fp16"


def refuse_early(settings: Settings, major: int, minor: int) -> None:
    """Refuse, before TensorRT is imported, the combinations TensorRT would refuse later. :raises ConfigError:

    * several profiles with ``--strip-weights``: ``STRIP_PLAN`` implies ``REFIT_IDENTICAL`` (trtexec
      ``--stripWeights``, ``samples/common/sampleEngines.cpp`` release/10.16 L1006-1010), and
      ``addOptimizationProfile`` "may be called at most once when building a refittable engine"
      (``include/NvInfer.h`` release/10.16 L11419-11430, main L10830-10841);
    * ``--plugin`` libraries for a ``--version-compatible`` engine that TensorRT could not serialize into it
      (see :func:`trtwarm.builders.tensorrt.plugins.check_serializable`).
    """
    if settings.exclude_lean_runtime and not settings.version_compatible:
        raise ConfigError("--exclude-lean-runtime only applies with --version-compatible")
    if settings.hardware_compat == "same-cc" and (major, minor) < (10, 9):
        raise ConfigError(f"--hardware-compat same-cc needs TensorRT 10.9 or newer (this is {major}.{minor})",
                          hint="use --hardware-compat ampere+ or upgrade TensorRT")
    if settings.strip_weights and len(settings.profiles) > 1:
        raise ConfigError(f"--strip-weights builds a refittable engine, and TensorRT takes one optimization profile "
                          f"for a refittable engine ({len(settings.profiles)} --profile flags given)",
                          hint="give one profile (--shape or a single --profile), or drop --strip-weights")
    if settings.plugins:
        from trtwarm.builders.tensorrt.plugins import check_serializable, check_unique

        check_unique(settings.plugins)
        if settings.version_compatible:
            check_serializable(settings.plugins)


def config_plan(settings: Settings, major: int, minor: int, precision: str,
                compute_capability: tuple[int, int] | None = None, calibrator: str | None = None) -> ConfigPlan:
    """Map trtwarm's options onto TensorRT builder settings by name. :raises ConfigError: invalid for *major*.

    *calibrator* is the class :func:`~trtwarm.builders.tensorrt.precision.calibrator_for` chose for
    ``--calibration-cache``; *compute_capability* (of the build GPU) refuses e.g. BF16 before Ampere.
    """
    rule = precision_rules(precision, major, settings.hardware_compat, compute_capability,
                           bool(settings.calibration_cache))
    refuse_early(settings, major, minor)
    flags = list(rule.flags)
    if settings.version_compatible:
        flags.append("VERSION_COMPATIBLE")
        if settings.exclude_lean_runtime:
            flags.append("EXCLUDE_LEAN_RUNTIME")
    if settings.strip_weights:
        flags.append("STRIP_PLAN")  # REFIT_IDENTICAL is implied (trtexec --stripWeights, sampleEngines.cpp)
    profiles = tuple({s.name: (s.min, s.opt, s.max) for s in shapes} for shapes in settings.profiles or
                     ((settings.shapes,) if settings.shapes else ()))
    # 10.x: strong typing and precision flags are alternatives (weak flags need a weakly typed network); 11.x is
    # always strongly typed and the flag is merely ignored, so setting it is the portable idiom.
    return ConfigPlan(strongly_typed=rule.strongly_typed or major >= 11, set_flags=tuple(flags),
                      clear_flags=() if settings.tf32 else ("TF32",),
                      hardware_level=HARDWARE_LEVELS[settings.hardware_compat], workspace=settings.workspace,
                      opt_level=settings.opt_level, profiles=profiles, calibrator=calibrator,
                      profiling_verbosity="DETAILED" if settings.layer_info == "detailed" else "LAYER_NAMES_ONLY")


def built_on(manifest: dict[str, Any]) -> str:
    """``built on driver 580.65.06`` from what the builder read back after the build (``extra.engine_info``), or ""."""
    extra = manifest.get("extra")
    info = extra.get("engine_info") if isinstance(extra, dict) else None
    driver = info.get("driver_version") if isinstance(info, dict) else None
    return f"built on driver {driver}" if driver else ""


def timing_cache_id(tensorrt_version: str, gpu_info: GpuInfo, plan: ConfigPlan, cuda: str | None = None,
                    platform: str | None = None) -> str:
    """The shared timing cache's id: TensorRT version, CUDA major, the GPU *product* on this host platform and the
    flags that change tactics.

    Always the product, even when the engine is built for a class (``--hardware-compat ampere+``): TensorRT refuses
    a timing cache from another device (``set_timing_cache(cache, ignore_mismatch=False)``, ``combine(..., False)``),
    so two products sharing one file would keep replacing each other's cache. ``setTimingCache`` checks only "the
    CUDA device property" (``include/NvInfer.h`` release/10.16 L11657-11675), while a cache's content "is specific
    to the targeted device, CUDA, TensorRT versions" (builder-performance page, 10.16.1): so the id itself carries
    the CUDA major (*cuda*: the wheel's ``cuN``, else the driver's CUDA major) and the platform (*platform*, default
    this host's, in :func:`~trtwarm.node.gpu.key_fields`).
    """
    cuda = cuda or f"driver{gpu_info.cuda_driver_version // 1000}"
    doc = {"tensorrt": tensorrt_version, "cuda": cuda, "device": key_fields(gpu_info, platform=platform),
           "flags": sorted(plan.timing_cache_flags), "hardware_level": plan.hardware_level}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"trt{tensorrt_version}-{digest[:16]}"


__all__ = ["HARDWARE_LEVELS", "KNOWN_MESSAGES", "PLAN_MAGIC", "ConfigPlan", "PlanHeader", "built_on",
           "canonical_version", "config_plan", "default_precision", "load_verdict", "parse_version", "plan_header",
           "refuse_early", "timing_cache_id"]
