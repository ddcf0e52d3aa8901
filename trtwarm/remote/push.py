"""Push a published local entry: HEAD each blob, upload the missing ones with parallel multipart, write the ref last.

The ref is created only if absent (see :meth:`Repository.create_ref`): when another pusher won, its ref stays and
the result says so (``won=False`` with the winner's manifest), so the caller can adopt the winner's engine.
Blobs named in *repair* (found corrupt by a pull) are uploaded again even though they exist.

A blob found in the store may be an orphan that ``remote gc`` is about to delete (S3 has no conditional delete), so
a push that reuses one (a) uploads it again before the ref when it is older than :data:`REFRESH_AGE`: its age
restarts, and a gc that looks at it after that sees it young; and (b) once its ref won, HEADs every blob the ref
names and uploads any that vanished meanwhile: the push heals the ref it wrote. docs/decisions.md, "A push that
reuses a blob gc is deleting", says what window remains.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.remote.repo import Repository, blob_path, make_ref, manifest_files
from trtwarm.transport.waits import Transfer
from trtwarm.volume.entry import Entry
from trtwarm.volume.verified import Bytes

log = logging.getLogger("trtwarm.remote")
PART = 32 << 20
CONCURRENCY = 4
#: a reused blob last uploaded longer ago than this is uploaded again before the ref (``remote gc`` warns about a
#: ``--blob-grace`` under twice this: such a gc may delete a reused blob the push did not refresh)
REFRESH_AGE = 3600.0
#: after writing a ref that names a refreshed blob, the push waits this long before checking its blobs: a gc that
#: HEADed the blob before the refresh (and saw it old) has sent its DELETE by then, unless it stalled that long
HEAL_DELAY = 10.0


@dataclass
class PushResult:
    """What one push did."""

    won: bool
    ref: dict[str, Any]
    uploaded: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # found in the store, not uploaded
    refreshed: int = 0  # found, but older than the refresh age: uploaded again before the ref
    healed: int = 0  # vanished between the HEAD and the ref (a concurrent gc): uploaded again after it


def push_entry(repo: Repository, entry: Entry, *, repair: Collection[str] = (), part_size: int = PART,
               concurrency: int = CONCURRENCY, refresh_age: float = REFRESH_AGE,
               heal_delay: float = HEAL_DELAY) -> PushResult:
    """Upload the files of the verified *entry* (from the descriptors that were checked, never its directory's
    paths: a link swapped into the entry is never followed) and create its ref with its envelope as read (None when
    unsigned). A reused blob older than *refresh_age* seconds is uploaded again before the ref; after a won ref,
    every blob it names is checked (*heal_delay* seconds later when one was refreshed) and a missing one uploaded
    again. :raises RemoteError:"""
    if entry.opened is None or set(entry.opened.fds) != {row["path"] for row in entry.files}:
        raise RemoteError(f"{entry.name}: only an entry verified in this process is pushed")
    envelope = entry.opened.envelope
    manifest, signature = entry.manifest, envelope if isinstance(envelope, dict) else None
    start = time.monotonic()
    try:
        rows = manifest_files(manifest)
    except ValueError as exc:
        raise RemoteError(f"{entry.name}: {exc}") from None
    push = _Push(repo, entry.opened, part_size, concurrency)
    client = repo.client
    with Transfer(getattr(client, "name", repo.url), f"pushing {manifest.get('name', entry.name)} to",
                  sum(row["bytes"] for row in rows), getattr(client.remote, "progress", 10.0)) as progress:
        reused = push.send(rows, repair, progress)
    refreshed = push.refresh(reused, refresh_age)
    won, ref = repo.create_ref(str(manifest["key"]), make_ref(manifest, signature))
    if won and refreshed:
        time.sleep(heal_delay)
    healed = push.heal(rows, str(manifest["key"])) if won else 0
    skipped = [row["path"] for row, _modified in reused if row not in refreshed]
    return PushResult(won, ref, push.uploaded, push.sent, time.monotonic() - start, skipped, len(refreshed), healed)


class _Push:
    """The uploads of one push and their counts."""

    def __init__(self, repo: Repository, verified: Bytes, part_size: int, concurrency: int) -> None:
        self.repo, self.verified, self.part_size, self.concurrency = repo, verified, part_size, concurrency
        self.uploaded = self.sent = 0

    def put(self, row: dict[str, Any]) -> None:
        """Upload the file of *row* to its blob."""
        # /proc/<pid>/fd/<n>: the file checked, whatever stands under its name now
        self.repo.client.put_file(blob_path(row["sha256"]), self.verified.proc(row["path"]), self.part_size,
                                  self.concurrency)
        self.uploaded += 1
        self.sent += row["bytes"]

    def send(self, rows: list[dict[str, Any]], repair: Collection[str],
             progress: Transfer) -> list[tuple[dict[str, Any], float | None]]:
        """Upload the blobs the store lacks (or holds damaged, or *repair* names). :return: the reused rows, each
        with its blob's last upload (epoch seconds; None when the store gives no age)"""
        reused = []
        for row in rows:
            found = None if row["sha256"] in repair else self.repo.stat_blob(row["sha256"])
            if found is not None and found[0] == row["bytes"]:
                reused.append((row, found[1]))
            else:
                self.put(row)
            progress.add(row["bytes"])
        return reused

    def refresh(self, reused: list[tuple[dict[str, Any], float | None]], age: float) -> list[dict[str, Any]]:
        """Upload again each reused blob last uploaded more than *age* seconds ago (judged now, after the other
        uploads), so that its age restarts before the ref names it. :return: the rows uploaded again"""
        now = time.time()
        stale = [(row, now - modified) for row, modified in reused if modified is not None and now - modified > age]
        for row, old in stale:
            log.info("uploading blob %s (%s) again: it is %.0f s old, and a `remote gc` may be deleting it",
                     row["sha256"][:16], row["path"], old)
            self.put(row)
        return [row for row, _old in stale]

    def heal(self, rows: list[dict[str, Any]], key: str) -> int:
        """After our ref was written: upload again every blob it names that is missing (or damaged) now.
        :return: how many"""
        healed = 0
        for row in rows:
            if not self.repo.has_blob(row["sha256"], row["bytes"]):
                log.warning("blob %s (%s) vanished while the ref %s was written (a concurrent `remote gc`); "
                            "uploading it again", row["sha256"][:16], row["path"], key[:16])
                self.put(row)
                if not self.repo.has_blob(row["sha256"], row["bytes"]):
                    raise RemoteError(f"blob {row['sha256'][:16]} ({row['path']}) is missing from {self.repo.url} "
                                      "right after the store accepted it again", hint="the store (or a proxy before "
                                      "it) acknowledges uploads without keeping them: check it, then push again")
                healed += 1
        return healed


__all__ = ["PushResult", "push_entry"]
