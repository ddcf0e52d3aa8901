"""What a command leaves for its user: standard output (a write that fails is the output's fault, never the cache
volume's), and on failure the error, its hint and, for ``init``, the JSON summary, termination message and hand-off.

Without this, ``trtwarm ls > /dev/full`` raised ``ENOSPC`` from ``print`` and was reported as a full cache volume
(exit 6, with a gc hint). :func:`guarded` puts a thin wrapper on ``sys.stdout`` for the length of a command: an
``OSError`` from a write or a flush becomes :class:`~trtwarm.errors.OutputError` (exit 14, or exit 0 for a reader
that closed the pipe early, see :mod:`trtwarm.cli.main`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from trtwarm.config import termination_log_path
from trtwarm.errors import (
    BuildError,
    ConfigError,
    HandoffOnVolume,
    Interrupted,
    OutputError,
    TrtwarmError,
    exit_code_for,
    hint_for,
    is_volume_errno,
    volume_error,
)

log = logging.getLogger("trtwarm")


class _Guarded:
    """``sys.stdout``, but failed writes raise :class:`OutputError`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _error(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise _error(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _error(exc: OSError) -> OutputError:
    closed = isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE
    return OutputError(f"cannot write the output: {exc.strerror or exc}", closed_pipe=closed)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Guard ``sys.stdout`` for the block, and flush it at the end inside the block, so a failure surfaces here."""
    stream = sys.stdout
    if stream is None:  # started with standard output closed: print() writes nothing, and that is no error
        yield
        return
    sys.stdout = _Guarded(stream)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stream


def report_failure(ns: argparse.Namespace | None, exc: TrtwarmError, environ: Mapping[str, str],
                    command: str | None = None) -> None:
    """Log the error and its hint; for ``init`` (also when its flags did not parse) also the JSON summary on stdout,
    the termination message and a failure record in ``engine.json``."""
    log.error("%s", exc.message)
    hint = hint_for(exc)
    command = getattr(ns, "command", None) or command
    if isinstance(exc, ConfigError) and not exc.hint and command not in (None, "init"):
        hint = f"check the flags and TRTWARM_* environment variables; `trtwarm {command} --help` lists them"
    if hint:
        log.error("hint: %s", hint)
    if command != "init":
        return
    doc = {"result": "error", "exit_code": exit_code_for(exc), "error": exc.message, "hint": hint}
    if isinstance(exc, BuildError) and exc.log_tail:
        doc["log_tail"] = exc.log_tail
    from trtwarm.init import handoff

    settings = getattr(ns, "settings", None)
    handoff.termination_message(settings.termination_log if settings else termination_log_path(environ), doc)
    if getattr(ns, "handoff_dir", None) and not isinstance(exc, HandoffOnVolume) and \
            not getattr(exc, "after_handoff", False):  # a stop during the push after the hand-off: it stays ready
        handoff.write_failure(Path(ns.handoff_dir).absolute(), {k: v for k, v in doc.items() if k != "log_tail"})
    try:
        print(json.dumps({k: v for k, v in doc.items() if k != "log_tail"}, separators=(",", ":")), flush=True)
    except (OSError, OutputError):  # standard output is what failed, or is gone: the log and engine.json have it
        pass


def _misplaced(exc: OSError) -> bool:
    """Whether *exc* is trtwarm meeting a link (opened ``O_NOFOLLOW``: ``ELOOP``) or a directory (``EISDIR``: a
    writer of the volume made ``.locks/<key>.lock`` or an owner record a directory) where its own file belongs."""
    if exc.errno == errno.ELOOP:
        return os.path.islink(exc.filename)
    return exc.errno == errno.EISDIR and os.path.isdir(exc.filename) and not os.path.islink(exc.filename)


def as_error(exc: BaseException, reporting: bool) -> TrtwarmError | None:
    """The typed error *exc* is reported as (its exit code, its hint); None: a closed pipe whose reader had what it
    wanted (``trtwarm ls | head``), which is success unless the output is the command's result (*reporting*:
    ``verify``, ``gc``...)."""
    if isinstance(exc, OutputError) and exc.closed_pipe:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not reporting:
            return None
        return OutputError("the output was cut short (the reader closed the pipe): the result was not reported in "
                           "full", hint="let the command write its whole output (e.g. to a file, then read that), "
                           "or use --json and a reader that reads to the end")
    if isinstance(exc, TrtwarmError):
        return exc
    if isinstance(exc, KeyboardInterrupt):  # SIGINT outside init (init turns it into Interrupted itself)
        return Interrupted("interrupted (SIGINT)")
    if isinstance(exc, OSError) and exc.filename and _misplaced(exc):
        from trtwarm.fs.safe import refusal  # a link or a directory where trtwarm's own file belongs: exit 9

        return refusal(exc.filename, what="file")
    if is_volume_errno(exc):  # a volume fault no layer translated: still exit 6 with its hint, never exit 1
        log.debug("untranslated volume error", exc_info=exc)
        return volume_error(exc, "use")
    log.debug("traceback", exc_info=exc)  # the last resort: one line, the traceback only at debug level
    return TrtwarmError(f"unexpected error: {type(exc).__name__}: {exc}", hint="this is a bug in trtwarm: please "
                        "report it with the log above")


__all__ = ["as_error", "guarded", "report_failure"]
