"""The sidecar's readiness: whether the engine handed over is there, unchanged, and (for a linked hand-off under
``enforce`` of files others can write) still the bytes that were signed; after the first yes, from memory.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtwarm.fs.info import identity
from trtwarm.init import handoff

if TYPE_CHECKING:
    from trtwarm.sidecar.metrics import VolumeWatcher

_PENDING = "pending"


def engine_ready(report: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether the hand-off says ready and every handed-over file is still there with its recorded identity
    (device, inode, size, mtime, ctime: an in-place rewrite of the same size changes ctime), or, in an older
    ``engine.json`` without ``identities``, its recorded size; and why not."""
    if report is None:
        return False, "no engine.json yet (trtwarm init has not finished)"
    if report.get("ready") is not True:
        return False, f"trtwarm init failed: {report.get('error', 'unknown error')}"
    files = report.get("files")
    expected = files if isinstance(files, dict) and files else {str(report.get("path")): report.get("engine_bytes")}
    known = report.get("identities") if isinstance(report.get("identities"), dict) else {}
    for path, recorded in expected.items():  # every file of the entry (an older engine.json lists none: the engine)
        what = "engine" if path == report.get("path") else "entry file"
        try:
            st = os.lstat(path)
        except OSError as exc:
            return False, f"{what} {path} is gone ({exc.strerror})"
        if st.st_size != recorded:
            return False, f"{what} {path} is {st.st_size} bytes, engine.json says {recorded}"
        if path in known and identity(st) != known[path]:
            return False, f"{what} {path} was rewritten or replaced after it was handed over (its identity changed)"
    return True, f"ready: {report.get('name')}"


class Readiness:
    """:func:`engine_ready`, asked until it says yes once; from then on the answer comes from memory.

    Once the engine was handed over, the server has it (or is loading it); the hand-off never changes again in this
    Pod. Re-reading the engine on the shared volume at every probe would let one NFS stall (a ``stat`` that hangs past
    the probe's timeout) mark every replica NotReady at once although their engines are loaded.

    A linked hand-off under ``enforce`` of files others can write (``recheck`` in ``engine.json``) is checked
    against its signed digests once more before the first yes, in a thread of its own (a probe never waits on a
    hash): a rewrite between the init's check and this one is never answered ready.
    """

    def __init__(self, handoff_dir: Path, volume: VolumeWatcher | None = None) -> None:
        self.handoff_dir, self.volume = handoff_dir, volume
        self._ready: tuple[str, dict[str, Any]] | None = None
        self._rechecks: dict[str, str | None] = {}  # the report's key -> None (matched) or why not; absent: pending
        self._checking = threading.Lock()

    def _rechecked(self, report: dict[str, Any]) -> tuple[bool, str]:
        """The verdict of re-checking *report*'s ``recheck`` rows (started in the background on the first ask)."""
        rows = report.get("recheck")
        if not isinstance(rows, dict) or not rows:
            return True, ""
        token = json.dumps([report.get("key"), sorted(rows)], default=str)
        with self._checking:
            if token not in self._rechecks:
                self._rechecks[token] = _PENDING
                threading.Thread(target=self._recheck, args=(token, rows), name="trtwarm-recheck",
                                 daemon=True).start()
            verdict = self._rechecks[token]
        if verdict is _PENDING:
            return False, "checking the linked engine against its signed digests"
        return (True, "") if verdict is None else (False, f"the linked engine changed after it was verified: "
                                                          f"{verdict}")

    def _recheck(self, token: str, rows: dict[str, Any]) -> None:
        from trtwarm.volume.verified import check_as_served  # hashlib: only a linked hand-off under enforce

        problem = None
        for path, row in rows.items():
            try:
                problem = check_as_served(Path(path), row)
            except (KeyError, TypeError, ValueError) as exc:  # a row engine.json should not hold
                problem = f"{path}: unreadable row ({exc})"
            if problem:
                break
        with self._checking:
            self._rechecks[token] = problem

    def check(self) -> tuple[bool, str, dict[str, Any] | None]:
        """``(ready, why, engine.json)``; reads the hand-off and the engine only until the first yes. Until then a
        cache volume that is missing or not a trtwarm cache (:attr:`VolumeWatcher.problem`) is not ready, whatever
        the hand-off says, and *why* says so."""
        if self._ready is not None:
            return True, *self._ready
        report = handoff.read(self.handoff_dir)
        ready, why = engine_ready(report)
        if ready and report is not None:
            ready, not_yet = self._rechecked(report)
            why = why if ready else not_yet
        problem = self.volume.problem if self.volume is not None else None
        if ready and self.volume is not None:  # before the first yes (remembered), look now: the first scan may
            problem = self.volume.check_mounted()  # not have run yet, or be older than the init
        if problem:
            ready, why = False, f"{why if not ready else 'engine.json says ready'}; the cache volume is unusable: " \
                f"{problem}"
        if ready and report is not None:
            self._ready = (why, report)
        return ready, why, report


__all__ = ["Readiness", "engine_ready"]
