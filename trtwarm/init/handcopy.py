"""The Pod-private hand-off (``--handoff copy``): the server loads this Pod's copy of the verified files, so nothing
written to the shared volume after the check reaches it.

Each file is copied from the descriptor that was checked (:mod:`trtwarm.volume.verified`: never its path opened
again) into a new ``<handoff-dir>/copies/<key16>.<rand>/``, and the copy is checked against the manifest's digests
as it is made (:func:`trtwarm.fs.copy.clone`: a reflink where the filesystem offers it, then the copy is checked).
On a hit the verification itself makes the copies (:class:`Copier`, the checker of
:func:`trtwarm.volume.entry.check_entry`), so the engine is read once, and the load check then runs on the copies.
After a build or a pull the copies are made from the build's private files or the pulled files' descriptors.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trtwarm.errors import VolumeError
from trtwarm.fs import safe
from trtwarm.fs.copy import prune
from trtwarm.fs.info import identity
from trtwarm.init.handoff import WarmReport
from trtwarm.volume.entry import Entry
from trtwarm.volume.verified import Bytes, Dir, check_files

#: ``<handoff-dir>/copies/<key16>.<rand>/`` holds this Pod's copy of the entry's files
COPIES = "copies"


class CopyChanged(Exception):
    """A file's copy does not match its manifest digests: the volume changed it after the check."""


class Copier:
    """A :data:`~trtwarm.volume.verified.Checker` that checks each file by copying it into a pending directory of
    the hand-off, checked as copied: the copy's descriptor is the verified bytes from then on (the load check reads
    it, :func:`copy_entry` renames it into place)."""

    def __init__(self, handoff_dir: Path, key: str) -> None:
        copies_dir(handoff_dir)  # a link or a file there is refused now (exit 9), before anything is copied
        self.handoff_dir = handoff_dir
        self.pending = handoff_dir / COPIES / f"{key[:16]}.{os.urandom(4).hex()}.pending"
        #: the copy's descriptor -> (its pending path, its device and inode): a descriptor number is reused once
        #: closed (a copy of an entry that then failed a check), so a copy is taken only if it is still that file
        self.made: dict[int, tuple[Path, int, int]] = {}

    def __call__(self, fd: int, row: dict[str, Any]) -> int | None:
        safe.makedirs(self.handoff_dir, self.pending, 0o755)
        name = self.pending / str(len(self.made) + 1)
        with Dir.own(self.handoff_dir, self.pending) as pending:
            copy = pending.clone_in(fd, name.name, row)
        if copy is not None:
            st = os.fstat(copy)
            self.made[copy] = (name, st.st_dev, st.st_ino)
        return copy

    def take(self, fd: int) -> Path | None:
        """The pending path of the copy this checker made that *fd* still is, or None."""
        made = self.made.pop(fd, None)
        if made is None:
            return None
        st = os.fstat(fd)
        return made[0] if (st.st_dev, st.st_ino) == made[1:] else None

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


def copy_entry(handoff_dir: Path, key: str, verified: Bytes, files: list[dict[str, Any]],
               made: Copier | None = None) -> Path:
    """Copy every listed file's verified bytes (*verified*: the descriptors checked) into a new
    ``<handoff-dir>/copies/<key16>.<rand>/``, each checked against its manifest digests as copied; a copy *made*
    during the verification is renamed into place instead. The copies' descriptors replace the originals in
    *verified*. :return: the new directory

    :raises CopyChanged: a copy does not match (the file changed in place since it was checked; nothing is left)
    :raises OSError: the hand-off directory cannot be written
    """
    target = copies_dir(handoff_dir) / f"{key[:16]}.{os.urandom(4).hex()}"
    safe.makedirs(handoff_dir, target, 0o755)
    try:
        rest = []
        for row in files:
            pending = made.take(verified.fds[row["path"]]) if made is not None else None
            if pending is None:
                rest.append(row)
                continue
            dst = target / row["path"]
            safe.makedirs(handoff_dir, dst.parent, 0o755)
            safe.rename(handoff_dir, pending, dst)  # checked as it was copied, during the verification
        with Dir.open(handoff_dir, target) as into:
            changed = verified.copy_into(into, rest)
        if changed is not None:
            raise CopyChanged(f"{changed} changed on the volume after it was verified (its copy does not match the "
                              "manifest's digests)")
    except BaseException:
        safe.rmtree(handoff_dir, target, ignore_errors=True)
        raise
    return target


def copy_again(handoff_dir: Path, key: str, source: Path, files: list[dict[str, Any]]) -> tuple[Path, dict[str, int],
                                                                                              dict[str, list[int]]]:
    """The repeat hit's copy (:mod:`trtwarm.init.fasthit`): the entry *source* opened once, each listed file copied
    from its descriptor and checked against the record's rows (the manifest's, as the recorded hit verified them):
    ``(the copy's directory, {copy: size}, {copy: identity})``.

    :raises EntryInvalid: a file is missing, a link, not a regular file, or of another size; :raises CopyChanged:
        a copy does not match (the caller resolves in full, which verifies the entry again)
    """
    with Dir.open(source.parent.parent, source) as entry:
        verified = check_files(entry, files, checker=lambda fd, _row: fd)  # opened, sized: the copy checks bytes
    try:
        target = copy_entry(handoff_dir, key, verified, files)
        return (target, {str(target / f["path"]): f["bytes"] for f in files},
                {str(target / f["path"]): identity(os.fstat(verified.fds[f["path"]])) for f in files})
    finally:
        verified.close()


def prune_copies(handoff_dir: Path, keep: Path | None) -> None:
    """Remove every earlier copy in ``<handoff-dir>/copies`` but *keep* (a server holding an old one open keeps
    reading it; the space returns when it closes it)."""
    prune(str(handoff_dir / COPIES), str(keep) if keep is not None else None)


def mode_of(settings: Any, gate: Any) -> str:
    """``--handoff``, else ``copy`` under an enforced trust policy (*gate*'s effective mode) and ``link`` otherwise."""
    return settings.handoff or ("copy" if gate.mode == "enforce" else "link")


def hand_over_files(handoff_dir: Path, mode: str, key: str, entry: Entry, report: WarmReport,
                    made: Copier | None = None, *, recheck: bool = False) -> Path | None:
    """Decide what *report* hands over: the entry's files on the volume (``link``) or this Pod's copy of their
    verified bytes (``copy``, see :func:`copy_entry`), with each handed-over file's identity: the copy's, or the
    identity of the volume file that was checked (so the sidecar sees a change made since); with *recheck* (a link
    under ``enforce`` to files others can write) each linked file's manifest row too, which the sidecar checks the
    file against before its first yes. :return: the copy's directory, or None

    :raises VolumeError: the copy failed, or the volume changed a file after it was verified
    """
    verified = entry.opened
    assert verified is not None, "only a verified entry is handed over"
    report.handoff, target = mode, None
    if mode == "copy":
        try:
            target = copy_entry(handoff_dir, key, verified, entry.files, made)
        except CopyChanged as exc:
            raise VolumeError(f"nothing handed over: {exc} ({entry.name})", hint="something rewrites published "
                              "entries in place on the cache volume; the next start verifies the entry again "
                              "(`trtwarm verify` finds it)") from None
        except OSError as exc:
            raise VolumeError(f"cannot copy the engine into the hand-off directory {handoff_dir}: {exc.strerror}",
                              hint="give --handoff-dir (an emptyDir) room for the engine, or pass --handoff link")
        report.path = str(target / Path(report.path).name)
        report.files = {str(target / f["path"]): f["bytes"] for f in entry.files}
        report.identities = {str(target / f["path"]): identity(os.fstat(verified.fds[f["path"]]))
                             for f in entry.files}
    else:
        report.identities = {str(entry.path / f["path"]): verified.volume_ids[f["path"]] for f in entry.files}
        report.recheck = {str(entry.path / f["path"]): f for f in entry.files} if recheck else {}
    return target


__all__ = ["COPIES", "CopyChanged", "Copier", "copies_dir", "copy_again", "copy_entry", "hand_over_files",
           "mode_of", "prune_copies"]
