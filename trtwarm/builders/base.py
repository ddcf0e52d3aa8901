"""The builder interface and the registry of builders.

A builder turns ``(model, build configuration)`` into an engine file inside a staging directory. It contributes
three sections of the key (its identity with exact versions, the device, the build configuration by name) and
can check that an engine actually loads. Builders live in their own modules and are imported only when chosen,
so ``--builder command`` never imports onnxruntime and a hit never imports TensorRT.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from trtwarm.node import device as devices
from trtwarm.node import gpu
from trtwarm.config import Settings
from trtwarm.errors import ConfigError
from trtwarm.model import ModelFacts, validate_shapes

log = logging.getLogger("trtwarm.build")

REGISTRY = {
    "tensorrt": "trtwarm.builders.tensorrt.builder:TensorRTBuilder",
    "onnxruntime": "trtwarm.builders.onnxruntime:OrtBuilder",
    "command": "trtwarm.builders.command:CommandBuilder",
}
#: options that only TensorRT-style builders honour; others warn and leave them out of the key.
TRT_OPTIONS = ("workspace", "opt_level", "hardware_compat", "version_compatible", "plugins", "tf32",
               "calibration_cache", "strip_weights", "layer_info")


class Builder(ABC):
    """Base class of all builders. Subclasses set :attr:`name`, :attr:`engine_filename`, :attr:`precisions`."""

    name: ClassVar[str]
    engine_filename: ClassVar[str] = "engine.plan"
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    default_precision: ClassVar[str] = "fp32"
    uses_trt_options: ClassVar[bool] = False
    checks_load: ClassVar[bool] = False  # whether :meth:`load` does check (the log says so only then)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """Return the key's ``builder`` section: name and exact versions. :raises ConfigError: not usable here."""

    @functools.cached_property
    def gpu_info(self) -> gpu.GpuInfo | None:
        """The GPU this build runs on, read once through NVML (None: the CPU). Default: the one ``--device`` selects
        (``auto``: the GPU when NVML sees one). :raises ConfigError: a GPU is required and none is visible."""
        return gpu.probe(self.device_probe()[0], self.settings.environ)

    def declare_gpu(self, info: gpu.GpuInfo) -> None:
        """Key for the declared GPU *info* instead of asking NVML (``trtwarm prewarm``, which holds no GPU). Only for
        commands that never build: a build on another GPU than its key names would poison the entry."""
        self.__dict__["gpu_info"] = info  # the cached_property's slot: what it would have read on that GPU

    def device_probe(self) -> tuple[str, str]:
        """How :meth:`device` reads the device on every start: ``(choice, hardware_compat)`` for
        :func:`trtwarm.node.gpu.probe` and :func:`trtwarm.node.gpu.key_fields` (``cpu``: nothing to read). A repeat of
        the start (:mod:`trtwarm.init.fasthit`) reads it again the same way. Default: ``--device`` and
        ``--hardware-compat``."""
        return self.settings.device, self.settings.hardware_compat

    def device(self) -> dict[str, Any]:
        """Return the key's ``device`` section: :attr:`gpu_info`'s product (or compatibility class), else the CPU."""
        info = self.gpu_info
        return devices.cpu_fields() if info is None else gpu.key_fields(info, self.device_probe()[1])

    @property
    def precision(self) -> str:
        """The requested precision, or this builder's default."""
        return self.settings.precision or self.default_precision

    def build_fields(self, facts: ModelFacts) -> dict[str, Any]:
        """Validate the build configuration against the model and return the key's ``build`` section.

        :raises ConfigError: unknown precision for this builder, or shapes that do not fit the model
        """
        s = self.settings
        if self.precision not in self.precisions:
            raise ConfigError(f"--precision {self.precision} is not supported by the {self.name} builder",
                              hint=f"choose one of: {', '.join(self.precisions)}")
        validate_shapes(facts, s.shapes)
        fields: dict[str, Any] = {"precision": self.precision, "shapes": {sp.name: sp.as_key() for sp in s.shapes},
                                  "extra": dict(s.key_extra)}
        if s.profiles:
            if not self.uses_trt_options:
                raise ConfigError(f"--profile (several optimization profiles) is for the tensorrt builder, not "
                                  f"{self.name}", hint="give one profile with --shape")
            for profile in s.profiles:
                validate_shapes(facts, profile)
            fields["profiles"] = [{sp.name: sp.as_key() for sp in profile} for profile in s.profiles]
        if self.uses_trt_options:
            fields.update(self.trt_fields())
        else:
            self._warn_ignored()
        return fields

    def trt_fields(self) -> dict[str, Any]:
        """The TensorRT-only part of the build section (overridden by the TensorRT builder)."""
        return {}

    def _warn_ignored(self) -> None:
        s = self.settings
        defaults = {f.name: f.default for f in dataclasses.fields(s)}
        given = [o for o in TRT_OPTIONS if getattr(s, o) != defaults[o]]
        if given:
            log.warning("the %s builder ignores %s; they are not part of its key", self.name,
                        ", ".join("--" + o.replace("_", "-") for o in given))

    @abstractmethod
    def build(self, model: Path, facts: ModelFacts, staging: Path) -> Path:
        """Build the engine into *staging* and return its path there. :raises BuildError: on failure."""

    def load(self, engine: Path, facts: ModelFacts) -> None:
        """Check that *engine* loads and runs here. :raises EntryInvalid: with the reason. Default: no check."""

    def precheck(self, engine: Path) -> None:
        """A cheap check on every hit, before any runtime is touched. :raises EntryInvalid: Default: none."""

    def progress(self) -> str:
        """What the build is doing now, for the progress lines ("" when the builder cannot tell)."""
        return ""

    def report(self) -> dict[str, Any]:
        """Extra facts about the last build for ``engine.json`` (e.g. whether a timing cache was used)."""
        return {}

    def replay_witnesses(self) -> list[Path] | None:
        """Files whose stat identity pins :meth:`identity` (an upgrade or reinstall changes it), so this node's
        record of a verified hit may be repeated without resolving the key again (:mod:`trtwarm.init.fasthit`).
        None, the default: nothing on disk pins this builder's identity, and every hit resolves in full."""
        return None

    def gpu_lock_id(self) -> str | None:
        """An id for the per-GPU build lock, or None for no such lock. Default: builds on a GPU (TensorRT, or e.g.
        ``trtexec`` through the command builder) are serialised per GPU, since parallel builds skew tactic timing."""
        return None if self.gpu_info is None else gpu.lock_id(self.gpu_info)


def dist_witnesses(name: str) -> list[Path] | None:
    """For :meth:`Builder.replay_witnesses`: the ``METADATA`` of the installed distribution *name* and every
    directory on ``sys.path`` (installing or removing a package in any of them, e.g. another version earlier on the
    path, changes that directory). None: not found."""
    import sys
    from importlib import metadata

    try:
        found = [Path(str(f.locate())) for f in metadata.distribution(name).files or () if f.name == "METADATA"]
    except metadata.PackageNotFoundError:
        return None
    searched = [Path(p or ".").absolute() for p in sys.path]
    return [found[0], *dict.fromkeys(p for p in searched if p.exists())] if found else None


def get_builder(settings: Settings) -> Builder:
    """Instantiate the builder named by ``settings.builder``. :raises ConfigError: unknown builder."""
    target = REGISTRY.get(settings.builder)
    if target is None:
        raise ConfigError(f"unknown builder {settings.builder!r}", hint=f"choose one of: {', '.join(REGISTRY)}")
    module, _, cls = target.partition(":")
    builder: Builder = getattr(importlib.import_module(module), cls)(settings)
    return builder


__all__ = ["REGISTRY", "TRT_OPTIONS", "Builder", "get_builder"]
