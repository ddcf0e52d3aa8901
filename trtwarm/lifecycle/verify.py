"""``trtwarm verify``: re-hash every entry against its manifest and find what a crash or a bad disk left behind.

Inspect, then plan, then execute: :func:`inspect` only reads (and hashes); :func:`fix` quarantines bad entries
(kept for inspection, never deleted here), removes staging directories of dead builders and stale owner records.
Under a trust policy each entry whose files verify also has its signature checked: under ``enforce`` an entry no
trusted key signed is a problem (``untrusted``, quarantined by ``--fix``); under ``warn`` it is reported only.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtwarm.errors import EntryInvalid
from trtwarm.fs import safe
from trtwarm.fs.ops import atomic_write_json, read_json_object
from trtwarm.lifecycle.entryinfo import EntryInfo
from trtwarm.lifecycle.inventory import Inventory
from trtwarm.volume.layout import Layout
from trtwarm.volume.store import SIGNATURE, EngineStore
from trtwarm.volume.entry import Entry, check_entry

if TYPE_CHECKING:  # the caller makes the gate; `ls` (apply_record) need not import the verifier's crypto
    from trtwarm.trust.policy import Gate

log = logging.getLogger("trtwarm.verify")
#: the last ``trtwarm verify``'s findings, so ``ls`` shows damage found by hashing without hashing itself
RECORD = ".last-verify.json"

#: a record written before signatures were recorded: the manifest's identity alone decides
_UNRECORDED = object()
#: fault kinds, from the verification reason
KINDS = ("corrupt", "truncated", "orphaned", "bad-manifest", "damaged", "untrusted", "stale-staging", "stale-owner")


@dataclass(frozen=True)
class Problem:
    """One fault on the volume, and what ``--fix`` does about it."""

    kind: str
    path: Path
    detail: str
    fix: str

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {"kind": self.kind, "path": str(self.path), "detail": self.detail, "fix": self.fix}


def classify(reason: str) -> str:
    """Map a verification reason (see :func:`trtwarm.volume.store.check_entry`) to a fault kind."""
    if "SHA-256" in reason:
        return "corrupt"
    if "truncated" in reason:
        return "truncated"
    if "manifest.json is missing" in reason:
        return "orphaned"
    if reason.startswith("manifest.json"):
        return "bad-manifest"
    return "damaged"


class _Untrusted(EntryInvalid):
    """No trusted key signed the entry (under enforce: judged before its files are read)."""


def _untrusted_first(gate: Gate) -> Callable[[Entry], None]:
    def judge(entry: Entry) -> None:
        trusted, detail = gate.status(entry)
        if not trusted:
            raise _Untrusted(detail)
    return judge


def inspect(inv: Inventory, gate: Gate | None = None) -> tuple[int, list[Problem]]:
    """Hash every entry (and, under *gate*'s policy, check its signature) and collect the faults.

    :return: ``(entries checked, problems)``; a problem whose fix is ``warn`` (warn mode) is reported, not counted
    """
    problems = []
    for info in inv.entries:
        if info.broken:  # a file, a symlink or an unreadable directory where an entry should be
            problems.append(Problem("damaged", info.path, info.problem or "not an entry", "quarantine"))
            continue
        try:  # under enforce the signature first: an entry no trusted key signed is never read
            entry = check_entry(info.path, None, digest=True,
                                trust=_untrusted_first(gate) if gate is not None and gate.mode == "enforce" else None)
        except _Untrusted as exc:
            problems.append(Problem("untrusted", info.path, exc.reason, "quarantine"))
            continue
        except EntryInvalid as exc:
            problems.append(Problem(classify(exc.reason), info.path, exc.reason, "quarantine"))
            continue
        except OSError as exc:  # an unreadable engine, an I/O error: this entry's problem, the others still count
            problems.append(Problem("damaged", info.path, f"unreadable ({exc.strerror})", "quarantine"))
            continue
        if gate is not None and gate.mode == "warn":
            trusted, detail = gate.status(entry)
            if not trusted:
                problems.append(Problem("untrusted", info.path, detail, "warn"))
    problems += [Problem("stale-staging", path, "a build directory left by a builder that is gone", "remove")
                 for path, stale in inv.staging if stale]
    problems += [Problem("stale-owner", o.path, f"build lock owner record without a heartbeat for "
                         f"{o.heartbeat_age:.0f} s", "remove") for o in inv.owners if o.stale]
    return len(inv.entries), problems


def fix(store: EngineStore, problems: list[Problem]) -> tuple[list[Problem], OSError | None]:
    """Repair what can be repaired: return the problems that were fixed, and the first error of the volume that
    kept one from being fixed (read-only, not writable...: the caller reports it after the list)."""
    fixed, failure = [], None
    for problem in problems:
        if problem.fix == "warn":
            continue
        try:
            if problem.fix == "quarantine":
                store.quarantine(problem.path, problem.kind, strict=True)
            elif problem.kind == "stale-staging":
                safe.rmtree(store.layout.root, problem.path)
            else:
                safe.unlink(store.layout.root, problem.path)
        except FileNotFoundError:  # gone meanwhile (another verify, gc, a builder): fixed all the same
            pass
        except OSError as exc:
            failure = failure or exc
            continue
        if not os.path.lexists(problem.path):
            fixed.append(problem)
    return fixed, failure


def _identity(entry: Path, name: str = "manifest.json") -> list[int] | None:
    """Which copy of an entry a finding is about: its manifest's inode and mtime (a rebuilt entry has new ones); with
    *name* ``manifest.sig.json``, which signature it had (``trtwarm sign`` renames a new one in: new inode)."""
    try:
        st = os.stat(entry / name)
    except OSError:
        return None
    return [st.st_ino, st.st_mtime_ns]


def record(layout: Layout, checked: int, remaining: list[Problem]) -> None:
    """Write :data:`RECORD` with the entries' problems that remain; skipped (logged) on a volume it cannot write."""
    doc = {"schema": 1, "finished": time.time(), "checked": checked,
           "problems": {p.path.name: {"kind": p.kind, "detail": p.detail, "manifest": _identity(p.path),
                                      "signature": _identity(p.path, SIGNATURE)}
                        for p in remaining if p.path.parent == layout.entries}}
    try:
        atomic_write_json(layout.root / RECORD, doc, layout.file_mode(), durable=False)
    except OSError as exc:
        log.info("not recording this verification on the volume: %s", exc.strerror)


def apply_record(layout: Layout, entries: list[EntryInfo]) -> dict[str, Any] | None:
    """Mark *entries* that the last verification found damaged (and that were not replaced or re-signed since) as
    damaged. A re-signed entry is not: ``trtwarm sign`` signs only after every file verified, so the finding (an
    untrusted signature, a damaged file) no longer holds.

    :return: the record (None: no verification recorded on this volume)
    """
    doc = read_json_object(layout.root / RECORD, 1 << 22)
    found = doc.get("problems") if doc else None
    if not isinstance(found, dict):
        return doc
    for info in entries:
        seen = found.get(info.name)
        if info.status == "ok" and isinstance(seen, dict) and seen.get("manifest") == _identity(info.path) \
                and seen.get("signature", _UNRECORDED) in (_UNRECORDED, _identity(info.path, SIGNATURE)):
            info.status, info.problem = "damaged", f"{seen.get('detail')} (found by trtwarm verify)"
    return doc


__all__ = ["KINDS", "RECORD", "Problem", "apply_record", "classify", "fix", "inspect", "record"]
