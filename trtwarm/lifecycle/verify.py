"""``trtwarm verify``: re-hash every entry against its manifest and find what a crash or a bad disk left behind.

Inspect, then plan, then execute: :func:`inspect` only reads (and hashes); :func:`fix` quarantines bad entries
(kept for inspection, never deleted here), removes staging directories of dead builders and stale owner records.
Under a trust policy each entry whose files verify also has its signature checked: under ``enforce`` an entry no
trusted key signed is a problem (``untrusted``, quarantined by ``--fix``); under ``warn`` it is reported only.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import EntryInvalid
from trtwarm.lifecycle.inventory import Inventory
from trtwarm.trust.policy import Gate
from trtwarm.volume.store import EngineStore, check_entry

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


def inspect(inv: Inventory, gate: Gate | None = None) -> tuple[int, list[Problem]]:
    """Hash every entry (and, under *gate*'s policy, check its signature) and collect the faults.

    :return: ``(entries checked, problems)``; a problem whose fix is ``warn`` (warn mode) is reported, not counted
    """
    problems = []
    for info in inv.entries:
        if info.broken:  # a file, a symlink or an unreadable directory where an entry should be
            problems.append(Problem("damaged", info.path, info.problem or "not an entry", "quarantine"))
            continue
        try:
            entry = check_entry(info.path, None, digest=True)
        except EntryInvalid as exc:
            problems.append(Problem(classify(exc.reason), info.path, exc.reason, "quarantine"))
            continue
        except OSError as exc:  # an unreadable engine, an I/O error: this entry's problem, the others still count
            problems.append(Problem("damaged", info.path, f"unreadable ({exc.strerror})", "quarantine"))
            continue
        if gate is not None and gate.mode != "off":
            trusted, detail = gate.status(entry)
            if not trusted:
                problems.append(Problem("untrusted", info.path, detail, "quarantine" if gate.mode == "enforce"
                                        else "warn"))
    problems += [Problem("stale-staging", path, "a build directory left by a builder that is gone", "remove")
                 for path, stale in inv.staging if stale]
    problems += [Problem("stale-owner", o.path, f"build lock owner record without a heartbeat for "
                         f"{o.heartbeat_age:.0f} s", "remove") for o in inv.owners if o.stale]
    return len(inv.entries), problems


def fix(store: EngineStore, problems: list[Problem]) -> list[Problem]:
    """Repair what can be repaired; return the problems that were fixed."""
    fixed = []
    for problem in problems:
        if problem.fix == "warn":
            continue
        if problem.fix == "quarantine":
            if store.quarantine(problem.path, problem.kind) is None and problem.path.exists():
                continue
        elif problem.kind == "stale-staging":
            shutil.rmtree(problem.path, ignore_errors=True)
        else:
            problem.path.unlink(missing_ok=True)
        if not problem.path.exists():
            fixed.append(problem)
    return fixed


__all__ = ["KINDS", "Problem", "classify", "fix", "inspect"]
