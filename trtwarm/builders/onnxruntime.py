"""The ``onnxruntime`` builder: an ORT-optimised model for the node's execution provider.

Build = an ``InferenceSession`` with full graph optimisation writing ``optimized_model_filepath``; load = a new
session on the artifact plus one inference on zeros of the opt shapes. ``--ort-provider`` picks the execution
provider (``cpu`` here; ``cuda`` or ``tensorrt`` on a GPU node with onnxruntime-gpu). This is the builder CI drives
end to end.
"""

from __future__ import annotations

import logging
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from trtwarm.builders.base import Builder, dist_witnesses
from trtwarm.builders.ort_tensorrt import (
    PINNED_OPTIONS,
    build_info,
    check_context_model,
    check_ort_for_tensorrt,
    ep_cuda_major,
    ep_options,
    ep_tensorrt_version,
    ignored_environment,
    warmup_shapes,
)
from trtwarm.errors import BuildError, ConfigError, EntryInvalid
from trtwarm.model import ModelFacts

log = logging.getLogger("trtwarm.build")
_SAID: set[str] = set()  # the ignored variables already named in this process's log
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
_DTYPES = {"float": "float32", "float16": "float16", "double": "float64", "int64": "int64", "int32": "int32",
           "int8": "int8", "uint8": "uint8", "bool": "bool", "bfloat16": "float32"}


def ort_errors() -> tuple[type[BaseException], ...]:
    """ONNX Runtime's own exception types (they derive from Exception directly), plus RuntimeError/ValueError."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    own = [v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception)]
    return (RuntimeError, ValueError, *own)


def ort_version() -> tuple[str, str]:
    """Return ``(distribution, version)`` of the ONNX Runtime ``import onnxruntime`` loads, without importing it.

    What the package's own files say (:func:`~trtwarm.builders.ort_tensorrt.build_info`: ``package_name``,
    ``__version__``): ``onnxruntime`` and ``onnxruntime-gpu`` installed together share one directory, and the
    metadata of either cannot say whose files are there. Else (no such file, e.g. a source build) the installed
    distribution's metadata, ``onnxruntime`` first. :raises ConfigError: none is installed (exit 2)
    """
    info = build_info()
    named = re.sub(r"[-_.]+", "-", info.get("package_name", "")).lower()
    installed, own = {}, named.startswith("onnxruntime")
    for dist in dict.fromkeys([named] * own + ["onnxruntime", "onnxruntime-gpu"]):
        try:
            installed[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    if own and info.get("__version__"):
        found = named, info["__version__"]
    elif installed:
        found = next(iter(installed.items()))
    else:
        raise ConfigError("onnxruntime is not installed", hint="pip install onnxruntime (or onnxruntime-gpu)")
    if len(installed) > 1 and "both" not in _SAID:
        _SAID.add("both")
        log.warning("%s are installed together: they share one package directory; keyed by the one whose files are "
                    "there, %s %s", " and ".join(f"{d} {v}" for d, v in installed.items()), *found)
    return found


class OrtBuilder(Builder):
    """Build an optimised ONNX model with ONNX Runtime."""

    name = "onnxruntime"
    checks_load = True
    engine_filename = "model.ort.onnx"
    precisions = ("fp32",)
    default_precision = "fp32"

    def _provider(self) -> str:
        provider = PROVIDERS.get(self.settings.ort_provider)
        if provider is None:
            raise ConfigError(f"unknown --ort-provider {self.settings.ort_provider!r}",
                              hint=f"choose one of: {', '.join(PROVIDERS)}")
        return provider

    def identity(self) -> dict[str, Any]:
        """Name, distribution and exact version of ONNX Runtime, and the execution provider; with the TensorRT EP also
        the TensorRT it loads (all four numbers), its provider options and the options pinned at ONNX Runtime's
        defaults, which keep every ``ORT_TENSORRT_*`` variable out (the context model embeds a TensorRT engine)."""
        dist, version = ort_version()
        doc: dict[str, Any] = {"name": "onnxruntime", "version": version, "distribution": dist,
                               "provider": self._provider(), "graph_optimization": "all"}
        if self.epcontext:  # the CUDA major: ORT's build (one CUDA runtime per process), else the TensorRT's
            options = dict(sorted(self._ep_options().items()))  # first: a name the EP cannot take is refused as such
            doc["tensorrt"], trt_cuda = ep_tensorrt_version(self.settings.environ)
            doc["cuda"] = ep_cuda_major(trt_cuda)
            check_ort_for_tensorrt(version, doc["tensorrt"])
            doc["ep_options"] = options
            doc["ep_pinned_options"] = dict(sorted(PINNED_OPTIONS.items()))
            doc["ep_context"] = {"embed_mode": 1, "cpu_fallback": False}
        return doc

    def replay_witnesses(self) -> list[Path] | None:
        """The installed distribution's ``METADATA`` and the directory holding it (installing or removing any
        package there changes it, e.g. ``onnxruntime-gpu`` beside ``onnxruntime``). None with the TensorRT EP,
        whose TensorRT libraries no file here pins."""
        return None if self.epcontext else dist_witnesses(ort_version()[0])

    def _ep_options(self) -> dict[str, str]:
        return ep_options(self.settings.shapes)

    def device_probe(self) -> tuple[str, str]:
        """The provider decides, not ``--device``: the CPU provider's key holds the CPU, the others' this container's
        GPU (never a TensorRT compatibility class)."""
        return ("cpu" if self.settings.ort_provider == "cpu" else "gpu"), "none"

    def gpu_lock_id(self) -> str | None:
        """Only the TensorRT EP's builds are serialised per GPU (tactic timing); CUDA EP ones run side by side."""
        return super().gpu_lock_id() if self.epcontext else None

    def _providers(self) -> list[Any]:
        """The provider list; the TensorRT EP always gets options (:data:`PINNED_OPTIONS`, so it reads none from the
        environment) and its optimization profile from ``--shape``."""
        provider = self._provider()
        if provider != PROVIDERS["tensorrt"]:
            return [provider]
        ignored = [name for name in ignored_environment(self.settings.environ) if name not in _SAID]
        if ignored:
            _SAID.update(ignored)
            log.warning("ignoring %s: trtwarm passes the TensorRT EP explicit options, and with options it reads "
                        "no ORT_TENSORRT_* variable (the key holds every option it builds with)", ", ".join(ignored))
        return [(provider, {**PINNED_OPTIONS, **self._ep_options()})]

    def _session(self, path: Path, options: Any) -> Any:
        import onnxruntime as ort

        provider = self._provider()
        if provider not in ort.get_available_providers():
            raise ConfigError(f"ONNX Runtime here has no {provider}",
                              hint=f"available: {', '.join(ort.get_available_providers())}; install onnxruntime-gpu")
        return ort.InferenceSession(str(path), options, providers=self._providers())

    @property
    def epcontext(self) -> bool:
        """With the TensorRT EP the artifact is an EPContext model with the engine embedded."""
        return self.settings.ort_provider == "tensorrt"

    def build(self, model: Path, facts: ModelFacts, staging: Path) -> Path:
        """Optimise *model* into ``staging/model.ort.onnx`` (weights beside it when the model has external data).

        With ``--ort-provider tensorrt`` the TensorRT EP compiles the model and ONNX Runtime dumps an EPContext model,
        ``staging/model.ctx.onnx``, with the serialized engine embedded (``ep.context_embed_mode=1``): ORT users get
        trtwarm's keyed, single-flight, verified cache instead of the EP's own engine cache.
        """
        import onnxruntime as ort

        output = staging / ("model.ctx.onnx" if self.epcontext else self.engine_filename)
        options = ort.SessionOptions()
        options.log_severity_level = self._log_level()
        warmup = warmup_shapes(facts.inputs, self.settings.shapes) if self.epcontext else None
        if self.epcontext:  # no CPU fallback: an embedded engine must stand for the whole model
            for key, value in (("ep.context_enable", "1"), ("ep.context_file_path", str(output)),
                               ("ep.context_embed_mode", "1"), ("session.disable_cpu_ep_fallback", "1")):
                options.add_session_config_entry(key, value)
        else:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.optimized_model_filepath = str(output)
        if facts.external and not self.epcontext:
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             "model.ort.data")
        try:
            session = self._session(model, options)
            if warmup is not None and not output.is_file():  # dynamic shapes: the EP builds at the first run
                session.run(None, self.feeds(session, warmup))
        except ort_errors() as exc:
            raise BuildError(f"ONNX Runtime could not optimise the model: {exc}", log_tail=str(exc)) from exc
        if self.epcontext:
            check_context_model(output)
        elif not output.is_file() or output.stat().st_size == 0:
            raise BuildError("ONNX Runtime wrote no optimised model")
        return output

    def feeds(self, session: Any, shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
        """Zeros of the opt shape (or *shapes*) for every input (symbolic dims without ``--shape`` become 1)."""
        import numpy as np

        opt = shapes or {s.name: s.opt for s in self.settings.shapes}
        feeds = {}
        for item in session.get_inputs():
            shape = opt.get(item.name) or tuple(d if isinstance(d, int) else 1 for d in item.shape)
            dtype = _DTYPES.get(item.type.removeprefix("tensor(").rstrip(")"), "float32")
            feeds[item.name] = np.zeros(shape, dtype=dtype)
        return feeds

    def _log_level(self) -> int:
        """ORT's session log level: 2 (warnings) for the TensorRT EP, whose warnings say what went wrong with a
        profile or a partition; else 3, hiding the CPU's "hardware specific optimizations" warning (which is why the
        CPU key has the ISA)."""
        return 2 if self.epcontext else 3

    def load_shapes(self) -> list[dict[str, tuple[int, ...]] | None]:
        """The inferences of the load check: zeros of the opt shapes; with the TensorRT EP and ``--shape``, of the min,
        opt and max shapes each, since the embedded engine's profile must take the whole range."""
        if not (self.epcontext and self.settings.shapes):
            return [None]
        return [{s.name: tuple(getattr(s, kind)) for s in self.settings.shapes} for kind in ("min", "opt", "max")]

    def load(self, engine: Path, facts: ModelFacts) -> None:
        """Create a session on *engine* and run an inference at each of :meth:`load_shapes`. :raises EntryInvalid: it
        does not load or run."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = self._log_level()
        try:
            session = self._session(engine, options)
            for shapes in self.load_shapes():
                session.run(None, self.feeds(session, shapes))
        except ort_errors() as exc:
            raise EntryInvalid(f"does not load in ONNX Runtime: {exc}") from exc


__all__ = ["PROVIDERS", "OrtBuilder", "ort_version"]
