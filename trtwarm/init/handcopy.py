"""The Pod-private hand-off (``--handoff copy``): the server loads this Pod's copy of the verified files, so nothing
written to the shared volume after the check reaches it.

Each file is copied into a new ``<handoff-dir>/copies/<key16>.<rand>/`` and hashed in the same read
(:func:`trtwarm.fs.copy.copy_hashed`: a reflink where the filesystem offers it, then the copy is hashed), and the copy
must hash to the manifest's digest. Under ``--verify digest``/``load`` the verification itself makes the copies
(:class:`CopyingDigest`, the ``file_digest`` hook of :func:`trtwarm.volume.store.check_entry`), so a hit reads
its engine once; under ``--verify stamp`` the stamps vouch without reading and the copy is the one read.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from trtwarm.errors import VolumeError
from trtwarm.fs import safe
from trtwarm.fs.copy import copy_hashed, prune
from trtwarm.fs.info import identity
from trtwarm.fs.ops import sha256_file
from trtwarm.init.handoff import WarmReport

log = logging.getLogger("trtwarm.init.handoff")
#: ``<handoff-dir>/copies/<key16>.<rand>/`` holds this Pod's copy of the entry's files
COPIES = "copies"


class CopyChanged(Exception):
    """A file's copy does not hash to its manifest digest: the volume changed it after the check."""


class CopyingDigest:
    """A ``file_digest`` hook that copies each file it hashes into a pending directory of the hand-off, in the same
    read; :func:`hand_over_files` then takes the copies whose digest is the manifest's instead of reading again."""

    def __init__(self, handoff_dir: Path, key: str) -> None:
        copies_dir(handoff_dir)  # a link or a file there is refused now (exit 9), before anything is copied
        self.handoff_dir = handoff_dir
        self.pending = handoff_dir / COPIES / f"{key[:16]}.{os.urandom(4).hex()}.pending"
        self.copies: dict[str, tuple[Path, str]] = {}
        self._made = 0

    def __call__(self, path: Path, expected: str) -> str:
        """The SHA-256 of *path*, copied meanwhile; a hand-off that cannot take the copy falls back to hashing."""
        try:
            safe.makedirs(self.handoff_dir, self.pending, 0o755)
            self._made += 1
            dst = self.pending / str(self._made)
            digest, _size, _reflink = copy_hashed(str(path), str(dst))
        except OSError as exc:
            log.debug("verifying %s without copying it: %s", path, exc)
            return sha256_file(path)[0]
        self.copies[str(path)] = (dst, digest)
        return digest

    def take(self, src: Path, expected: str) -> Path | None:
        """The copy of *src*, when this verification made one of the digest *expected*."""
        made = self.copies.pop(str(src), None)
        return made[0] if made is not None and made[1] == expected else None

    def discard(self) -> None:
        """Remove the copies not taken."""
        safe.rmtree(self.handoff_dir, self.pending, ignore_errors=True)


def copies_dir(handoff_dir: Path) -> Path:
    """``<handoff-dir>/copies``, made if missing, reached without following a link (the server's container shares
    the hand-off directory: it must not point the copies, or their pruning, elsewhere). :raises UnsafeVolume:"""
    path = handoff_dir / COPIES
    handoff_dir.mkdir(parents=True, exist_ok=True)  # the directory itself is the operator's (--handoff-dir)
    safe.makedirs(handoff_dir, path, 0o755)
    return path


def copy_entry(handoff_dir: Path, key: str, entry: Path, files: list[dict[str, Any]],
               made: CopyingDigest | None = None) -> Path:
    """Copy every listed file of *entry* into a new ``<handoff-dir>/copies/<key16>.<rand>/`` (taking *made*'s copies
    where it made them), each compared with its manifest digest: the new directory.

    :raises CopyChanged: a copy's digest differs from the manifest's (the directory is removed)
    :raises OSError: the hand-off directory cannot be written
    """
    target = copies_dir(handoff_dir) / f"{key[:16]}.{os.urandom(4).hex()}"
    safe.makedirs(handoff_dir, target, 0o755)
    try:
        for item in files:
            src, dst = entry / item["path"], target / item["path"]
            safe.makedirs(handoff_dir, dst.parent, 0o755)
            if made is not None and (copied := made.take(src, item["sha256"])) is not None:
                os.rename(copied, dst)  # hashed to the manifest's digest as it was copied, during verification
                continue
            digest, _size, _reflink = copy_hashed(str(src), str(dst))
            if digest != item["sha256"]:
                raise CopyChanged(f"{item['path']} of {entry.name} changed on the volume after it was verified "
                                  "(its copy does not match the manifest's SHA-256)")
    except BaseException:
        safe.rmtree(handoff_dir, target, ignore_errors=True)
        raise
    return target


def prune_copies(handoff_dir: Path, keep: Path | None) -> None:
    """Remove every earlier copy in ``<handoff-dir>/copies`` but *keep* (a server holding an old one open keeps
    reading it; the space returns when it closes it)."""
    prune(str(handoff_dir / COPIES), str(keep) if keep is not None else None)


def mode_of(settings: Any, gate: Any) -> str:
    """``--handoff``, else ``copy`` under an enforced trust policy (*gate*'s effective mode) and ``link`` otherwise."""
    return settings.handoff or ("copy" if gate.mode == "enforce" else "link")


def hand_over_files(handoff_dir: Path, mode: str, key: str, entry: Path, files: list[dict[str, Any]],
                    report: WarmReport, made: CopyingDigest | None = None) -> Path | None:
    """Decide what *report* hands over: the entry's files on the volume (``link``) or this Pod's verified copy of
    them (``copy``, see :func:`copy_entry`), with each file's identity. :return: the copy's directory, or None

    :raises VolumeError: the copy failed, or the volume changed a file after it was verified
    """
    report.handoff, target = mode, None
    if mode == "copy":
        try:
            target = copy_entry(handoff_dir, key, entry, files, made)
        except CopyChanged as exc:
            raise VolumeError(f"nothing handed over: {exc}", hint="something rewrites published entries in place "
                              "on the cache volume; the next start verifies the entry again (`trtwarm verify` "
                              "finds it)") from None
        except OSError as exc:
            raise VolumeError(f"cannot copy the engine into the hand-off directory {handoff_dir}: {exc.strerror}",
                              hint="give --handoff-dir (an emptyDir) room for the engine, or pass --handoff link")
        report.path = str(target / Path(report.path).name)
        report.files = {str(target / f["path"]): f["bytes"] for f in files}
    report.identities = {path: identity(os.lstat(path)) for path in list(report.files) or [report.path]}
    return target


__all__ = ["COPIES", "CopyChanged", "CopyingDigest", "copies_dir",
           "copy_entry", "hand_over_files", "mode_of", "prune_copies"]
