"""The end of ``trtwarm init``: hand the obtained entry over. The report, the Pod's copy or a link
(:mod:`trtwarm.init.handcopy`), ``engine.json`` (and the Triton layout), the record a repeat hit replays, the Event,
and after all that, the best-effort push of a fresh build, whose time is added to the hand-off."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from trtwarm.config import Settings
from trtwarm.errors import Interrupted, VolumeError
from trtwarm.init import handcopy, handoff, hitrecord
from trtwarm.init.handoff import WarmReport
from trtwarm.init.plan import Plan
from trtwarm.volume.entry import Entry

log = logging.getLogger("trtwarm.init.warm")


def hand_over(plan: Plan, entry: Entry, result: str, start: float, *, said: Any, warned: bool) -> WarmReport:
    """Hand *entry* (obtained as *result*, holding its verified bytes) over and return the report; a fresh build is
    pushed (from those bytes) after the hand-off, which is durable first (docs/decisions.md). *said*/*warned*: the
    warnings of the key's resolution and lookup (a hit that warned is not recorded for a repeat, which would warn
    again unseen). The entry's descriptors are closed at the end."""
    try:
        return _hand_over(plan, entry, result, start, said=said, warned=warned)
    finally:
        entry.close()


def _hand_over(plan: Plan, entry: Entry, result: str, start: float, *, said: Any, warned: bool) -> WarmReport:
    settings = plan.settings
    if plan.stamps is not None and result != "built":
        log.info("verified %s: %s", plan.label, plan.stamps.summary())
    repeatable = (result == "hit" and not warned and not plan.seeded and entry.name == plan.name
                  and hitrecord.repeatable(plan))
    if entry.name != plan.name:  # found by its key under another --name: report the entry that is on the volume
        log.info("%s is on the volume as %s (built with another --name)", plan.label, entry.name)
        plan.name = entry.name
    if result != "waited":  # it appeared while this init waited: published just now, and its builder marks the
        plan.store.touch_use(plan.key)  # use (and gc falls back to the manifest's "created"), not a storm of waiters
    plan.seconds["total"] = time.monotonic() - start
    _emit_outcome(plan, result)
    report = _report(plan, entry, result)
    mode = handcopy.mode_of(settings, plan.gate)
    fixed = plan.seeded and plan.in_place  # an image volume (as its checked files say): nothing can rewrite it
    if fixed and settings.handoff is None:
        mode = "link"
    recheck = mode == "link" and plan.gate.mode == "enforce" and not fixed
    if recheck:
        log.warning("--handoff link under enforce: the server reads %s on the cache volume, which a writer of the "
                    "volume can rewrite in place after this check; the sidecar checks it against its signed digests "
                    "before it first answers ready, but a rewrite after that reaches the server on its next read "
                    "(--handoff copy closes that window)", entry.path)
    copy = handcopy.hand_over_files(settings.handoff_dir, mode, plan.key, entry, report, plan.copier,
                                    recheck=recheck)
    _hand_off(settings, report, plan.builder.name)
    handcopy.prune_copies(settings.handoff_dir, copy)  # earlier copies, and copies of entries that failed a check
    if repeatable:
        hitrecord.remember(plan, entry, report, said)
    if result == "built" and plan.remote is not None and settings.remote_push == "best-effort":
        pushing = time.monotonic()
        try:
            plan.remote.push(entry)
        except Interrupted as exc:  # the engine is handed over: the hand-off stays ready (exit 143/130 all the same)
            exc.after_handoff = True
            raise
        report.seconds["push"] = time.monotonic() - pushing  # bounded: one request budget for a hung store
        report.seconds["total"] = time.monotonic() - start
        _hand_off(settings, report, plan.builder.name)  # again, with the push's bytes and seconds
    return report


def _emit_outcome(plan: Plan, result: str) -> None:
    if result == "built":
        plan.emit("EngineBuilt", f"built {plan.name} in {plan.seconds.get('build', 0.0):.1f} s")
    elif result == "hit":
        plan.emit("EngineCacheHit", f"verified cached engine {plan.name} in {plan.seconds['total']:.2f} s")
    elif result == "pulled":
        plan.emit("EnginePulled", f"pulled {plan.name} from {plan.remote.repo.url} in {plan.seconds['total']:.2f} s")


def _report(plan: Plan, entry: Entry, result: str) -> WarmReport:
    s = plan.settings
    return WarmReport(key=plan.key, name=plan.name, path=str(entry.engine), result=result,
                      seconds={k: plan.seconds.get(k, 0.0) for k in ("key", "wait", "build", "verify", "total")},
                      device=plan.doc["device"], builder=plan.doc["builder"], model_sha256=plan.facts.onnx.sha256,
                      precision=str(plan.doc["build"].get("precision", "")), verify=s.verify,
                      engine_bytes=int(entry.manifest["engine_bytes"]), lock_mode=s.lock_mode,
                      files={str(entry.path / f["path"]): f["bytes"] for f in entry.files},
                      extra=plan.builder.report() if result == "built" else {},
                      remote=plan.remote.stats if plan.remote is not None else {})


def _hand_off(settings: Settings, report: WarmReport, builder: str) -> None:
    try:
        handoff.write(settings.handoff_dir, report)
    except OSError as exc:
        raise VolumeError(f"cannot write the hand-off to {settings.handoff_dir}: {exc.strerror}", hint="mount a "
                          "writable emptyDir at --handoff-dir, shared with the inference container") from exc
    if settings.triton_repo and settings.triton_model:
        try:
            handoff.triton_repo(settings.triton_repo, settings.triton_model, Path(report.path), builder)
        except OSError as exc:
            raise VolumeError(f"cannot lay out the Triton model repository {settings.triton_repo}: {exc.strerror}",
                              hint="mount a writable emptyDir at --triton-repo, shared with Triton") from exc


__all__ = ["hand_over"]
