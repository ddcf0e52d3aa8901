"""The repeat hit: this node's record of a verified stamped hit, repeated without resolving the key again.

A stamped hit (``--verify stamp``) that vouched for every file of its entry by stamp leaves a **hit record** in
the node-local stamp directory (:mod:`trtwarm.init.hitrecord` writes it, and says when): the start it answered (the
arguments, the working directory, and the environment without the Pod's own name and addresses), the
**witnesses** its answer rests on as stat identities (the model and its external data, the builder's installed
distribution, the trust policy and its keys, the volume's layout version, the entry's directory, manifest,
signature and files), the device as the key holds it, the node's boot id, and the hand-off it wrote. A later
``trtwarm init`` with the same start finds the record by a checksum of that start and, when every witness still
has its identity and the device reads the same (NVML again for a GPU), takes its lease, marks the use, writes the
hand-off, the termination message and the same log lines, and exits: a Python start, ``json`` and some ``stat``
calls, about 2x a bare ``python -c pass`` where the full init is about 5x (docs/benchmarks.md).

Anything else runs the full init, which may write a new record: no record, another start, another trtwarm
version or boot, a changed witness or device, stamps past ``--stamp-max-age``, an unsafe stamp directory or record,
Kubernetes Events to send. What a record proves is what the stamps and signature records under it prove (same
directory, same owner rules, same threat model: :mod:`trtwarm.volume.stamps`). Nothing is written before every
check has passed.

Imports: ``json``, ``os``, ``signal``, ``stat``, ``sys``, ``time``, ``zlib``, CPython's built-in SHA-256 and trtwarm's
leaf modules (:mod:`trtwarm.fs.atomic` writes as the full init does; :mod:`trtwarm.init.hitstart` names the start),
on purpose: they are the whole cost (for a GPU, :mod:`trtwarm.node.gpu` and NVML too; ``--handoff copy``: hashlib).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import sys
import time

from trtwarm import __version__, strictjson
from trtwarm.fs import atomic
from trtwarm.fs.info import FULL_ERRNOS, READ_ONLY_ERRNOS, identity, safely_owned
from trtwarm.init.hitstart import (
    ENV_KEY,
    ENV_KEY_BYTES,
    POD_OWN,
    boot_id,
    env_key,
    record_name,
    stamp_dir,
    start_of,
)
from trtwarm.names import holder
from trtwarm.node.podenv import events_configured

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: every module imported here is paid on each repeat
    from collections.abc import Mapping
    from typing import Any

SCHEMA = 1
LIMIT = 1 << 20  # a record holds the arguments, the witnesses and the report: a few KiB


def attempt(args: list[str], environ: Mapping[str, str]) -> int | None:
    """Repeat this node's hit for ``trtwarm init ARGS``: the exit code (0), or None to run the full init.

    SIGTERM and SIGINT are held from the first write to the process's exit (a few milliseconds; the caller exits
    at once): the hand-off is never left half-done, and a repeat that wrote it exits 0, its work complete.
    """
    started = time.monotonic()
    if events_configured(environ):  # the full init sends the EngineCacheHit Event
        return None
    directory = stamp_dir(args, environ)
    key = env_key(directory)
    if key is None:
        return None
    start = start_of(args, environ, key)
    try:
        record = _load(directory, start)
        if record is None or not (_holds(record["witnesses"]) and _device_holds(record["device"], environ)):
            return None  # checked before the lease: a changed input must leave no lease on a key it no longer has
    except (OSError, ValueError, LookupError, TypeError):  # a record this version cannot use: resolve in full
        return None
    try:  # before the signals are held: a copy takes as long as its bytes, and nothing refers to it yet
        copied = _copy(record["copy"], record["report"], record["handoff"]["dir"]) if record.get("copy") else {}
    except (OSError, ValueError, LookupError, TypeError):
        return None
    if copied is None:
        return None
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        done = _hand_over(record, environ, started, copied)
    except (OSError, ValueError, LookupError, TypeError):  # e.g. an unwritable hand-off: the full init reports it
        done = None
    if done is None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # the full init handles them from here
        return None
    _say(record, *done)  # the hand-off is written: from here on nothing falls back
    return 0


def _load(directory: str, start: dict[str, Any]) -> dict[str, Any] | None:
    """The record of *start* in *directory*, if safely owned, of this version, this boot and not expired."""
    if not safely_owned(os.stat(directory)):
        return None
    fd = os.open(os.path.join(directory, record_name(start)), os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not safely_owned(os.fstat(fd)):
            return None
        data = os.read(fd, LIMIT + 1)
    finally:
        os.close(fd)
    record = strictjson.loads(data, limit=LIMIT)  # JSONRefused (a ValueError): resolve in full
    if not (isinstance(record, dict) and record.get("schema") == SCHEMA and record.get("version") == __version__
            and record.get("start") == start and record.get("boot_id") == boot_id()
            and time.time() < record["expires"]):
        return None
    return record


def _holds(witnesses: list[list[Any]]) -> bool:
    """Whether every witness still has the identity recorded (``follow``: the model may be a link, entries not)."""
    for path, ident, follow in witnesses:
        if identity(os.stat(path) if follow else os.lstat(path)) != ident:
            return False
    return True


def _device_holds(device: dict[str, Any], environ: Mapping[str, str]) -> bool:
    """Whether the device reads as recorded: the CPU needs nothing (the boot id is checked); a GPU is read through
    NVML again, as the builder reads it (which GPU CUDA shows this container can change without a reboot)."""
    if device["choice"] == "cpu":
        return True
    from trtwarm.node import gpu  # NVML's share of the start: a GPU's full init pays it too
    from trtwarm.errors import TrtwarmError

    try:
        info = gpu.probe(device["choice"], environ)
    except TrtwarmError:  # no GPU now: the full init says so
        return False
    return device["fields"].get("kind") == "cpu" if info is None else \
        gpu.key_fields(info, device["hardware_compat"]) == device["fields"]


def _own_dirs(volume: str) -> bool:
    """Whether the volume's directories the repeat writes in are directories (``lstat``: a link to another directory,
    or a file there, is the full init's to refuse, exit 9)."""
    for name in ("entries", ".leases", ".uses"):
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(volume, name)).st_mode):
                return False
        except FileNotFoundError:
            continue
    return True


def _copy(copy: dict[str, Any], report: dict[str, Any], handoff_dir: str) -> dict[str, Any] | None:
    """``--handoff copy``: the entry's files copied into a new ``<handoff-dir>/copies/<key16>.<rand>/`` from
    descriptors opened once (:func:`trtwarm.init.handcopy.copy_again`), each checked as copied against the rows the
    record holds (the manifest's): the report's ``path``, ``files`` and ``identities`` for the copy, or None (a file
    changed: resolve in full, which verifies the entry again)."""
    from pathlib import Path  # a copy-mode repeat reads every byte: these imports are not its cost

    from trtwarm.errors import EntryInvalid
    from trtwarm.init.handcopy import CopyChanged, copy_again

    try:
        target, files, identities = copy_again(Path(handoff_dir), report["key"], Path(copy["source"]),
                                               copy["files"])
    except (EntryInvalid, CopyChanged):
        return None
    return {"path": os.path.join(target, os.path.basename(report["path"])), "files": files,
            "identities": identities, "copy_dir": str(target)}


def _hand_over(record: dict[str, Any], environ: Mapping[str, str], started: float,
               copied: dict[str, Any]) -> tuple[dict[str, Any], str | None] | None:
    """Lease, look again, mark the use, write the hand-off: ``(report, why no lease)``, or None (look in full)."""
    if not _own_dirs(record["lease"]["volume"]):
        return None
    lease = _take_lease(record["lease"], environ)
    if not _holds(record["witnesses"]):  # again after the lease, as the full init looks up after its lease: a gc
        return None  # that removed the entry meanwhile either saw the lease or is seen here
    verified = time.monotonic()
    atomic.touch_below(record["use"]["volume"], record["use"]["path"],  # = EngineStore.touch_use
                       lambda: _file_mode(record["use"]["volume"]))
    keep = copied.pop("copy_dir", None)
    report = dict(record["report"], **copied, seconds={"key": verified - started, "wait": 0.0, "build": 0.0,
                                                       "verify": 0.0, "total": time.monotonic() - started})
    if not copied:  # --handoff link: the files on the volume, whose identities the witnesses just matched
        report["identities"] = {p: identity(os.lstat(p)) for p in report.get("files") or [report["path"]]}
    _hand_off(record["handoff"]["dir"], report)
    if keep is not None:
        from trtwarm.fs.copy import prune

        prune(os.path.join(record["handoff"]["dir"], "copies"), keep)  # = trtwarm.init.handcopy.prune_copies
    return report, lease


def _say(record: dict[str, Any], report: dict[str, Any], lease: str | None) -> None:
    """The termination message, the full init's log lines and the summary on stdout; each best effort."""
    out = record["handoff"]
    summary = {"result": "hit", "key": report["key"][:16], "name": report["name"], "path": report["path"],
               "seconds": {k: round(v, 3) for k, v in report["seconds"].items()}}
    _termination_message(out["termination_log"], summary)
    log = _Log(out["log_format"])
    for logger, level, message in record["warnings"]:
        log.say(level, message, logger)
    log.say("INFO", f"key {report['key'][:16]} for {report['name']}")
    if lease is not None:
        log.say("WARNING", record["lease"]["not_taken"][lease])
    log.say("INFO", f"verified {report['name']} ({report['key'][:16]}): {record['files']} file(s) by stamp, 0 hashed "
                    "(0 bytes), repeating this node's record of the hit")
    log.say("INFO", f"hit {report['name']} in {report['seconds']['total']:.3f} s: {report['path']}", "trtwarm")
    try:
        print(json.dumps(summary, separators=(",", ":")), flush=True)
    except OSError as exc:  # as the full init: the summary is in engine.json and the termination message
        log.say("WARNING", f"cannot write the output: {exc.strerror or exc}; the summary is in "
                           f"{out['dir']}/engine.json")


def _take_lease(lease: dict[str, Any], environ: Mapping[str, str]) -> str | None:
    """Write this Pod's lease as :func:`trtwarm.volume.leases.take` does: None, or why not (``full``,
    ``read-only``) where the full init warns. :raises OSError: any other failure (the full init then reports it)"""
    if not os.path.isdir(lease["root"]):
        return None  # a volume without leases yet: the full init takes none either
    pod, namespace, host = environ.get("POD_NAME") or None, environ.get("POD_NAMESPACE") or None, os.uname().nodename
    doc = {"key": lease["key"], "name": lease["name"], "pod": pod, "namespace": namespace,
           "node": environ.get("NODE_NAME") or None, "hostname": host, "pid": os.getpid(), "refreshed": time.time()}
    try:  # every directory from the volume's root reached O_NOFOLLOW: a link there is the full init's to refuse
        leases, key = atomic.below(lease["volume"], os.path.join(lease["root"], lease["key"]))
        try:
            try:
                os.mkdir(key, dir_fd=leases)
            except FileExistsError:
                pass
            directory = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=leases)
        finally:
            os.close(leases)
        try:
            atomic.write_at(directory, holder(pod, namespace, host) + ".json",
                            (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), _file_mode(lease["volume"]),
                            durable=False)
        finally:
            os.close(directory)
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            return "full"
        if exc.errno in READ_ONLY_ERRNOS | {errno.ENOENT}:
            return "read-only"
        raise
    return None


def _file_mode(volume: str) -> int:
    """= :meth:`trtwarm.volume.layout.Layout.file_mode`: group-writable files on a group-shared volume."""
    return 0o664 if os.stat(volume).st_mode & 0o020 else 0o644


def _hand_off(directory: str, report: dict[str, Any]) -> None:
    """:func:`trtwarm.init.handoff.clear`, then :func:`trtwarm.init.handoff.write`: the previous report set aside, the
    ``engine`` link and ``engine.json`` replaced atomically."""
    for step in (lambda: os.replace(f"{directory}/engine.json", f"{directory}/engine.prev.json"),
                 lambda: os.unlink(f"{directory}/engine")):
        try:
            step()
        except FileNotFoundError:
            pass
    os.makedirs(directory, exist_ok=True)
    atomic.symlink(report["path"], f"{directory}/engine")
    atomic.write(f"{directory}/engine.json",
                 (json.dumps(dict(report, ready=True), indent=2, sort_keys=True) + "\n").encode(), durable=False)


def _termination_message(path: str, summary: dict[str, Any]) -> None:
    """= :func:`trtwarm.init.handoff.termination_message` for a summary (short: never over its 4 KiB)."""
    if os.path.exists(path) and os.access(path, os.W_OK):
        try:
            with open(path, "w") as handle:
                handle.write(json.dumps(summary, separators=(",", ":")))
        except OSError:
            pass


class _Log:
    """Log lines as :mod:`trtwarm.log` formats them (text or JSON, on stderr), without the logging package."""

    def __init__(self, fmt: str) -> None:
        self.json = fmt == "json"

    def say(self, level: str, message: str, logger: str = "trtwarm.init.warm") -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        line = (json.dumps({"ts": stamp, "level": level.lower(), "logger": logger, "msg": message}) if self.json
                else f"{stamp} {level:<7} {message}")
        try:
            sys.stderr.write(line + "\n")
        except (OSError, ValueError):  # a closed or full stderr: the hit stands, as with logging's handlers
            pass


__all__ = ["ENV_KEY", "ENV_KEY_BYTES", "LIMIT", "POD_OWN", "SCHEMA", "attempt", "boot_id", "env_key", "record_name",
           "stamp_dir", "start_of"]
