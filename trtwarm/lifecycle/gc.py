"""Garbage collection: inspect, plan, then execute; never remove what a live Pod or a running build needs.

Order of use is what trtwarm itself records (``.uses/<key>`` on every hit and build, sidecar leases), never file
atime, which ``noatime`` and NFS make meaningless. An entry with a fresh lease or a build in progress is kept,
whatever the budget says.

Removal is safe against concurrent readers: the entry is first renamed out of ``entries/`` into ``.trash/`` in one
step, so an init looking it up sees either the complete entry or a clean miss (and rebuilds). ``trtwarm init``
takes its lease *before* it looks an entry up; if the key has a fresh lease once the entry is moved, the
rename is undone. Only then is the directory deleted.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import LockTimeoutError
from trtwarm.fs import safe
from trtwarm.lifecycle.filters import select
from trtwarm.names import bounded
from trtwarm.lifecycle.entryinfo import EntryInfo
from trtwarm.lifecycle.inventory import Inventory
from trtwarm.volume import leases as leaselib
from trtwarm.volume.layout import Layout
from trtwarm.volume.lock import detect_mode, file_lock

log = logging.getLogger("trtwarm.gc")
#: quarantined entries are kept this long for inspection before gc removes them
QUARANTINE_GRACE = 7 * 86400.0
#: at most this many removals per pass, so one pass on a huge volume stays bounded
MAX_REMOVE = 1000
REASONS = ("age", "size", "count", "quarantine", "staging", "manual")


@dataclass(frozen=True)
class Policy:
    """What to keep. ``None`` disables a bound."""

    max_age: float | None = None
    max_bytes: int | None = None
    keep_per_model: int | None = None
    quarantine_grace: float = QUARANTINE_GRACE
    max_remove: int = MAX_REMOVE

    @classmethod
    def parse(cls, max_age: str | None, max_bytes: str | None, keep_per_model: int | None,
              quarantine_grace: str, max_remove: int = MAX_REMOVE, *, prefix: str = "--") -> Policy:
        """From the flags' text (``30d``, ``100G``); *prefix* names the flags (the sidecar's are ``--gc-...``).

        :raises ConfigError: a malformed size or duration, a negative count, ``keep-per-model`` 0 (it would remove
            every entry no Pod holds: not a retention policy; ``trtwarm rm`` removes chosen entries)
        """
        from trtwarm.config import parse_duration, parse_size
        from trtwarm.errors import ConfigError

        for flag, value in ((f"{prefix}keep-per-model", keep_per_model), ("--max-remove", max_remove)):
            if value is not None and value < 0:  # a negative count would select every entry (or slice oddly)
                raise ConfigError(f"{flag} {value} is negative", hint=f"give {flag} a count of 0 or more")
        if keep_per_model == 0:
            raise ConfigError(f"{prefix}keep-per-model 0 would remove every entry no Pod holds",
                              hint=f"give a count of 1 or more (or {prefix}max-age / {prefix}max-bytes); "
                              "`trtwarm rm` removes chosen entries")
        return cls(max_age=parse_duration(max_age, f"{prefix}max-age") if max_age else None,
                   max_bytes=parse_size(max_bytes) if max_bytes else None, keep_per_model=keep_per_model,
                   quarantine_grace=parse_duration(quarantine_grace, f"{prefix}quarantine-grace"),
                   max_remove=max_remove)


@dataclass(frozen=True)
class Action:
    """One planned removal."""

    path: Path
    name: str
    key: str | None
    reason: str
    bytes: int
    last_used: float | None

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {"name": self.name, "key": self.key, "path": str(self.path), "reason": self.reason,
                "bytes": self.bytes, "last_used_ts": self.last_used}


@dataclass
class Plan:
    """Removals in order, what was kept although a bound asked for it, and what is left for the next pass."""

    actions: list[Action]
    protected: list[tuple[EntryInfo, str]]
    deferred: int
    made_at: float

    @property
    def bytes(self) -> int:
        """Bytes the plan frees."""
        return sum(a.bytes for a in self.actions)


def _action(info: EntryInfo, reason: str) -> Action:
    return Action(info.path, info.name, info.key, reason, info.bytes, info.last_used)


def _protection(info: EntryInfo, now: float) -> str | None:
    if info.in_use:
        expires = max(lease.expires for lease in info.leases)
        return (f"in use: leased by {', '.join(lease.holder for lease in info.leases)} (a lease lasts "
                f"{leaselib.LEASE_TTL / 60:.0f} min after its last heartbeat; expires in "
                f"{max(0.0, expires - now):.0f} s unless refreshed)")
    if info.building:
        return "a build of this key is in progress"
    return None


def plan(inv: Inventory, policy: Policy) -> Plan:
    """Decide what goes, least recently used first within each reason; changes nothing."""
    chosen: dict[Path, Action] = {}
    protected: list[tuple[EntryInfo, str]] = []
    by_lru = sorted(inv.entries, key=lambda e: (e.last_used or 0.0, e.name))

    def drop(info: EntryInfo, reason: str) -> None:
        why = _protection(info, inv.now)
        if why:
            protected.append((info, why))
        elif info.path not in chosen:
            chosen[info.path] = _action(info, reason)

    if policy.max_age is not None:
        for info in by_lru:
            if inv.now - (info.last_used or 0.0) > policy.max_age:
                drop(info, "age")
    if policy.keep_per_model is not None:
        seen: dict[str, int] = {}
        for info in reversed(by_lru):  # newest first: the first N of each model and configuration stay
            group = info.configuration
            seen[group] = seen.get(group, 0) + 1
            if seen[group] > policy.keep_per_model and info.path not in chosen:
                drop(info, "count")
    if policy.max_bytes is not None:
        left = sum(e.bytes for e in inv.entries if e.path not in chosen)
        for info in by_lru:
            if left <= policy.max_bytes:
                break
            if info.path not in chosen:
                drop(info, "size")
                left -= info.bytes if info.path in chosen else 0
    for info in inv.quarantined:
        if inv.now - (info.last_used or inv.now) > policy.quarantine_grace:
            chosen[info.path] = _action(info, "quarantine")
    for path, stale in inv.staging:
        if stale:
            chosen[path] = Action(path, path.name, None, "staging", 0, None)
    actions = list(chosen.values())
    return Plan(actions[: policy.max_remove], _unique(protected), max(0, len(actions) - policy.max_remove), inv.now)


def _unique(items: list[tuple[EntryInfo, str]]) -> list[tuple[EntryInfo, str]]:
    """Each kept entry once, with the first reason (several bounds may have asked for it)."""
    seen: set[Path] = set()
    out = []
    for info, why in items:
        if info.path not in seen:
            seen.add(info.path)
            out.append((info, why))
    return out


def plan_remove(inv: Inventory, selectors: Iterable[str], force: bool = False) -> tuple[Plan, list[str]]:
    """Plan ``trtwarm rm``: entries matching a full key, a key prefix (8+ hex digits), a name (with or without its
    ``--<key16>`` suffix) or a model name, case-insensitively (see :mod:`trtwarm.lifecycle.filters`).

    :return: the plan and the selectors that matched nothing
    """
    actions, protected, unmatched = [], [], []
    for sel in selectors:
        hits = select(inv.entries, sel)
        if not hits:
            unmatched.append(sel)
        for info in hits:
            why = None if force else _protection(info, inv.now)
            if why:
                protected.append((info, why))
            elif all(a.path != info.path for a in actions):
                actions.append(_action(info, "manual"))
    return Plan(actions, protected, 0, inv.now), unmatched


def remove(layout: Layout, action: Action, respect_leases: bool = True) -> bool:
    """Execute one action: rename out of the way, undo it if the key has a fresh lease now, then delete.

    The plan only holds entries without a fresh lease, so a fresh lease now means a Pod started using the entry
    after the scan (``trtwarm init`` leases before it looks up). No timestamps are compared: a file's mtime comes
    from the kernel's coarse clock and can predate a ``time.time()`` taken just before it was written.

    :return: whether it was removed (False: already gone, or a Pod started using it meanwhile)
    """
    trash = layout.root / ".trash"
    safe.makedirs(layout.root, trash, layout.dir_mode())
    target = trash / bounded(action.path.name, f".{secrets.token_hex(4)}")
    try:
        safe.rename(layout.root, action.path, target)  # a link is moved as a link, its target never touched
    except FileNotFoundError:
        return False
    if action.key and respect_leases and any(lease.fresh(time.time()) for lease in leaselib.scan_key(layout,
                                                                                                    action.key)):
        try:
            safe.rename(layout.root, target, action.path)
            log.info("kept %s: a Pod started using it while gc ran", action.name)
            return False
        except OSError as exc:  # a new build published the same name meanwhile: that one is as good
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    _discard(layout, target)
    if action.key and action.path.parent == layout.entries:
        safe.unlink(layout.root, layout.use_path(action.key))
    return True


def _discard(layout: Layout, target: Path) -> None:
    """Delete what :func:`remove` moved into ``.trash``: a tree (links inside removed, not followed), or the link or
    file that stood where an entry belongs."""
    if os.path.islink(target) or not os.path.isdir(target):
        safe.unlink(layout.root, target)
    else:
        safe.rmtree(layout.root, target, ignore_errors=True)


def execute(layout: Layout, gc_plan: Plan, respect_leases: bool = True) -> list[Action]:
    """Carry out *gc_plan*; return the actions that removed something (``rm --force`` ignores leases)."""
    done = [a for a in gc_plan.actions if remove(layout, a, respect_leases)]
    safe.rmtree(layout.root, layout.root / ".trash", ignore_errors=True)  # leftovers of an interrupted earlier pass
    _prune_leases(layout, gc_plan.made_at)
    return done


def _prune_leases(layout: Layout, now: float) -> None:
    """Remove lease files stale for a day (their Pods are long gone) and empty per-key lease directories."""
    for key, found in leaselib.scan(layout).items():
        for lease in found:
            if now - lease.heartbeat > 86400:
                safe.unlink(layout.root, lease.path)
        try:
            safe.rmdir(layout.root, layout.leases / key)
        except OSError:
            continue  # not empty: live leases remain


class VolumeGcLock:
    """The volume-wide GC lock: non-blocking, so only one collector per volume works at a time."""

    def __init__(self, layout: Layout, mode: str = "auto") -> None:
        self.layout = layout
        self.mode = mode if mode != "auto" else detect_mode(layout.root)[0]
        self._lock: Any = None

    def __enter__(self) -> VolumeGcLock:
        import filelock

        # lease mode: a heartbeat lease, so a collector that died never blocks gc on this volume for good
        self._lock = file_lock(self.layout, "gc", self.mode)
        try:
            self._lock.acquire(timeout=0)
        except filelock.Timeout:
            raise LockTimeoutError("another gc is running on this volume", hint="try again later") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def summarize(actions: Iterable[Action]) -> dict[str, int]:
    """Removed count by reason."""
    out = dict.fromkeys(REASONS, 0)
    for action in actions:
        out[action.reason] += 1
    return out


def run(layout: Layout, policy: Policy, *, mode: str = "auto") -> tuple[Plan, list[Action]]:
    """One unattended pass (the sidecar's periodic gc): lock, scan, plan, execute."""
    from trtwarm.lifecycle.inventory import scan

    layout.check()  # trtwarm's own directories are directories, not links elsewhere (exit 9)
    with VolumeGcLock(layout, mode):
        gc_plan = plan(scan(layout, time.time()), policy)
        return gc_plan, execute(layout, gc_plan)


__all__ = ["MAX_REMOVE", "QUARANTINE_GRACE", "REASONS", "Action", "Plan", "Policy", "VolumeGcLock", "execute", "plan",
           "plan_remove", "remove", "run", "summarize"]
