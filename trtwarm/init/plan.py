"""Resolving a start: the model's facts, the builder, the key document, the key and the entry name, as a :class:`Plan`.

:func:`resolve` reads and decides, it never builds and never writes the cache (``trtwarm key`` and ``key --explain``
stop here); :mod:`trtwarm.init.warm` acts on the plan.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm.builders.base import Builder, get_builder
from trtwarm.config import Settings
from trtwarm.errors import ConfigError, EntryInvalid
from trtwarm.node.events import EventRecorder
from trtwarm.node.gpu import GpuInfo
from trtwarm.key import entry_name, key_document, key_of, model_fields, model_part
from trtwarm.model import ModelFacts, check_model_path, unshaped_dynamic_inputs
from trtwarm.trust.policy import Gate
from trtwarm.volume.layout import Layout
from trtwarm.volume.stamps import StampBook, on_volume
from trtwarm.volume.statcache import inspect_model
from trtwarm.volume.store import EngineStore
from trtwarm.volume.entry import Entry
from trtwarm.volume.verified import Checker

log = logging.getLogger("trtwarm.init.warm")


@dataclass
class Plan:
    """A resolved key and everything needed to act on it."""

    settings: Settings
    layout: Layout
    builder: Builder
    facts: ModelFacts
    doc: dict[str, Any]
    key: str
    name: str
    seconds: dict[str, float] = field(default_factory=dict)
    events: EventRecorder | None = None
    gate: Gate = field(default_factory=Gate)  # the trust policy: checks before any load, signs what is published
    stamps: StampBook | None = None  # --verify stamp
    copier: Any = None  # --handoff copy: a trtwarm.init.handcopy.Copier (the verification's read makes the copy)
    remote: Any = None  # a trtwarm.remote.sync.RemoteSync with --remote
    stuck: tuple[Any, Any, str] | None = None  # (entry dir, its identity, why): damaged, and not movable from here
    memo: Path | None = None  # the stat cache the model's digests were memoised in (see _memo_dir)
    seeded: bool = False  # the entry handed over is in a --seed-cache tier (trtwarm.init.seed)
    in_place: bool = False  # ... on a mount nothing can write, its files checked in place (trtwarm.init.seed)

    @property
    def store(self) -> EngineStore:
        """The store of this plan's volume (quarantines are reported as Kubernetes Events); under ``enforce``, one
        whose suffix lookup finds only this model's entries (:class:`ModelStore`)."""
        if self.gate.mode == "enforce":
            return ModelStore(self.layout, self._quarantined, model=model_part(self.name))
        return EngineStore(self.layout, self._quarantined)

    def _quarantined(self, name: str, reason: str) -> None:
        self.emit("EngineQuarantined", f"engine {name} failed verification ({reason}); quarantined, rebuilding",
                  "Warning")

    def emit(self, reason: str, message: str, kind: str = "Normal") -> None:
        """Record a Kubernetes Event on this Pod, when events are enabled."""
        if self.events is not None:
            self.events.emit(reason, message, kind)

    @property
    def label(self) -> str:
        """``name (key16)`` for log lines."""
        return f"{self.name} ({self.key[:16]})"

    @property
    def checker(self) -> Checker | None:
        """How each file of an entry is checked on a hit: the node's stamps (``--verify stamp``) and, with
        ``--handoff copy``, the copy made while reading (so the load check and the hand-off use that copy)."""
        if self.stamps is not None:
            return self.stamps.checker(self.copier)
        return self.copier

    def trust_check(self, entry: Entry) -> None:
        """The trust policy on *entry*'s manifest and envelope as read: before a byte of its files is read (pass it as
        ``trust`` to :func:`~trtwarm.volume.entry.check_entry`). :raises EntryInvalid: untrusted under enforce"""
        self.gate.check(entry, model_part(self.name))

    def load_check(self, trust: bool = True, *, pulled: bool = False) -> Callable[[Entry], None]:
        """The checks before an entry is handed over, all on what was verified: the trust policy on the manifest and
        envelope as read, the builder's checks on its verified bytes (a private directory of links to the checked
        descriptors, or to the hand-off copies made from them: :meth:`~trtwarm.volume.verified.Bytes.view`), never
        on the entry's directory read again. *trust* False where it was checked already: before the files were read
        (a hit: :meth:`trust_check`), or for a remote pull, whose ref was checked against the trust policy before
        its download. *pulled*: the entry was just pulled into ``.staging``, whose files a writer of the volume can
        write in place after their hash; under ``--handoff copy`` the builder's checks then read this Pod's copy,
        made (and checked) first, which the hand-off takes."""
        def check(entry: Entry) -> None:
            if trust:
                self.trust_check(entry)  # the signature, before a byte of the engine is loaded
            load = self.settings.verify == "load"
            if not load and type(self.builder).precheck is Builder.precheck:
                return  # nothing to read
            assert entry.opened is not None, "only a verified entry is checked"
            if pulled and self.copier is not None and \
                    (changed := entry.opened.recheck(entry.files, self.copier)) is not None:
                raise EntryInvalid(f"{changed} changed in .staging after it was pulled and checked (its copy does "
                                   "not match the manifest's digests)")
            with _view(entry, self.settings.build_dir) as view:
                engine = view / str(entry.manifest["engine_file"])
                self.builder.precheck(engine)  # e.g. the plan header's TensorRT version, before TensorRT is loaded
                if load:
                    self.builder.load(engine, self.facts)

        return check


@contextlib.contextmanager
def _view(entry: Entry, parent: Path | None) -> Iterator[Path]:
    """:meth:`~trtwarm.volume.verified.Bytes.view` of *entry*'s verified bytes, under ``--build-dir``.
    :raises ConfigError: the private directory cannot be made (not the entry's fault: it is not quarantined)"""
    assert entry.opened is not None
    with contextlib.ExitStack() as stack:
        try:
            view = stack.enter_context(entry.opened.view(json.dumps(entry.manifest).encode(), parent))
        except OSError as exc:
            where = parent or "the temporary directory"
            raise ConfigError(f"cannot make a private directory for the load check under {where}: {exc.strerror}",
                              hint="--build-dir (TRTWARM_BUILD_DIR, default TMPDIR) must name a writable directory "
                              "(in a Pod: an emptyDir)") from None
        yield view


class ModelStore(EngineStore):
    """The store as an init under ``enforce`` sees it: the ``--<key16>`` suffix lookup (a model renamed, same bytes)
    takes only entries of this init's model name. An entry of this key under another model's name is a miss: the key
    that signed it may be trusted for that other model only, and a volume writer chooses directory names."""

    def __init__(self, layout: Layout, on_quarantine: Callable[[str, str], None] | None, *, model: str) -> None:
        super().__init__(layout, on_quarantine)
        self.model = model

    def find(self, key: str, name: str | None = None) -> Path | None:
        """:meth:`EngineStore.find`, limited to entries whose ``<model>`` part is this init's."""
        if name is not None and self.layout.entry_dir(name).is_dir():
            return self.layout.entry_dir(name)
        suffix = "--" + key[:16]
        try:
            with os.scandir(self.layout.entries) as it:
                found = [e.name for e in it if e.name.endswith(suffix)]
        except FileNotFoundError:
            return None
        for other in sorted(n for n in found if model_part(n) != self.model and n not in _SAID):
            _SAID.add(other)
            log.warning("entry %s holds this key under another model's name: not used under enforce (a key trusted "
                        "for %r may not vouch for %r); treated as a miss", other, model_part(other), self.model)
        return next((self.layout.entry_dir(n) for n in found if model_part(n) == self.model), None)


_SAID: set[str] = set()  # entries ModelStore.find warned about (it runs in wait loops: once per process is enough)


def _stamps(settings: Settings, trusting: bool) -> StampBook | None:
    """The node-local stamp book: file stamps under ``--verify stamp``, and, under a trust policy (*trusting*), the
    record of signatures verified before, whatever ``--verify`` (a signature's verdict depends on its bytes alone,
    which the record's name fixes; docs/trust.md). :raises ConfigError: its directory is on the cache volume, where
    whoever can alter an engine could also write the stamp that vouches for it"""
    if not settings.stamp_dir or not (settings.verify == "stamp" or trusting):
        return None
    if on_volume(settings.stamp_dir, settings.cache_dir):
        raise ConfigError(f"the stamp directory {settings.stamp_dir} is on the cache volume {settings.cache_dir}: "
                          "a writer of the volume could forge the stamps that vouch for its engines",
                          hint="keep stamps node-local: the default (under --handoff-dir, the Pod's emptyDir) or a "
                          "hostPath outside the cache (chart: engine.stamps.hostPath)")
    return StampBook(settings.stamp_dir, settings.stamp_max_age, files=settings.verify == "stamp")


def _memo_dir(layout: Layout, book: StampBook | None, trusting: bool,
              node: Path | None = None) -> tuple[Path | None, bool, Path | None]:
    """Where the model's digests are memoised (None: nowhere), whether a record there must be checked against the
    model's bytes, and an untrusted stat cache to consult (so checked) when that one has none. Under a trust policy
    a writer of the volume could pair this model's stat identity with another model's digest in the volume's stat
    cache, and so choose which signed engine is handed over: the node's stamp directory memoises instead, once it
    exists; until then, and for its first record, the volume's records are used only for what their digests prove
    (the model is hashed, not parsed)."""
    volume = layout.statcache if layout.statcache.is_dir() else None
    if trusting and book is not None and book.directory.is_dir() and book.usable():
        return book.directory / "statcache", False, volume
    if volume is None and not trusting and node is not None:  # a read-only volume (an image mount) has no stat cache
        return node, False, None
    return volume, trusting, None


def _node_memo(settings: Settings) -> Path | None:
    """``<stamp dir>/statcache``, node-local, when the stamp directory is (or can be made) private and off the volume:
    where the model's digests are memoised when the volume has no stat cache of its own (a read-only mount)."""
    if not settings.stamp_dir or on_volume(settings.stamp_dir, settings.cache_dir):
        return None
    try:
        settings.stamp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return settings.stamp_dir / "statcache"


def _builder(settings: Settings, gpu: GpuInfo | None) -> Builder:
    """The row's builder; with *gpu*, one that keys for that declared GPU instead of asking NVML (a CPU build keeps
    its CPU). Only for commands that never build: a build on another GPU than the key names would poison it."""
    builder = get_builder(settings)
    if gpu is not None and builder.device_probe()[0] != "cpu":
        builder.declare_gpu(gpu)
    return builder


def resolve(settings: Settings, gate: Gate | None = None, gpu: GpuInfo | None = None) -> Plan:
    """Inspect the model and the builder and compute the key document, the key and the entry name. *gate*: the
    trust policy's, when the caller loaded it already (``init`` does, before it touches the cache). *gpu*: a
    declared GPU (:func:`trtwarm.node.gpu.declared`) for ``prewarm``, which holds none; never for a build.

    :raises ModelError, ConfigError, VolumeError: bad model, bad configuration, unusable cache dir
    """
    start = time.monotonic()
    check_model_path(settings.model)
    # the policy first: one that fails to load stops the start before the cache is looked at (fail closed)
    if gate is None:
        gate = Gate.create(settings.trust_policy, settings.trust_mode, settings.signing_key, settings.read_only)
    layout = Layout(settings.cache_dir)
    layout.check()
    book = _stamps(settings, gate.mode != "off")
    builder = _builder(settings, gpu)
    identity = builder.identity()
    read_only = settings.read_only or (layout.root.is_dir() and not os.access(layout.root, os.W_OK))
    memo, rehash, fallback = _memo_dir(layout, book, gate.mode != "off",
                                       _node_memo(settings) if read_only and not layout.statcache.is_dir() else None)
    facts, _cached = inspect_model(settings.model, memo, rehash=rehash, fallback=fallback)
    doc = key_document(model_fields(facts), identity, builder.device(), builder.build_fields(facts))
    key = key_of(doc)
    unshaped = unshaped_dynamic_inputs(facts, settings.shapes or (settings.profiles[0] if settings.profiles else ()))
    if unshaped:
        log.warning("dynamic input %s has no --shape: the builder chooses the shapes the engine accepts; give "
                    "--shape NAME=MIN:OPT:MAX for the shapes the server sends", ", ".join(unshaped))
    name = entry_name(doc, key, settings.name or settings.model.stem, unshaped=bool(unshaped))
    gate.require_signer_trusted(name, key)
    gate.verdicts = book  # signatures verified before on this node are recorded beside the stamps
    return Plan(settings, layout, builder, facts, doc, key, name, {"key": time.monotonic() - start}, gate=gate,
                stamps=book if settings.verify == "stamp" else None, memo=memo)


__all__ = ["ModelStore", "Plan", "resolve"]
