"""Typed errors and the one table that maps each of them to an exit code and a hint.

Every failure a user can cause or fix is a :class:`TrtwarmError` subclass. :func:`exit_code_for` and
:func:`hint_for` are the only place exit codes are decided, so ``kubectl logs`` plus the exit code always tell a
configuration mistake from a broken model, a failed build, a lock timeout or an unusable volume.
"""

from __future__ import annotations

import errno
import os
from typing import TypeGuard


class TrtwarmError(Exception):
    """Base class: a failure with a message for the user and an optional, more specific hint."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(TrtwarmError):
    """A flag, an environment variable or a combination of them is invalid."""


class HandoffOnVolume(ConfigError):
    """``--handoff-dir`` is on the cache volume, whose writers could then point the server at any file: refused,
    and nothing is written there, not even the failure record (exit 2, as any configuration error)."""


class ModelError(TrtwarmError):
    """The model is missing, unreadable, empty, not ONNX, or references external data that is missing."""


class BuildError(TrtwarmError):
    """The builder ran and failed, or produced nothing usable."""

    def __init__(self, message: str, *, hint: str | None = None, log_tail: str = "") -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail


class LockTimeoutError(TrtwarmError, TimeoutError):
    """Waiting for another builder (or for a read-only cache to be filled) took longer than ``--lock-timeout``."""


class VolumeError(TrtwarmError):
    """The cache volume is unusable: not a directory, not writable when a build is needed, full, or incompatible."""


class UnsafeVolume(TrtwarmError):
    """The volume holds a symlink, or another file type, where trtwarm's own directory or file belongs (e.g.
    ``.staging`` a link to another directory, ``.leases`` a plain file): refused, nothing followed or deleted."""


class TrustError(TrtwarmError):
    """Under a trust policy in ``enforce`` mode, the entry is unsigned or not signed by a key trusted for it, and this
    Pod cannot replace it (``--read-only``, or no signing key). A bad key or policy file is a :class:`ConfigError`."""
class RemoteError(TrtwarmError):
    """The remote engine repository failed: a server error after retries, a refused blob, a broken protocol."""


class RemoteAuthError(RemoteError):
    """The object store refused the credentials (wrong key or secret, expired token) or denied the operation."""


class RemoteBucketError(RemoteError):
    """The bucket named by ``--remote`` does not exist at the endpoint."""


class RemoteUnreachable(RemoteError):
    """The object store's endpoint did not answer (DNS, connection refused, timeouts) after retries."""


class OutputError(TrtwarmError):
    """Standard output could not be written: a full or failing file behind a redirection, or a closed pipe.

    :attr:`closed_pipe` tells a reader that stopped reading (``trtwarm ls | head``), which only matters to commands
    whose output is their result (:data:`trtwarm.cli.main.REPORTING`)."""

    def __init__(self, message: str, *, hint: str | None = None, closed_pipe: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.closed_pipe = closed_pipe


class EntriesDamaged(TrtwarmError):
    """A command answered for every entry but found some damaged (``ls``, ``show``, ``verify``) or refused them
    (``sign``): its output lists them with the reason; exit 8, never 1 (a bug)."""


class Interrupted(TrtwarmError):
    """SIGINT stopped the command (a build in progress was stopped and its staging directory removed).

    :attr:`after_handoff`: it came after ``init`` handed the engine over (during the best-effort push): the
    hand-off stays as written, ready, and is not replaced by a failure record."""

    after_handoff = False


class Terminated(Interrupted):
    """SIGTERM stopped the command (Kubernetes deleting the Pod, or a node drain)."""


class EntryInvalid(Exception):
    """A cache entry failed verification; internal, it never reaches the user (the entry is quarantined)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ManifestInvalid(EntryInvalid):
    """A manifest whose shape is not what trtwarm writes (:func:`trtwarm.volume.schema.check_manifest`): *field*
    names the first wrong field."""

    def __init__(self, reason: str, *, field: str | None = None) -> None:
        super().__init__(reason)
        self.field = field


# (exit code, default hint). Exit 1 is reserved for anything unexpected.
_EXITS: dict[type[TrtwarmError], tuple[int, str]] = {
    ConfigError: (2, "check the flags and TRTWARM_* environment variables; `trtwarm init --help` lists them"),
    ModelError: (3, "check --model: it must be a readable ONNX file with its external-data files beside it"),
    BuildError: (4, "the builder's own output is in the log above; fix the model or the builder options"),
    LockTimeoutError: (5, "another Pod is still building this engine; raise --lock-timeout or wait for it"),
    VolumeError: (6, "check the cache volume: mounted, a directory, writable by this user, with free space"),
    TrustError: (7, "the entry is not signed by a key the trust policy trusts for it: rebuild it (`trtwarm rm` it and "
                 "run a builder Pod with a trusted --signing-key); never `trtwarm sign` an entry that failed a trust "
                 "check; or check --trust-policy"),
    UnsafeVolume: (9, "remove (or move away) what stands there: trtwarm recreates its own directories; then find "
                      "out who else writes this volume"),
    RemoteError: (10, "the remote engine repository failed; `trtwarm remote ls --remote URL` checks it"),
    RemoteAuthError: (11, "check the object-store credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from the "
                          "Secret, or the workload identity's role) and that they may read (and, to push, write) the "
                          "prefix"),
    RemoteBucketError: (12, "create the bucket, or fix the bucket name in --remote s3://BUCKET/PREFIX"),
    RemoteUnreachable: (13, "check AWS_ENDPOINT_URL, DNS and network policies from this Pod to the object store"),
    EntriesDamaged: (8, "`trtwarm verify --fix` quarantines damaged entries (the next init rebuilds them); "
                        "`trtwarm show ENTRY` says what is wrong with one"),
    OutputError: (14, "standard output goes to a full, failing or closed file or pipe: write it somewhere else"),
    Interrupted: (130, "interrupted (SIGINT); run the command again: nothing half-built was kept"),
    Terminated: (143, "terminated (SIGTERM), e.g. the Pod was deleted; the next start builds or waits again"),
}

_WRITABLE = ("run as a user allowed to read and write the volume (the Pod's fsGroup / runAsUser) and check the "
             "directories' modes")
_FULL = "free space with `trtwarm gc --max-bytes ...` (see `trtwarm stats`) or grow the volume"
#: errno -> (what it means on a cache volume, what to do). Every one is exit 6 (:class:`VolumeError`): the volume,
#: not trtwarm, is at fault, and the hint says what to fix. Anything else stays exit 1 (a bug: please report it).
VOLUME_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("the volume is full", _FULL),
    errno.EDQUOT: ("the volume's quota is exhausted", _FULL),
    errno.EROFS: ("the volume is mounted read-only", "mount it read-write where engines are built or removed (init, "
                  "gc, rm, verify --fix)"),
    errno.EACCES: ("permission denied", _WRITABLE),
    errno.EPERM: ("operation not permitted", _WRITABLE),
    errno.EIO: ("an I/O error: the disk or the network storage failed", "check the node's kernel log (dmesg) and "
                "the storage backend; then run `trtwarm verify` to find damaged entries"),
    errno.ENOTDIR: ("a path component is not a directory", "point --cache-dir at a directory on the shared volume; "
                    "remove the file that stands where a directory should be"),
    errno.ELOOP: ("a symbolic link loop on the path", "fix or remove the symlink that points (indirectly) to itself"),
    errno.ESTALE: ("a stale file handle: the network volume changed under its mount", "remount the volume (restart "
                   "the Pod) and check the NFS server"),
    errno.ENAMETOOLONG: ("a file name is too long for this filesystem", "use a shorter --cache-dir or --name"),
    errno.ENOLCK: ("the filesystem has no lock manager", "pass --lock-mode lease (see Locking in "
                   "docs/volume-layout.md)"),
}

EXIT_OK = 0
EXIT_UNEXPECTED = 1


def exit_code_for(error: BaseException) -> int:
    """Return the process exit code for *error* (1 for anything that is not a :class:`TrtwarmError`)."""
    for cls in type(error).__mro__:
        if cls in _EXITS:
            return _EXITS[cls][0]
    return EXIT_UNEXPECTED


def hint_for(error: TrtwarmError) -> str:
    """Return the error's own hint, else its class's default hint."""
    if error.hint:
        return error.hint
    for cls in type(error).__mro__:
        if cls in _EXITS:
            return _EXITS[cls][1]
    return ""


def volume_error(exc: OSError, doing: str, path: os.PathLike[str] | str | None = None, *,
                 hint: str | None = None) -> VolumeError:
    """Translate an :class:`OSError` raised by a volume into the :class:`VolumeError` of :data:`VOLUME_ERRNOS`.

    :param doing: what failed, as a verb phrase (``"remove entries from"``); the message reads ``cannot <doing>
        <path>: <meaning> (<strerror>)``. :param path: defaults to the file the error names. :param hint: replaces
        the table's hint where the caller knows better (e.g. ``--read-only`` for a build on a read-only volume).
    """
    where = path if path is not None else (exc.filename or "the cache volume")
    meaning, default_hint = VOLUME_ERRNOS.get(exc.errno or 0, (exc.strerror or str(exc), None))
    detail = f" ({exc.strerror})" if exc.strerror and exc.strerror.lower() not in meaning.lower() else ""
    return VolumeError(f"cannot {doing} {where}: {meaning}{detail}", hint=hint or default_hint)


def is_volume_errno(exc: BaseException) -> TypeGuard[OSError]:
    """Whether *exc* is an :class:`OSError` a volume can raise (see :data:`VOLUME_ERRNOS`), not a bug."""
    return isinstance(exc, OSError) and exc.errno in VOLUME_ERRNOS


def exit_table() -> list[tuple[int, str, str]]:
    """Return ``(code, error class, default hint)`` rows, for ``--help`` and docs/cli.md."""
    return sorted((code, cls.__name__, hint) for cls, (code, hint) in _EXITS.items())


#: what each exit code means to the person reading it (``--help`` and docs/cli.md print these; the README a short form)
EXIT_MEANINGS: dict[int, str] = {
    0: "ready (hit, built or waited); for other commands: done",
    2: "usage or configuration (bad flag, shape, unknown builder, missing TensorRT, no GPU visible, sidecar --port "
       "out of range or --bind not an address of this host)",
    3: "model missing, unreadable, empty, not ONNX, or missing / truncated external data",
    4: "build failed (the builder's output is in the log and the termination message)",
    5: "lock wait timed out (the holder is named), --read-only found no engine in time, or another gc holds the volume",
    6: "cache volume unusable: missing, not a trtwarm cache, not a directory, foreign layout version, or any OSError a "
       "volume raises: ENOSPC, EROFS, EACCES, EIO... (also during a build, whatever words the builder used: a build "
       "that fails with under 1 MiB free is a full volume); a damaged entry that a read-only Pod cannot move away and "
       "that nobody replaced within --lock-timeout",
    7: "trust policy enforce: the entry is unsigned or not signed by a key trusted for it, and this Pod cannot "
       "replace it (--read-only, or no --signing-key)",
    8: "some entries are damaged or problems were found: ls, show and verify list them (with the reason) and "
       "answer for the rest; sign signed the others and refused those; remote ls listed unreadable refs",
    9: "the volume holds a symlink or another file type where trtwarm's own directory or file belongs: refused, "
       "nothing followed or deleted (the message names the path)",
    10: "the remote repository failed: a server error after retries, a refused blob with nothing to fall back "
        "on (--read-only), a ref that is not a trtwarm ref",
    11: "the object store or registry refused the credentials (wrong key or secret, expired token) or the operation (a "
        "read-only identity pushing with --remote-push required)",
    12: "the bucket of --remote does not exist",
    13: "the object store's endpoint or the registry did not answer after retries (with --read-only; a builder "
        "builds instead)",
    14: "standard output could not be written (a full or failing file behind a redirection); also a closed pipe "
        "for verify, gc, rm and sign, whose result was cut short (for the other commands a closed pipe is the reader "
        "having what it wanted: exit 0). Not init: its result is the hand-off (engine.json and the engine link), "
        "already written, so it warns and exits with the init's own code",
    130: "stopped by SIGINT: a build in progress is stopped (its process group gets SIGTERM, then SIGKILL after "
         "10 s), its staging directory removed, the termination message written",
    143: "stopped by SIGTERM, likewise",
    1: "a bug in trtwarm (one line; please report it)",
}


def exit_meanings() -> list[tuple[int, str]]:
    """``(code, meaning)`` for every exit code, in the order people read them (0, 2..8, 10..14, 130, 143, then 1)."""
    return list(EXIT_MEANINGS.items())


__all__ = [
    "EXIT_MEANINGS",
    "EXIT_OK",
    "EXIT_UNEXPECTED",
    "BuildError",
    "ConfigError",
    "EntriesDamaged",
    "HandoffOnVolume",
    "EntryInvalid",
    "Interrupted",
    "LockTimeoutError",
    "ManifestInvalid",
    "OutputError",
    "RemoteAuthError",
    "RemoteBucketError",
    "RemoteError",
    "RemoteUnreachable",
    "ModelError",
    "Terminated",
    "TrtwarmError",
    "TrustError",
    "UnsafeVolume",
    "VOLUME_ERRNOS",
    "VolumeError",
    "exit_code_for",
    "exit_meanings",
    "exit_table",
    "hint_for",
    "is_volume_errno",
    "volume_error",
]
