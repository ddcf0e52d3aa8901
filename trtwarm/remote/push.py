"""Push a published local entry: HEAD each blob, upload the missing ones with parallel multipart, write the ref last.

The ref is created only if absent (see :meth:`Repository.create_ref`): when another pusher won, its ref stays and
the result says so (``won=False`` with the winner's manifest), so the caller can adopt the winner's engine.
Blobs named in *repair* (found corrupt by a pull) are uploaded again even though they exist.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm.errors import RemoteError
from trtwarm.remote.repo import Repository, blob_path, make_ref, manifest_files
from trtwarm.remote.waits import Transfer
from trtwarm.volume.store import SIGNATURE

log = logging.getLogger("trtwarm.remote")
PART = 32 << 20
CONCURRENCY = 4


@dataclass
class PushResult:
    """What one push did."""

    won: bool
    ref: dict[str, Any]
    uploaded: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)


def read_signature(entry: Path) -> dict[str, Any] | None:
    """The entry's ``manifest.sig.json`` as an opaque object, or None when unsigned."""
    try:
        doc = json.loads((entry / SIGNATURE).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RemoteError(f"{entry.name}/{SIGNATURE} is unreadable: {exc}",
                          hint="run `trtwarm verify --fix` on the volume, then push again") from None
    return doc if isinstance(doc, dict) else None


def push_entry(repo: Repository, entry: Path, manifest: dict[str, Any], signature: dict[str, Any] | None, *,
               repair: Collection[str] = (), part_size: int = PART, concurrency: int = CONCURRENCY) -> PushResult:
    """Upload the files of the entry at *entry* (its verified *manifest*) and create its ref with *signature* (the
    DSSE envelope, or None when unsigned). :raises RemoteError:"""
    start = time.monotonic()
    try:
        rows = manifest_files(manifest)
    except ValueError as exc:
        raise RemoteError(f"{entry.name}: {exc}") from None
    uploaded = sent = 0
    skipped = []
    client = repo.client
    with Transfer(getattr(client, "name", repo.url), f"pushing {manifest.get('name', entry.name)} to",
                  sum(row["bytes"] for row in rows), getattr(client.remote, "progress", 10.0)) as progress:
        for row in rows:
            if row["sha256"] not in repair and repo.has_blob(row["sha256"], row["bytes"]):
                skipped.append(row["path"])
            else:
                client.put_file(blob_path(row["sha256"]), entry / row["path"], part_size, concurrency)
                uploaded += 1
                sent += row["bytes"]
            progress.add(row["bytes"])
    won, ref = repo.create_ref(str(manifest["key"]), make_ref(manifest, signature))
    return PushResult(won, ref, uploaded, sent, time.monotonic() - start, skipped)


__all__ = ["PushResult", "push_entry", "read_signature"]
