"""The init container's side of the remote repository: pull a missing entry onto the volume, push a fresh build.

``trtwarm init`` calls :meth:`RemoteSync.pull` with the key's local lock held (one pull per volume; the others
wait and find the entry) and :meth:`RemoteSync.push` after a build. Policy:

* wrong credentials and a missing bucket always fail the init (exit 11 / 12): a misconfigured fleet should be
  loud, not silently build everywhere;
* an unreachable or failing store, or a refused blob, makes a builder log it, count it and build (the object
  store is not on the serving path); a pull-only init (``--read-only``) has no fallback and fails (exit 13 / 10);
* a blob that fails its SHA-256 is never published; it is reported (log, Event, ``integrity`` error) and
  remembered, so the push after the rebuild uploads it again (``repair``).

Everything the sidecar exports (bytes and seconds pulled and pushed, errors by kind, the push outcome) is kept in
:attr:`RemoteSync.stats` and written into the hand-off.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from trtwarm.errors import EntryInvalid, RemoteAuthError, RemoteBucketError, RemoteError
from trtwarm.remote.backend import open_repository, parse_remote
from trtwarm.remote.client import KINDS, kind_of
from trtwarm.remote.pull import BlobCorrupt, pull_into
from trtwarm.remote.push import push_entry
from trtwarm.remote.url import RemoteURL
from trtwarm.volume.store import EngineStore
from trtwarm.volume.entry import UNSIGNED, Entry
from trtwarm.volume.verified import Bytes

log = logging.getLogger("trtwarm.remote")
PUSH_MODES = ("off", "best-effort", "required")
Emit = Callable[[str, str, str], None]
#: called with (entry name, ref) before anything is downloaded: the trust policy's ``Gate.check_ref``; it raises
#: EntryInvalid (UntrustedEntry) to refuse the ref (a builder then builds) or a TrustError (this Pod cannot go on)
VerifyRef = Callable[[str, dict[str, Any]], None]


class RemoteSync:
    """One init's use of one repository."""

    def __init__(self, remote: RemoteURL | Any, store: EngineStore, *, push: str = "best-effort", strict: bool = False,
                 emit: Emit | None = None, verify_ref: VerifyRef | None = None) -> None:
        self.repo = open_repository(remote)
        self.store, self.push_mode, self.strict = store, push, strict
        self.emit = emit or (lambda reason, message, kind: None)
        self.verify_ref = verify_ref
        self.corrupt: set[str] = set()
        self.refused: tuple[str, str] | None = None  # (kind, why) this init refused the repository's engine
        self._said_absent = False
        self.stats: dict[str, Any] = {"url": remote.url, "pulled_bytes": 0, "pushed_bytes": 0, "pull_seconds": None,
                                      "push_seconds": None, "push": "off" if push == "off" else "not-needed",
                                      "errors": dict.fromkeys(KINDS, 0)}

    @classmethod
    def for_init(cls, settings: Any, store: EngineStore, emit: Emit | None) -> RemoteSync:
        """The init's: ``--remote`` parsed from *settings* (a :class:`trtwarm.config.Settings`); a pull-only init
        (``--read-only``) never pushes and has no fallback; its requests are bounded by ``--lock-timeout`` too (the
        longest it may wait for an engine). :raises ConfigError: a bad URL or AWS setting"""
        remote = bounded(parse_remote(settings.remote, settings.environ, insecure=settings.insecure_registry),
                         settings)
        return cls(remote, store, emit=emit, strict=settings.read_only,
                   push="off" if settings.read_only else settings.remote_push)

    def _count(self, error: RemoteError) -> None:
        self.stats["errors"][kind_of(error)] += 1

    def _refuse(self, name: str, why: str, kind: str) -> None:
        """The repository's engine for *name* was refused (*kind* ``trust`` or ``integrity``): an Event, and
        remembered for the push, which cannot replace a ref."""
        self.refused = (kind, why)
        self.emit("RemoteEngineRejected", f"refused {name} from {self.repo.url}: {why}", "Warning")

    def _tolerate(self, error: RemoteError, doing: str) -> None:
        """Count *error*; re-raise it unless a build can stand in (see the module's policy)."""
        self._count(error)
        if isinstance(error, (RemoteAuthError, RemoteBucketError)) or self.strict:
            raise error
        log.warning("remote %s failed: %s; building locally instead", doing, error.message)

    def pull(self, key: str, name: str, check: Callable[[Entry], None] | None = None) -> Entry | None:
        """Fetch *key* from the repository and publish it as ``entries/<name>`` (call with the key's lock held).

        :param check: the builder's checks on the staged entry (plan header, a real load with ``--verify load``)
        :return: the published entry, or None when the repository has none or it was refused
        """
        try:
            ref = self.repo.get_ref(key)
            if ref is None:
                log.log(logging.DEBUG if self._said_absent else logging.INFO, "%s has no engine for %s",
                        self.repo.url, key[:16])
                self._said_absent = True
                return None
            if self.verify_ref is not None:
                self.verify_ref(name, ref)
            return self._fetch(ref, key, name, check)
        except EntryInvalid as exc:  # the trust policy refused the ref: it is never downloaded
            self.stats["errors"]["trust"] += 1
            self._refuse(name, exc.reason, "trust")
            if self.strict:
                raise RemoteError(f"the remote engine for {name} was refused: {exc.reason}") from None
            log.warning("refused the remote engine for %s: %s; building locally instead", key[:16], exc.reason)
        except BlobCorrupt as exc:
            self.corrupt.add(exc.sha256)
            self._count(exc)
            self._refuse(name, exc.message, "integrity")
            if self.strict:
                raise BlobCorrupt(exc.message, exc.sha256, hint="nothing was published; a builder's push uploads "
                                  "the blob again (a Pod that may build, or the prebuild Job), or remove the ref "
                                  "(`trtwarm remote rm KEY`) and prebuild it") from None
            log.warning("refused the remote engine for %s: %s; building locally instead (the push uploads the blob "
                        "again if this build has the same bytes; otherwise `trtwarm remote rm %s` lets the next push "
                        "publish a whole one)", key[:16], exc.message, key[:16])
        except RemoteError as exc:
            self._tolerate(exc, "pull")
        return None

    def _fetch(self, ref: dict[str, Any], key: str, name: str, check: Callable[[Entry], None] | None) -> Entry | None:
        """Pull *ref* into staging, check it and publish it as ``entries/<name>``: the entry as pulled (the pulled
        files' descriptors, the ref's manifest and signature in memory: what was verified, never the volume's
        directory read again), or None (refused here, or another entry took the name: the caller checks that one
        in full)."""
        manifest, layout = ref["manifest"], self.store.layout
        pulled = Bytes(ref.get("signature"), None if ref.get("signature") else UNSIGNED)
        try:
            with self.store.staging(key, "pull") as staging:
                r = self.repo.client.remote
                stats = pull_into(self.repo, manifest, staging, chunk=r.chunk, window=r.concurrency, into=pulled,
                                  mode=layout.file_mode(), dir_mode=layout.dir_mode())
                try:
                    if check is not None:
                        check(Entry(staging.path, manifest, pulled))
                except EntryInvalid as exc:
                    log.warning("the remote engine for %s does not pass this node's checks (%s); building locally",
                                key[:16], exc.reason)
                    self.emit("RemoteEngineRejected", f"{name} from {self.repo.url} {exc.reason}", "Warning")
                    pulled.close()
                    return None
                won = self.store.publish(staging, name, manifest, ref.get("signature"))
        except BaseException:
            pulled.close()
            raise
        self.stats.update(pulled_bytes=stats.bytes, pull_seconds=round(stats.seconds, 3),
                          pull_hash_seconds=round(stats.hash_seconds, 3),
                          pull_tail_seconds=round(stats.tail_seconds, 3))
        pinned = self._pinned(key)
        log.info("pulled %s from %s: %d files, %.1f MiB in %.2f s%s", name, self.repo.url, stats.files,
                 stats.bytes / 2**20, stats.seconds, f" ({pinned})" if pinned else "")
        if not won:  # another entry took the name: not what was verified here, so the caller checks it in full
            pulled.close()
            return None
        return Entry(layout.entry_dir(name), manifest, pulled)

    def push_staged(self, staging: Any, built: Entry, name: str,
                    check: Callable[[Entry], None] | None = None) -> Entry | None:
        """``required``: push a build (*built*: its verified bytes, manifest and signature) before anything is
        published locally from *staging* (a :class:`~trtwarm.volume.verified.Dir`).

        :return: None when ours is the ref (or the winner's engine has our bytes): publish ours; else the winner's
            entry, pulled and published instead, so every volume ends with the ref's engine
        :raises RemoteError: the push failed (the Pod fails; nothing was published)
        """
        manifest = built.manifest
        self.push(built)
        winner = self.stats.pop("winner", None)
        if winner is None or _engine_sha(winner["manifest"]) == _engine_sha(manifest):
            return None
        key = str(manifest["key"])
        if not self._adoptable(name, winner):  # refused here before, or by the trust policy: publish this build
            self.stats["push"] = "lost"
            return None
        log.info("another pusher's engine for %s won the ref; publishing it instead of this build", key[:16])
        adopted = self._fetch(winner, key, name, check)
        self.stats["push"] = "adopted" if adopted is not None else "lost"
        return adopted

    def push(self, entry: Entry) -> None:
        """Push a verified entry (its bytes as checked, its envelope as read: :attr:`Entry.opened`) under
        :attr:`push_mode`. :raises RemoteError: only when ``required``."""
        if self.push_mode == "off":
            return
        try:
            r = self.repo.client.remote
            result = push_entry(self.repo, entry, repair=self.corrupt, part_size=max(r.chunk, 5 << 20),
                                concurrency=max(r.concurrency // 2, 1))
        except RemoteError as exc:
            self._count(exc)
            self.stats["push"] = "failed"
            if self.push_mode == "required":
                raise
            log.warning("push of %s to %s failed (best-effort, the Pod goes on): %s", entry.name, self.repo.url,
                        exc.message)
            return
        self.stats.update(pushed_bytes=result.bytes, push_seconds=round(result.seconds, 3),
                          push="pushed" if result.won else "lost")
        pinned = self._pinned(str(entry.manifest["key"]))
        if result.won:
            log.info("pushed %s to %s: %d blobs uploaded (%.1f MiB), %d already there%s, ref written in %.2f s%s",
                     entry.manifest.get("name", entry.name), self.repo.url, result.uploaded, result.bytes / 2**20,
                     len(result.skipped), "".join(f", {n} {what}" for n, what in ((result.refreshed, "refreshed"),
                                                                                 (result.healed, "healed")) if n),
                     result.seconds, f" ({pinned})" if pinned else "")
            return
        self._lost(entry, result.ref, result.uploaded)

    def _pinned(self, key: str) -> str | None:
        """The ref's pinned reference (an OCI registry's ``registry/repository@sha256:...``), also recorded in the
        hand-off's ``remote.manifest_digest``; None for a bucket."""
        pinned = self.repo.pinned(key)
        if pinned:
            self.stats["manifest_digest"] = pinned.rsplit("@", 1)[1]
        return pinned

    def _adoptable(self, name: str, winner: dict[str, Any]) -> bool:
        """Whether the ref that won the push race may be published here instead of this build: not one this init
        refused already (a corrupt blob: every builder would fail on it), and one the trust policy accepts (checked
        like a pull's, before a byte is downloaded). A refusal is counted, reported and remembered."""
        why = self.refused[1] if self.refused is not None else None
        if why is None and self.verify_ref is not None:
            try:
                self.verify_ref(name, winner)
            except EntryInvalid as exc:
                self.stats["errors"]["trust"] += 1
                self._refuse(name, exc.reason, "trust")
                why = f"the trust policy refuses it: {exc.reason}"
        if why is None:
            return True
        log.warning("another pusher's engine for %s won the ref, but it is refused here (%s); this build is "
                    "published here instead. A ref is never overwritten: remove it (`trtwarm remote rm %s`) and the "
                    "next push publishes a good one", name, why, str(winner["manifest"].get("key", ""))[:16])
        return False

    def _lost(self, entry: Entry, winner: dict[str, Any], uploaded: int) -> None:
        same = _engine_sha(winner["manifest"]) == _engine_sha(entry.manifest)
        self.stats["errors"]["conflict"] += 0 if same else 1
        if same and (self.refused is None or self.refused[0] == "integrity"):
            log.info("another pusher published %s first, with the same engine bytes%s", entry.name,
                     f"; {uploaded} blob(s) uploaded again (repaired)" if self.refused and uploaded else "")
            return
        if self.push_mode == "required":
            self.stats["winner"] = winner  # push_staged publishes the winner's engine instead of ours
            return
        # Replacing a published entry in place would pull the engine from under Pods on this volume that already
        # use it, so the volume keeps its own (equally valid) build; every other volume pulls the winner's.
        if self.refused is not None:  # the refused ref stays: every builder would rebuild, every consumer fail
            log.warning("the repository's engine for %s was refused here (%s) and a ref is never overwritten, so "
                        "this build was not published there; remove the ref (`trtwarm remote rm %s`) and the next "
                        "push publishes a good one. This volume keeps its own build", entry.name, self.refused[1],
                        str(entry.manifest.get("key", ""))[:16])
            return
        log.warning("another pusher (%s) published a different engine for %s first; this volume keeps its own build",
                    _who(winner["manifest"].get("built_by")), entry.name)


def bounded(remote: Any, settings: Any) -> Any:
    """*remote* (a backend's frozen URL dataclass) with the init's ``--progress-interval``, and for a pull-only init
    every request (its retries included) ended within ``--lock-timeout``, the longest it may wait for an engine
    (:meth:`trtwarm.transport.limits.Limits.capped`)."""
    limits = remote.limits.capped(settings.lock_timeout) if settings.read_only else remote.limits
    return dataclasses.replace(remote, progress=settings.progress_interval, limits=limits)


def _who(built_by: Any) -> str:
    """``pod P, node N, CI job J`` out of a manifest's ``built_by`` (whatever of it is set)."""
    if not isinstance(built_by, dict):
        return "unknown"
    said = [f"{k.replace('_', ' ')} {v}" for k, v in built_by.items() if v and isinstance(v, (str, int, float))]
    return ", ".join(said)[:200] or "unknown"


def _engine_sha(manifest: dict[str, Any]) -> str | None:
    for row in manifest.get("files") or []:
        if isinstance(row, dict) and row.get("role") == "engine":
            return str(row.get("sha256"))
    return manifest.get("engine_sha256")


__all__ = ["PUSH_MODES", "RemoteSync", "VerifyRef", "bounded"]
