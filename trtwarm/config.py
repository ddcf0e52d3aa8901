"""Settings: argv and ``TRTWARM_*`` environment variables, read once into a frozen object and passed down.

This is the only module that reads the environment, and it only does so when :func:`env_defaults` or
:func:`Settings.from_namespace` is called with the mapping (``os.environ`` in production, a dict in tests).
Flag ``--lock-timeout`` is also ``TRTWARM_LOCK_TIMEOUT``; a flag on the command line wins over the variable.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trtwarm.errors import ConfigError
from trtwarm.model import ShapeSpec, shape_set

DEFAULT_CACHE_DIR = Path("/models/cache")
DEFAULT_HANDOFF_DIR = Path("/trtwarm")
TRUE_VALUES = frozenset({"1", "on", "yes", "true"})
FALSE_VALUES = frozenset({"0", "off", "no", "false", ""})

_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_size(text: str) -> int:
    """Parse ``4096``, ``512M``, ``4G``, ``1.5T`` (binary units, optional ``i``/``B``) into bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not match:
        raise ConfigError(f"invalid size {text!r}", hint="use bytes or a K/M/G/T suffix, e.g. 4G")
    return int(float(match[1]) * _SIZE_UNITS[match[2]])


#: the longest duration accepted (about 31 years): longer ones overflow the waits that use them
MAX_DURATION = 1e9


def parse_duration(text: str, flag: str | None = None, *, positive: bool = False) -> float:
    """Parse ``90``, ``90s``, ``10m``, ``2h``, ``30d`` into seconds.

    :param flag: named in the error (``--scan-interval``)
    :param positive: refuse 0: an interval or a timeout of 0 is a busy loop or no wait at all, never what was
        meant (ages and graces, e.g. ``gc --max-age 0s``, may be 0)
    :raises ConfigError: not a duration, 0 where *positive*, or longer than :data:`MAX_DURATION`
    """
    what = f"{flag} {text!r}" if flag else repr(text)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text.lower())
    if not match:
        raise ConfigError(f"invalid duration {what}", hint="use seconds or an s/m/h/d suffix, e.g. 30m")
    seconds = float(match[1]) * _DURATION_UNITS[match[2]]
    if positive and seconds <= 0:
        raise ConfigError(f"{what} is zero: an interval or a timeout must be longer than 0",
                          hint=f"give {flag or 'it'} a duration above 0, e.g. 10s")
    if seconds > MAX_DURATION:
        raise ConfigError(f"{what} is longer than {MAX_DURATION:.0f} s (about 31 years)", hint="give a shorter one")
    return seconds


def parse_bool(text: str, name: str) -> bool:
    """Parse a boolean environment value (1/on/yes/true, 0/off/no/false)."""
    value = text.strip().lower()
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    raise ConfigError(f"invalid boolean {text!r} for {name}", hint="use 1/0, true/false, yes/no or on/off")


def parse_key_extra(pair: str) -> tuple[str, str]:
    """Parse ``K=V`` for ``--key-extra``."""
    key, sep, value = pair.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"malformed --key-extra {pair!r}", hint="use --key-extra NAME=VALUE")
    return key.strip(), value


@dataclass(frozen=True)
class Identity:
    """Who is running: from the downward API (``POD_NAME``, ``POD_NAMESPACE``, ``NODE_NAME``), else the host; and
    the CI job that runs it (``TRTWARM_CI_JOB``, e.g. a pipeline URL), recorded in manifests and signatures."""

    pod: str | None
    namespace: str | None
    node: str | None
    hostname: str
    ci_job: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Identity:
        """Read the identity from *environ*."""
        return cls(environ.get("POD_NAME") or None, environ.get("POD_NAMESPACE") or None,
                   environ.get("NODE_NAME") or None, os.uname().nodename, environ.get("TRTWARM_CI_JOB") or None)

    def describe(self) -> str:
        """Return ``pod X on node Y`` (or the hostname when not in a Pod)."""
        if self.pod:
            return f"pod {self.namespace + '/' if self.namespace else ''}{self.pod} on node {self.node or '?'}"
        return f"host {self.hostname}"


@dataclass(frozen=True)
class Settings:
    """Everything ``trtwarm init`` and ``trtwarm key`` need, validated once."""

    model: Path
    cache_dir: Path = DEFAULT_CACHE_DIR
    builder: str = "tensorrt"
    precision: str | None = None
    shapes: tuple[ShapeSpec, ...] = ()
    profiles: tuple[tuple[ShapeSpec, ...], ...] = ()  # several optimization profiles (TensorRT); else ``shapes``
    workspace: int | None = None
    opt_level: int | None = None
    hardware_compat: str = "none"
    version_compatible: bool = False
    exclude_lean_runtime: bool = False
    tf32: bool = True
    plugins: tuple[Path, ...] = ()
    calibration_cache: Path | None = None
    strip_weights: bool = False
    layer_info: str = "names"
    name: str | None = None
    handoff_dir: Path = DEFAULT_HANDOFF_DIR
    handoff: str | None = None  # --handoff copy|link; None: copy under an enforced trust policy, else link
    lock_timeout: float = 3600.0
    lock_mode: str = "auto"
    progress_interval: float = 10.0
    events_timeout: float = 2.0
    key_extra: tuple[tuple[str, str], ...] = ()
    build_command: str | None = None
    builder_version: str | None = None
    ort_provider: str = "cpu"
    device: str = "auto"
    read_only: bool = False
    verify: str = "digest"
    stamp_dir: Path | None = None  # --verify stamp: node-local stamps (default <handoff_dir>/stamps)
    stamp_max_age: float = 86400.0
    log_format: str = "text"
    triton_repo: Path | None = None
    triton_model: str | None = None
    remote: str | None = None  # s3://bucket/prefix of the central engine repository (trtwarm.remote)
    remote_push: str = "best-effort"
    seed_caches: tuple[Path, ...] = ()  # --seed-cache: read-only lower tiers, e.g. an engine image (trtwarm.init.seed)
    insecure_registry: bool = False  # --plain-http: plain HTTP to an oci:// registry (trtwarm.remote.oci)
    tensorrt_version: str | None = None  # declared TensorRT version (pull-only consumers without TensorRT)
    termination_log: Path = Path("/dev/termination-log")
    trust_policy: Path | None = None  # --trust-policy: which keys are trusted for which entries (trtwarm.trust)
    trust_mode: str | None = None  # --trust-mode: enforce|warn|off, overriding the policy file's mode
    signing_key: Path | None = None  # --signing-key: sign what this Pod publishes
    identity: Identity = field(default_factory=lambda: Identity(None, None, None, os.uname().nodename))
    start_args: tuple[str, ...] = ()  # ``trtwarm init``'s own arguments as given (the hit record's start); else ()
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
        """Validate parsed flags (already defaulted from the environment) into Settings."""
        shapes, profiles = _checked(ns)
        triton_repo, triton_model = getattr(ns, "triton_repo", None), getattr(ns, "triton_model", None)
        return cls(
            model=Path(ns.model).absolute(), cache_dir=Path(ns.cache_dir).absolute(), builder=ns.builder,
            precision=ns.precision, shapes=shapes, profiles=profiles,
            workspace=parse_size(ns.workspace) if ns.workspace else None, opt_level=ns.opt_level,
            hardware_compat=ns.hardware_compat, version_compatible=ns.version_compatible,
            exclude_lean_runtime=ns.exclude_lean_runtime, tf32=ns.tf32 == "on",
            plugins=tuple(Path(p) for p in ns.plugin),
            calibration_cache=Path(ns.calibration_cache).absolute() if ns.calibration_cache else None,
            strip_weights=ns.strip_weights, layer_info=ns.layer_info, name=ns.name,
            handoff_dir=Path(ns.handoff_dir).absolute(), handoff=getattr(ns, "handoff", None) or None,
            lock_timeout=parse_duration(ns.lock_timeout, "--lock-timeout", positive=True), lock_mode=ns.lock_mode,
            progress_interval=parse_duration(ns.progress_interval, "--progress-interval", positive=True),
            events_timeout=parse_duration(ns.events_timeout, "--events-timeout", positive=True),
            key_extra=tuple(sorted(parse_key_extra(p) for p in ns.key_extra)), build_command=ns.build_command,
            builder_version=ns.builder_version, ort_provider=ns.ort_provider, device=ns.device,
            read_only=ns.read_only, verify=ns.verify, log_format=ns.log_format,
            stamp_dir=Path(getattr(ns, "stamp_dir", None) or Path(ns.handoff_dir) / "stamps").absolute(),
            stamp_max_age=parse_duration(getattr(ns, "stamp_max_age", None) or "1d", "--stamp-max-age"),
            triton_repo=Path(triton_repo).absolute() if triton_repo else None, triton_model=triton_model,
            remote=getattr(ns, "remote", None) or None, remote_push=getattr(ns, "remote_push", "best-effort"),
            insecure_registry=bool(getattr(ns, "insecure_registry", False)),
            seed_caches=tuple(Path(p).absolute() for p in getattr(ns, "seed_cache", None) or ()),
            tensorrt_version=getattr(ns, "tensorrt_version", None) or None,
            termination_log=termination_log_path(environ),
            trust_policy=_path_or_none(getattr(ns, "trust_policy", None)),
            trust_mode=getattr(ns, "trust_mode", None) or None,
            signing_key=_path_or_none(getattr(ns, "signing_key", None)),
            identity=Identity.from_env(environ), environ=dict(environ),
            start_args=tuple(getattr(ns, "start_args", ())),
        )


def _checked(ns: argparse.Namespace) -> tuple[tuple[ShapeSpec, ...], tuple[tuple[ShapeSpec, ...], ...]]:
    """The checks of flags that only make sense together; ``(shapes, profiles)``. :raises ConfigError:"""
    if not ns.model:
        raise ConfigError("no model given", hint="pass --model PATH (or set TRTWARM_MODEL)")
    shapes = shape_set(ns.shape, "--shape")
    profiles = tuple(shape_set([p for p in spec.split(";") if p.strip()], "--profile")
                     for spec in getattr(ns, "profile", []))
    if profiles and shapes:
        raise ConfigError("--shape and --profile do not mix", hint="with several optimization profiles, give "
                          "every one as --profile 'NAME=MIN:OPT:MAX;NAME=...' (the first is the default profile)")
    triton_repo, triton_model = getattr(ns, "triton_repo", None), getattr(ns, "triton_model", None)
    if bool(triton_repo) != bool(triton_model) or (triton_model and not re.fullmatch(r"[A-Za-z0-9_.-]+",
                                                                                     triton_model)):
        raise ConfigError("--triton-repo and --triton-model go together; the model name is a directory name",
                          hint="e.g. --triton-repo /trtwarm/triton --triton-model resnet50")
    if ns.opt_level is not None and not 0 <= ns.opt_level <= 5:
        raise ConfigError(f"--opt-level {ns.opt_level} is out of range", hint="use 0 to 5 (TensorRT's default is 3)")
    return shapes, profiles


def _path_or_none(value: str | None) -> Path | None:
    return Path(value).absolute() if value else None


def termination_log_path(environ: Mapping[str, str]) -> Path:
    """Where the Kubernetes termination message goes: ``TRTWARM_TERMINATION_LOG``, else ``/dev/termination-log``."""
    return Path(environ.get("TRTWARM_TERMINATION_LOG", "/dev/termination-log"))


def env_name(flag: str) -> str:
    """Return the environment variable for a long flag: ``--lock-timeout`` → ``TRTWARM_LOCK_TIMEOUT``."""
    return "TRTWARM_" + flag.lstrip("-").upper().replace("-", "_")


def env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Make every long option of *parser* default to its ``TRTWARM_*`` variable, when that is set.

    Repeatable options take a comma- or whitespace-separated list; switches take a boolean value.
    """
    hint = f"unset it, or fix it: `{parser.prog} --help` lists the flags and their variables"
    for action in parser._actions:  # argparse has no public iterator over actions
        flags = [o for o in action.option_strings if o.startswith("--")]
        if not flags or flags[0] in ("--help",):
            continue
        value = environ.get(env_name(flags[0]))
        if value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            try:
                action.default = parse_bool(value, env_name(flags[0]))
            except ConfigError as exc:
                raise ConfigError(exc.message, hint=hint) from None
        elif isinstance(action, argparse._AppendAction):
            action.default = [v for v in re.split(r"[,\s]+", value) if v]
        elif action.type is int:
            try:
                action.default = int(value)
            except ValueError:
                raise ConfigError(f"{env_name(flags[0])}={value!r} is not an integer", hint=hint) from None
        elif action.choices and value not in action.choices:
            raise ConfigError(f"{env_name(flags[0])}={value!r}: choose from {', '.join(action.choices)}", hint=hint)
        else:
            action.default = value


__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_HANDOFF_DIR",
    "Identity",
    "Settings",
    "env_defaults",
    "env_name",
    "parse_bool",
    "parse_duration",
    "parse_key_extra",
    "parse_size",
]
