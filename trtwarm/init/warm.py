"""The init-container algorithm: resolve the key, then hit, or wait for another builder, or build exactly once.

::

    resolve key ─► verified entry? ──yes──► hit
                        │ no
                        ▼
                 entry appeared? ──yes──► waited   (waiters sleep until the holder lets go, all at once,
                        │ no                               and log every 10 s; none queues for the lock)
                        ▼
                 take the key's lock? ──no──► wait again
                        │ yes
                        ▼
                 build in staging ─► load check ─► publish (one rename) ─► release ─► built

Idempotent: a restarted init finds the entry it published and is a fast hit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trtwarm.init import finish, handcopy, handoff, hitrecord, seed
from trtwarm.config import Settings
from trtwarm.errors import HandoffOnVolume, LockTimeoutError, VolumeError
from trtwarm.node.events import EventRecorder
from trtwarm.fs.info import read_only_mount
from trtwarm.fs.ops import FULL_ERRNOS, READ_ONLY_ERRNOS
from trtwarm.init.handoff import WarmReport
from trtwarm.init.plan import Plan, resolve
from trtwarm.init.publish import build_and_publish, check_build_dir
from trtwarm.volume import leases, lockwait
from trtwarm.volume.layout import Layout, volume_error
from trtwarm.volume.lock import BuildLock, detect_mode
from trtwarm.volume.stamps import on_volume
from trtwarm.volume.store import EngineStore
from trtwarm.volume.entry import Entry
from trtwarm.init.waiting import on_wait as _on_wait, wait_reason as _wait_reason
from trtwarm.trust.policy import Gate

log = logging.getLogger("trtwarm.init.warm")


def _lookup(plan: Plan) -> Entry | None:
    start = time.monotonic()
    store = plan.store
    plan.gate.preload()  # the verifier's import overlaps with the hashing that comes next
    entry = store.lookup(plan.key, plan.name, plan.load_check(trust=False), plan.checker,
                         trust=plan.trust_check)  # the signature first: an untrusted entry is never read
    plan.seconds["verify"] = plan.seconds.get("verify", 0.0) + time.monotonic() - start
    if store.stuck is not None:  # damaged, and this Pod cannot move it away: remember which one, and why
        path, reason = store.stuck
        plan.stuck = (path, _dir_id(path), reason)
    return entry


def _dir_id(path: Path) -> tuple[int, int, int] | None:
    """What changes when an entry directory is replaced (a new rename) or its contents change."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _unchanged_damage(plan: Plan) -> bool:
    """Whether the entry on the volume is the damaged one this Pod already verified and could not move."""
    if plan.stuck is None:
        return False
    path, ident, _reason = plan.stuck
    return plan.store.find(plan.key, plan.name) == path and _dir_id(path) == ident


def _single_flight(plan: Plan) -> tuple[Entry | None, str]:
    """Take the key's lock and build, or wait for the entry; verify it after the lock is released (None: it failed).

    Verifying outside the lock lets the waiters of a large engine hash it side by side. What this init built or
    pulled itself is handed over as it was verified (the private build's or the pull's descriptors, the manifest and
    signature in memory), never read back from the volume: whatever stands under its name by then is someone else's.
    """
    s = plan.settings
    plan.layout.ensure()
    lock = BuildLock(plan.layout, plan.key, s.identity, mode=s.lock_mode, timeout=s.lock_timeout,
                     on_wait=_on_wait(plan), progress=s.progress_interval, label=plan.name)
    plan.gate.preload(waiting=True)  # a pull or a build needs the verifier too
    result, ours = "waited", None
    if lock.take_or_wait(lambda: plan.store.find(plan.key, plan.name) is not None):
        try:
            log.info("holding the build lock of %s", plan.label)
            if plan.store.find(plan.key, plan.name) is None:  # else: published between our miss and the lock
                result, ours = _pull_or_build_locked(plan, lock)
        finally:
            lock.release()
    plan.seconds["wait"] = lock.waited
    if result in ("pulled", "absent", "built"):
        return ours, result
    if result == "waited":
        log.info("%s appeared while waiting %.1f s", plan.label, lock.waited)
        return _lookup(plan), result
    # "lost": not ours; whoever published it is checked like any other entry (the trust policy too)
    log.info("%s was published by someone else while this init held the lock; checking it", plan.label)
    return _lookup(plan), "waited"


def _pull_or_build_locked(plan: Plan, lock: BuildLock) -> tuple[str, Entry | None]:
    """Under the key's lock: pull from ``--remote`` (the pulled entry), else build (the built entry; ``absent``:
    may not build; ``lost``: an entry this init did not publish took the name meanwhile, e.g. a writer of the
    volume's). The lock's owner record says which, so the waiters say "being pulled from <store>" or "being
    built"."""
    if plan.remote is not None:
        lock.doing(f"pulling from {plan.remote.repo.url}")
        try:
            pulled = plan.remote.pull(plan.key, plan.name, plan.load_check(trust=False, pulled=True))
            if pulled:
                return "pulled", pulled
        finally:
            lock.doing(None)
        if plan.store.find(plan.key, plan.name) is not None:
            return "lost", None
    if plan.settings.read_only or plan.gate.consumer_only:
        return "absent", None
    built = _build_locked(plan, lock.mode)
    return ("built" if built is not None else "lost"), built


def _build_locked(plan: Plan, mode: str) -> Entry | None:
    """Build and publish under the GPU's lock too, when the builder has one (parallel builds skew tactic timing).

    :return: the entry as built, when this build is the published entry (None: another entry took the name first)
    """
    s = plan.settings
    log.info("building %s (lock mode %s)", plan.label, mode)
    gpu_lock = plan.builder.gpu_lock_id()
    with (BuildLock(plan.layout, gpu_lock, s.identity, mode=s.lock_mode, timeout=s.lock_timeout,
                    on_wait=_on_wait(plan, gpu_lock), progress=s.progress_interval, label=plan.name)
          if gpu_lock else contextlib.nullcontext()):
        return build_and_publish(plan)


def _wait_read_only(plan: Plan) -> tuple[Entry | None, str]:
    """Wait for a verified (and, under a policy, trusted) entry without building. :raises LockTimeoutError:"""
    why, what, hint = _wait_reason(plan)
    log.info("%s: waiting for %s %s (up to %.0f s)", why, what, plan.label, plan.settings.lock_timeout)
    plan.gate.preload(waiting=True)
    pause = _pauser(plan)
    start = last = time.monotonic()
    if plan.remote is not None and (found := _single_flight(plan))[1] != "absent":
        return found
    while (elapsed := time.monotonic() - start) < plan.settings.lock_timeout:
        pause(0.5)
        if plan.store.find(plan.key, plan.name) is not None and not _unchanged_damage(plan) \
                and (entry := _lookup(plan)) is not None:
            plan.seconds["wait"] = time.monotonic() - start
            return entry, "waited"
        if time.monotonic() - last >= plan.settings.progress_interval:
            last = time.monotonic()
            if plan.remote is not None and (found := _single_flight(plan))[1] != "absent":
                return found
            log.info("%s: waiting for %s %s (%.0f s)", why, what, plan.label, elapsed)
    if _unchanged_damage(plan):
        raise VolumeError(f"the entry of {plan.label} on the volume is damaged ({plan.stuck[2]}) and this Pod cannot "
                          f"move it away (read-only mount); no replacement appeared within "
                          f"{plan.settings.lock_timeout:.0f} s", hint="a Pod that may build (or the prebuild Job) "
                          "quarantines and rebuilds it; `trtwarm verify --fix` on a writable mount quarantines it now")
    raise LockTimeoutError(f"{why}: no {'signed ' if not plan.settings.read_only else ''}engine for {plan.label} "
                           f"appeared within {plan.settings.lock_timeout:.0f} s", hint=hint)


def _pauser(plan: Plan) -> Callable[[float], None]:
    """The pause between looks of an init that only waits: the given seconds, or less when a builder of this key on
    the volume lets go of its lock (it published, or failed) meanwhile; a plain sleep in ``lease`` mode."""
    s = plan.settings
    if (s.lock_mode if s.lock_mode != "auto" else detect_mode(plan.layout.root)[0]) != "flock":
        return time.sleep
    path = plan.layout.lock_path(plan.key)
    return lambda seconds: lockwait.pause(path, seconds)


def _build_or_wait(plan: Plan) -> tuple[Entry | None, str]:
    if plan.settings.read_only or plan.gate.consumer_only:
        return _wait_read_only(plan)
    try:
        return _single_flight(plan)
    except OSError as exc:  # the lock, the staging directory or the entry could not be written
        if exc.errno not in FULL_ERRNOS | READ_ONLY_ERRNOS:
            raise
        raise volume_error(exc, plan.layout.root, "build an engine in") from exc


def _obtain(plan: Plan) -> tuple[Entry, str]:
    """Hit, else wait or build. An entry that failed verification after a wait (it is quarantined by then), or that
    gc moved away while we verified it, is a plain miss: look again, and build."""
    for _attempt in range(3):
        found = _lookup(plan)
        if found is None and plan.settings.seed_caches and (found := seed.lookup(plan)) is not None:
            plan.seeded = True  # handed over from a read-only tier, in place
        if found is None and not plan.settings.read_only and _unchanged_damage(plan):
            return _replacement(plan)
        entry, result = (found, "hit") if found is not None else _build_or_wait(plan)
        if entry is not None and entry.engine.exists():
            return entry, result
        if entry is not None:
            entry.close()
        log.warning("%s failed verification or was removed by gc while this init used it; looking again",
                    plan.label)
    raise VolumeError(f"{plan.label} kept disappearing while this init used it",
                      hint="a cleanup that ignores trtwarm's leases is running on this volume; stop it")


def _replacement(plan: Plan) -> tuple[Entry, str]:
    """The entry is damaged and this Pod cannot move it away (a read-only mount, or a volume it may not write): it
    can neither quarantine nor rebuild it, so it waits as ``--read-only`` would for a Pod that may write the volume
    to replace it, and says so. :raises VolumeError: nothing replaced it within ``--lock-timeout`` (exit 6)"""
    path, _ident, reason = plan.stuck  # type: ignore[misc]  # set: the caller checked _unchanged_damage
    where = "the cache volume is mounted read-only here" if read_only_mount(plan.layout.root) else \
        "this Pod may not write the cache volume"
    log.warning("the entry %s is damaged (%s) and %s: this init can neither quarantine nor rebuild it, so it waits "
                "as --read-only would, up to %.0f s (--lock-timeout), for a Pod that may write the volume to replace "
                "it", path.name, reason, where, plan.settings.lock_timeout)
    entry, result = _wait_read_only(plan)
    if entry is None:
        raise VolumeError(f"the replacement of the damaged entry {path.name} failed verification too",
                          hint="`trtwarm verify` on a writable mount says why")
    return entry, result


def _take_lease(plan: Plan) -> None:
    """Lease the key before the lookup: a gc that planned without seeing the lease undoes its removal."""
    if not plan.layout.leases.is_dir():
        return  # a fresh volume: nothing there to protect yet (a build creates the directory)
    taken = leases.take(plan.layout, plan.key, plan.name, plan.settings.identity)
    if isinstance(taken, str):
        log.warning("%s", leases.not_taken(taken, plan.label))


def warm(settings: Settings, events: EventRecorder | None = None) -> WarmReport:
    """Run ``trtwarm init``: return the report after writing the hand-off. :raises TrtwarmError: see errors."""
    start = time.monotonic()
    remote = _remote(settings, events)
    gate = _prepare(settings)
    with hitrecord.warnings_said() as said:
        plan = resolve(settings, gate)
    plan.events = events
    plan.remote = remote
    if remote is not None:
        remote.verify_ref = plan.gate.check_ref  # the trust policy, on a ref before its download
    log.info("key %s for %s", plan.key[:16], plan.name)
    if handcopy.mode_of(settings, plan.gate) == "copy":
        plan.copier = handcopy.Copier(settings.handoff_dir, plan.key)  # the verification's read makes the copy
    _take_lease(plan)
    with hitrecord.warnings_said() as warned:  # a hit that warned is not repeated (it would warn again unseen)
        entry, result = _obtain(plan)
    return finish.hand_over(plan, entry, result, start, said=said, warned=bool(warned))


def _prepare(settings: Settings) -> Gate:
    """Before the key: refuse a hand-off on the volume, set the last hand-off aside, check the hand-off directory is
    writable, load the trust policy (one that fails to load stops here: nothing handed over, the cache not touched),
    and lay out a new volume (so the first start already memoises the model's digests). Return the policy's gate."""
    if on_volume(settings.handoff_dir, settings.cache_dir):  # its `engine` link decides what the server loads
        raise HandoffOnVolume(f"the hand-off directory {settings.handoff_dir} is on the cache volume "
                              f"{settings.cache_dir}: a writer of the volume could point the server at any file",
                              hint="mount an emptyDir at --handoff-dir, shared with the inference container only")
    check_build_dir(settings)
    seed.check_tiers(settings.seed_caches)  # an empty or unmounted read-only tier fails now, never waits
    handoff.clear(settings.handoff_dir)
    handoff.require_writable(settings.handoff_dir)  # before any build or pull (issue 27: found after it, it wasted it)
    gate = Gate.create(settings.trust_policy, settings.trust_mode, settings.signing_key, settings.read_only)
    if not settings.read_only and not Layout(settings.cache_dir).statcache.is_dir():
        with contextlib.suppress(VolumeError):  # surfaces again, with its reason, if a build turns out to be needed
            Layout(settings.cache_dir).ensure()
    return gate


# --- remote repository hook (trtwarm.remote; issue 12): pull under the key's lock before a build, push after ---
def _remote(settings: Settings, events: EventRecorder | None) -> Any:
    """A :class:`trtwarm.remote.sync.RemoteSync` for ``--remote`` (its settings checked before any work), or None."""
    if not settings.remote:
        return None
    from trtwarm.remote.sync import RemoteSync

    return RemoteSync.for_init(settings, EngineStore(Layout(settings.cache_dir)), events.emit if events else None)


# --- end of the remote repository hook ---


__all__ = ["warm"]
