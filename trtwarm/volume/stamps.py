"""Verify by stamp (``--verify stamp``): skip re-hashing a file that provably did not change since this node hashed it.

After a file of an entry matched the SHA-256 its manifest names, a **stamp** records the file's identity
``(device, inode, size, mtime_ns, ctime_ns)`` with that digest. A later hit whose file still has exactly that
identity, and whose manifest names the same digest, skips the hash: a hit no longer grows with the engine. Any
difference (a rewrite changes ctime, even when mtime and size are restored; a replaced file has another inode)
falls back to the full hash, which stamps the file again when it matches.

Threat model (next to signing's, see docs/volume-layout.md, Verification):

* **Where stamps live.** On node-local storage, never on the shared cache volume: ``--stamp-dir``
  (``TRTWARM_STAMP_DIR``), by default ``<handoff-dir>/stamps`` (the Pod's own emptyDir); a hostPath directory owned
  by the init container's uid shares them between the Pods of a node. A writer of the shared volume, who can alter
  an engine and its manifest, cannot write there, so it cannot vouch for a file it altered.
* **Who may write them.** Only this uid: a stamp directory that is group- or world-writable, or owned by another
  uid (other than root), is ignored (with one warning) and every file is hashed, as ssh's ``StrictModes`` does; a
  record owned by another uid or writable by others is ignored too.
* **What a stamp proves.** Only "this file still holds the bytes that hashed to D on this node". It never replaces
  the manifest's digest: a hit is accepted only when the stamp's digest equals the digest the manifest (and, with
  signing, its verified signature) names, so stamps compose with signatures per file of the manifest.
* **Signatures verified before.** Under a trust policy, the same directory also records each signature this node
  verified (``sig-<fingerprint>.json``), whatever ``--verify``: the fingerprint is the SHA-256 of the envelope,
  of the statement rebuilt from the manifest on the volume, and of the ids of the keys the policy trusts for the
  entry, so the record is the verdict of exactly those inputs. A later hit that reads the same manifest and envelope
  under the same keys skips the Ed25519 check (and importing ``cryptography``, most of its cost); anything altered
  is checked afresh. Only valid signatures are recorded, under the same ownership rules and ``--stamp-max-age`` as
  stamps.
* **Outside the model.** Someone who can set a file's ctime (root with the clock or the raw device, an NFS server's
  administrator) or write the node's stamp directory. Silent media corruption does not change ctime either: a stamp
  is trusted for ``--stamp-max-age`` (1 day) only, so every node re-hashes each engine it uses at least daily, and
  ``trtwarm verify`` (which never reads stamps) re-hashes the whole volume when run, e.g. from the gc CronJob.

Like git's "racily clean" rule and :mod:`trtwarm.volume.statcache`, a file changed less than :data:`RACY_SECONDS`
before it was hashed is not stamped: a second write in the same timestamp tick could otherwise go unseen.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from trtwarm import strictjson
from trtwarm.fs import safe
from trtwarm.fs.info import safely_owned
from trtwarm.fs.ops import TooLarge, atomic_write_json, mount_of, read_bounded_stat
from trtwarm.fs.ops import mountinfo as read_mountinfo
from trtwarm.volume.statcache import RACY_SECONDS, identity  # a stamp is keyed as the stat cache is
from trtwarm.volume.verified import Checker, check_bytes

log = logging.getLogger("trtwarm.stamps")
#: how long a stamp is trusted before the file is hashed again (catches silent media corruption)
MAX_AGE_SECONDS = 24 * 3600.0
_LIMIT = 4096
#: the names of stamps (``<dev>-<inode>.json``), signature records (``sig-<sha256>.json``) and hit records
#: (``hit-<crc32>.json``, :mod:`trtwarm.init.fasthit`)
_OURS = re.compile(r"[0-9a-f]+-[0-9a-f]+\.json|sig-[0-9a-f]{64}\.json|hit-[0-9a-f]{8}\.json")


def _unsafe_because(st: os.stat_result) -> str:
    if st.st_uid not in (os.geteuid(), 0):
        return f"it is owned by uid {st.st_uid}, not by this uid ({os.geteuid()}) or root"
    return f"its group or others may write it (mode {stat.S_IMODE(st.st_mode):04o}; make it 0700)"


def _where(path: Path, mountinfo: str) -> tuple[str, str]:
    """``(device, location within that filesystem)`` of *path*: its mount's ``major:minor`` and root joined with the
    rest of the path, so two bind mounts of one filesystem compare by where they really point."""
    mount = mount_of(path, mountinfo)
    rest = str(path)[len(mount.point.rstrip("/")):].lstrip("/")
    return mount.device, os.path.join(mount.root, rest) if rest else mount.root


def on_volume(directory: Path, volume: Path, mountinfo: str | None = None) -> bool:
    """Whether *directory* is inside *volume* (the cache), by path or through another mount of the same filesystem
    (e.g. a hostPath below the cache's hostPath, mounted elsewhere in the container)."""
    directory, volume = Path(os.path.realpath(directory)), Path(os.path.realpath(volume))
    if directory == volume or volume in directory.parents:
        return True
    mountinfo = mountinfo if mountinfo is not None else read_mountinfo()
    if mountinfo is None:
        return False
    (dev_d, loc_d), (dev_v, loc_v) = _where(directory, mountinfo), _where(volume, mountinfo)
    return bool(dev_d) and dev_d == dev_v and (loc_d == loc_v or loc_d.startswith(loc_v.rstrip("/") + "/"))


class StampBook:
    """The stamps of one node (a directory); :meth:`checker` gives the per-file hook of ``check_entry``.

    :param directory: node-local and private (see the module's threat model); created 0700 when missing
    :param files: whether file stamps are used (``--verify stamp``), not only signature records: said in warnings
    """

    def __init__(self, directory: Path, max_age: float = MAX_AGE_SECONDS, *, files: bool = True) -> None:
        self.directory, self.max_age = Path(directory), max_age
        self.vouched = self.hashed = self.hashed_bytes = self.signatures_vouched = 0
        self.oldest = float("inf")  # when the oldest stamp that vouched for a file in this process was written
        self._usable: bool | None = None
        self._warned = self._pruned = False
        self._without = "hashing every file" if files else "checking every signature"  # what is lost without it

    def usable(self) -> bool:
        """Whether stamps may be used here (checked once; an unsafe directory is ignored, with a warning)."""
        if self._usable is None:
            self._usable = self._check_directory()
        return self._usable

    def _check_directory(self) -> bool:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(self.directory)
        except OSError as exc:
            log.warning("stamp directory %s is unusable (%s); %s", self.directory, exc.strerror, self._without)
            return False
        if not safely_owned(st):
            log.warning("ignoring stamps in %s: %s (a forged stamp could vouch for an altered engine); %s",
                        self.directory, _unsafe_because(st), self._without)
            return False
        return True

    def checker(self, then: Checker | None = None) -> Checker:
        """The per-file :data:`~trtwarm.volume.verified.Checker` of ``check_entry``: a file whose identity a trusted
        stamp vouches for holding the row's digests is not hashed; any other is checked (*then*, default
        :func:`~trtwarm.volume.verified.check_bytes`) and, when it matches, stamped. With *then* (the hand-off copy,
        which reads every byte anyway) *then* runs in either case; a vouched file still counts as vouched."""
        def check(fd: int, row: dict[str, Any]) -> int | None:
            before = os.fstat(fd)  # the identity of the very file checked, never of a path opened again
            if self.usable() and (stamp := self._stamp(before, row)) is not None:
                self.vouched += 1
                self.oldest = min(self.oldest, stamp["at"])
                return then(fd, row) if then is not None else fd
            verified = (then or check_bytes)(fd, row)
            self.hashed, self.hashed_bytes = self.hashed + 1, self.hashed_bytes + before.st_size
            if verified is not None and self.usable():
                self._record(fd, before, row)
            return verified
        return check

    def _sig_path(self, fingerprint: str) -> Path:
        return self.directory / f"sig-{fingerprint}.json"

    def _record_path(self, st: os.stat_result) -> Path:
        return self.directory / f"{st.st_dev:x}-{st.st_ino:x}.json"

    def _stamp(self, st: os.stat_result, row: dict[str, Any]) -> dict | None:
        """The stamp that vouches for the file *st* holding the digests of *row*, or None."""
        doc = self._read(self._record_path(st))
        ok = doc is not None and doc.get("stat") == identity(st) and doc.get("sha256") == row["sha256"] \
            and doc.get("chunks") == _chunks_digest(row) and self._fresh(doc)
        return doc if ok else None

    def _fresh(self, doc: dict) -> bool:
        return isinstance(doc.get("at"), (int, float)) and 0 <= time.time() - doc["at"] < self.max_age

    def _read(self, record: Path) -> dict | None:
        """A record of this directory, or None: missing, unreadable, or not safely owned (then with a warning)."""
        try:
            data, owner = read_bounded_stat(record, _LIMIT)  # one open: the owner judged is the file read
            doc = strictjson.loads(data, limit=_LIMIT)
        except FileNotFoundError:
            return None
        except (OSError, TooLarge, strictjson.JSONRefused) as exc:
            log.debug("ignoring unreadable stamp %s: %s", record, exc)
            return None
        if not safely_owned(owner):
            log.warning("ignoring stamp %s: %s", record, _unsafe_because(owner))
            return None
        return doc if isinstance(doc, dict) else None

    def signer(self, fingerprint: str) -> str | None:
        """The key id that signed what *fingerprint* names, when this node verified that signature before (within
        ``max_age``); None otherwise. *fingerprint* is the SHA-256 of everything the verdict depends on: the envelope,
        the statement rebuilt from the manifest, and the trusted keys (:meth:`trtwarm.trust.policy.Gate.status`)."""
        if not self.usable():
            return None
        doc = self._read(self._sig_path(fingerprint))
        if doc is None or doc.get("fingerprint") != fingerprint or not self._fresh(doc) \
                or not isinstance(doc.get("signer"), str):
            return None
        self.signatures_vouched += 1
        return doc["signer"]

    def record_signer(self, fingerprint: str, signer: str) -> None:
        """Remember that the signature named by *fingerprint* verified with the key *signer* (best effort)."""
        if not self.usable():
            return
        try:
            atomic_write_json(self._sig_path(fingerprint),
                              {"fingerprint": fingerprint, "signer": signer, "at": time.time()}, 0o600, durable=False)
        except OSError as exc:  # a lost record costs one signature check on the next hit, nothing more
            self._not_written(exc)
            return
        self._prune()

    def _not_written(self, exc: OSError) -> None:
        """A stamp or record could not be written (full, read-only, not ours, a directory in the way, EIO...): the
        hit goes on; the next one hashes again. Said once per process, as a warning: stamps that are never written
        make every hit hash, which the operator should know."""
        if not self._warned:
            self._warned = True
            log.warning("stamps are not being written to %s (%s): later hits go on %s; give the init's uid a "
                        "writable, node-local directory (--stamp-dir)", self.directory, exc.strerror or exc,
                        self._without)

    def _record(self, fd: int, before: os.stat_result, row: dict[str, Any]) -> None:
        now = time.time()
        if now - max(before.st_mtime_ns, before.st_ctime_ns) / 1e9 < RACY_SECONDS:
            log.debug("not stamping %s: changed %.1f s ago", row["path"], now - before.st_ctime_ns / 1e9)
            return
        if identity(os.fstat(fd)) != identity(before):  # written while it was hashed
            return
        try:
            atomic_write_json(self._record_path(before), {"stat": identity(before), "sha256": row["sha256"],
                                                          "chunks": _chunks_digest(row), "at": now,
                                                          "path": row["path"]}, 0o600, durable=False)
        except OSError as exc:  # a lost stamp costs one hash on the next hit, nothing more
            self._not_written(exc)
            return
        self._prune()

    def _prune(self) -> None:
        """Remove stamps and records past ``max_age`` (never trusted again), once per process that writes one: the
        directory holds one file per engine file and per signature verified, and would otherwise only grow."""
        if self._pruned:
            return
        self._pruned = True
        cutoff = time.time() - self.max_age
        try:
            with os.scandir(self.directory) as it:
                ours = [e for e in it if _OURS.fullmatch(e.name)]  # never a file of the user's (a shared dir)
        except OSError:
            return
        for item in ours:
            try:
                if item.stat(follow_symlinks=False).st_mtime < cutoff:
                    safe.unlink(self.directory, Path(item.path))  # the link itself, relative to the directory's fd
            except OSError:  # gone already (another Pod pruned it), or not ours to remove: harmless
                pass

    def summary(self) -> str:
        """``N by stamp, M hashed (B bytes)`` for the log."""
        return f"{self.vouched} file(s) by stamp, {self.hashed} hashed ({self.hashed_bytes} bytes)"


def _chunks_digest(row: dict[str, Any]) -> str | None:
    """What a stamp records of *row*'s chunk digests (which a check by chunk compares, not the whole-file digest):
    the SHA-256 of their list, or None for a row without them."""
    chunks = row.get("chunk_sha256")
    return hashlib.sha256("".join(chunks).encode()).hexdigest() if chunks else None


__all__ = ["MAX_AGE_SECONDS", "RACY_SECONDS", "StampBook", "identity", "on_volume"]
