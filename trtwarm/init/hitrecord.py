"""Writing this node's record of a verified stamped hit, which :mod:`trtwarm.init.fasthit` repeats (it says what a
record holds and why repeating it is safe).

A record is written after a hit that vouched for every file by stamp and warned of nothing while it looked the
entry up, for a start whose outcome files and the device pin: a builder whose identity files pin
(:meth:`trtwarm.builders.base.Builder.replay_witnesses`), the device read again as the builder reads it
(:meth:`~trtwarm.builders.base.Builder.device_probe`: NVML for a GPU; the node's boot id for the CPU), no Triton
layout, no Kubernetes Events. Under a trust
policy the policy, the key files it names, the signing key and the entry's signature envelope are witnesses too: the
verdict rests on exactly those bytes, as a signature record's does. Every witness must be unchanged for
:data:`~trtwarm.volume.statcache.RACY_SECONDS` (a second write in the same timestamp tick could go unseen). Best
effort: a record not written costs the next start a full resolve, nothing more.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trtwarm import __version__

from trtwarm.init import fasthit
from trtwarm.fs.info import identity
from trtwarm.fs.ops import atomic_write_json
from trtwarm.init.handoff import WarmReport
from trtwarm.init.plan import Plan
from trtwarm.node.podenv import events_configured
from trtwarm.volume import leases, statcache
from trtwarm.volume.statcache import RACY_SECONDS
from trtwarm.volume.store import MANIFEST, SIGNATURE
from trtwarm.volume.entry import Entry

log = logging.getLogger("trtwarm.init.warm")


class _Said(logging.Handler):
    """Keeps the warnings logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[list[str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append([record.name, record.levelname, record.getMessage()])


@contextlib.contextmanager
def warnings_said() -> Iterator[list[list[str]]]:
    """The warnings logged meanwhile, as ``[logger, level, message]``: what a repeat must say again (e.g. a dynamic
    input without ``--shape``)."""
    said = _Said()
    logging.getLogger("trtwarm").addHandler(said)
    try:
        yield said.lines
    finally:
        logging.getLogger("trtwarm").removeHandler(said)


def repeatable(plan: Plan) -> bool:
    """Whether this start's hit may be recorded (see the module's docstring)."""
    s, book = plan.settings, plan.stamps
    return (bool(s.start_args) and book is not None and book.usable() and book.hashed == 0 and book.vouched > 0
            and s.triton_repo is None and not events_configured(s.environ))


def remember(plan: Plan, entry: Entry, report: WarmReport, warnings: list[list[str]]) -> None:
    """Write the record of this hit to the stamp directory, when its witnesses allow (best effort)."""
    s = plan.settings
    witnesses = _witnesses(plan, entry)
    if witnesses is None or plan.stamps is None or s.stamp_dir is None:
        return
    key = _env_key(s.stamp_dir)
    if key is None:
        return
    start = fasthit.start_of(list(s.start_args), s.environ, key)
    layout = plan.layout
    record = {"schema": fasthit.SCHEMA, "version": __version__, "start": start, "boot_id": fasthit.boot_id(),
              "expires": plan.stamps.oldest + s.stamp_max_age, "witnesses": witnesses, "files": plan.stamps.vouched,
              "device": dict(zip(("choice", "hardware_compat"), plan.builder.device_probe()),
                             fields=plan.doc["device"]),
              "lease": {"root": str(layout.leases), "volume": str(layout.root), "key": plan.key, "name": plan.name,
                        "not_taken": {why: leases.not_taken(why, plan.label) for why in ("full", "read-only")}},
              "use": {"path": str(layout.use_path(plan.key)), "volume": str(layout.root)},
              "handoff": {"dir": str(s.handoff_dir), "termination_log": str(s.termination_log),
                          "log_format": s.log_format},
              "report": {k: v for k, v in asdict(report).items() if k != "seconds"}, "warnings": warnings,
              # --handoff copy: a repeat copies (and hashes) the entry's files again, into its own Pod's hand-off
              "copy": {"source": str(entry.path), "files": entry.files}
              if report.handoff == "copy" else None}
    if len(json.dumps(record)) > fasthit.LIMIT:  # never read back: not worth the write
        return
    try:
        atomic_write_json(s.stamp_dir / fasthit.record_name(start), record, 0o600, durable=False)
    except OSError as exc:  # the stamps' own writes say so when the directory fails them
        log.debug("no hit record written to %s: %s", s.stamp_dir, exc)


def _env_key(directory: Path) -> bytes | None:
    """The stamp directory's salt of the environment's digest (:data:`~trtwarm.init.fasthit.ENV_KEY`), made once:
    written under a temporary name and linked into place, so a concurrent init reads a whole one or makes its own
    and keeps the winner's. None when it cannot be read or made (no record then)."""
    if (key := fasthit.env_key(str(directory))) is not None:
        return key
    tmp = directory / f".{fasthit.ENV_KEY}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(fasthit.ENV_KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another init made it first: theirs is the key
            os.link(tmp, directory / fasthit.ENV_KEY)
            for old in directory.glob("hit-*.json"):  # no record can predate its key: an older trtwarm's, which
                old.unlink(missing_ok=True)            # held the environment itself (secrets): removed now
    except OSError as exc:
        log.debug("no hit record key in %s: %s", directory, exc)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return fasthit.env_key(str(directory))


def _witnesses(plan: Plan, entry: Entry) -> list[list[Any]] | None:
    """``[path, identity, follow]`` of every file the hit rests on; None when one is missing, changed too recently,
    or the builder's identity is not pinned by files."""
    pinned = plan.builder.replay_witnesses()
    if pinned is None:
        return None
    s = plan.settings
    followed = [s.model, *(s.model.parent / f.location for f in plan.facts.external), *pinned,
                *plan.gate.policy.files, *([s.signing_key] if s.signing_key else [])]
    exact = [plan.layout.root / "VERSION", entry.path, entry.path / MANIFEST,
             *(entry.path / f["path"] for f in entry.files),
             *([entry.path / SIGNATURE] if (entry.path / SIGNATURE).exists() else [])]
    # the volume's stat-cache record of the model, which the key rested on: always replaced by a rename (a new
    # inode), so it needs no racy window; without a trust policy (then the node's own is used, see plan._memo_dir)
    memo = statcache.record_path(plan.memo, s.model) if plan.memo == plan.layout.statcache else None
    renamed = [memo] if memo is not None and memo.exists() else []
    now, found = time.time(), []
    for path, follow in [(p, True) for p in followed] + [(p, False) for p in exact + renamed]:
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError:
            return None
        if path not in renamed and now - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 < RACY_SECONDS:
            return None
        found.append([str(Path(path)), identity(st), follow])
    return found


__all__ = ["remember", "repeatable", "warnings_said"]
