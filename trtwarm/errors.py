"""Typed errors and the one table that maps each of them to an exit code and a hint.

Every failure a user can cause or fix is a :class:`TrtwarmError` subclass. :func:`exit_code_for` and
:func:`hint_for` are the only place exit codes are decided, so ``kubectl logs`` plus the exit code always tell a
configuration mistake from a broken model, a failed build, a lock timeout or an unusable volume.
"""

from __future__ import annotations


class TrtwarmError(Exception):
    """Base class: a failure with a message for the user and an optional, more specific hint."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(TrtwarmError):
    """A flag, an environment variable or a combination of them is invalid."""


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


class TrustError(TrtwarmError):
    """Under a trust policy in ``enforce`` mode, the entry is unsigned or not signed by a key trusted for it, and this
    Pod cannot replace it (``--read-only``, or no signing key). A bad key or policy file is a :class:`ConfigError`."""


class EntryInvalid(Exception):
    """A cache entry failed verification; internal, it never reaches the user (the entry is quarantined)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# (exit code, default hint). Exit 1 is reserved for anything unexpected.
_EXITS: dict[type[TrtwarmError], tuple[int, str]] = {
    ConfigError: (2, "check the flags and TRTWARM_* environment variables; `trtwarm init --help` lists them"),
    ModelError: (3, "check --model: it must be a readable ONNX file with its external-data files beside it"),
    BuildError: (4, "the builder's own output is in the log above; fix the model or the builder options"),
    LockTimeoutError: (5, "another Pod is still building this engine; raise --lock-timeout or wait for it"),
    VolumeError: (6, "check the cache volume: mounted, a directory, writable by this user, with free space"),
    TrustError: (7, "the entry is not signed by a key the trust policy trusts for it: let a builder with the "
                 "signing key rebuild it, or sign it (`trtwarm sign`), or check --trust-policy"),
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


def exit_table() -> list[tuple[int, str, str]]:
    """Return ``(code, error class, default hint)`` rows, for ``--help`` and the README."""
    return sorted((code, cls.__name__, hint) for cls, (code, hint) in _EXITS.items())


#: what each exit code means to the person reading it (``--help`` and the README's table print these)
EXIT_MEANINGS: dict[int, str] = {
    0: "ready (hit, built or waited); for other commands: done",
    2: "usage or configuration (bad flag, shape, unknown builder, missing TensorRT, no GPU visible)",
    3: "model missing, unreadable, empty, not ONNX, or missing / truncated external data",
    4: "build failed (the builder's output is in the log and the termination message)",
    5: "lock wait timed out (the holder is named), or --read-only found no engine in time",
    6: "cache volume unusable: not a directory, not writable when a build is needed, full, foreign layout version",
    7: "trust policy enforce: the entry is unsigned or not signed by a key trusted for it, and this Pod cannot replace "
       "it (--read-only, or no --signing-key)",
    1: "anything unexpected (one line; please report it); `trtwarm verify`: problems remain",
}


def exit_meanings() -> list[tuple[int, str]]:
    """``(code, meaning)`` for every exit code, in the order people read them (0, 2..6, then 1)."""
    return list(EXIT_MEANINGS.items())


__all__ = [
    "EXIT_MEANINGS",
    "EXIT_OK",
    "EXIT_UNEXPECTED",
    "BuildError",
    "ConfigError",
    "EntryInvalid",
    "LockTimeoutError",
    "ModelError",
    "TrtwarmError",
    "TrustError",
    "VolumeError",
    "exit_code_for",
    "exit_meanings",
    "exit_table",
    "hint_for",
]
