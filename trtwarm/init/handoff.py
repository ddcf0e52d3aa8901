"""The init container's hand-off: ``<handoff-dir>/engine.json``, the ``engine`` symlink, the termination message.

The inference container reads the fixed path ``<handoff-dir>/engine`` (``TRTWARM_ENGINE``); the sidecar reads
``engine.json`` to decide readiness and to label its metrics. Both are replaced atomically, so a restarted init
never leaves a half-written report.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm import __version__
from trtwarm.errors import VolumeError, volume_error
from trtwarm.fs import safe
from trtwarm.fs.ops import atomic_symlink, atomic_write_json, read_json_object

log = logging.getLogger("trtwarm.init.handoff")
REPORT = "engine.json"
PREVIOUS = "engine.prev.json"
LINK = "engine"
TERMINATION_LIMIT = 4096


@dataclass
class WarmReport:
    """The outcome of one ``trtwarm init``."""

    key: str
    name: str
    path: str
    result: str  # hit | built | waited | pulled
    seconds: dict[str, float]
    device: dict[str, Any]
    builder: dict[str, Any]
    model_sha256: str
    precision: str = ""
    verify: str = "digest"
    engine_bytes: int = 0
    lock_mode: str = ""
    trtwarm_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)  # every file of the entry (absolute path → bytes)
    handoff: str = "link"  # link: `engine` points into the cache volume; copy: into this Pod's copy (--handoff)
    #: every handed-over file's (device, inode, size, mtime_ns, ctime_ns) when it was handed over: the sidecar's
    #: readiness compares them, so an in-place rewrite of the same size is not ready (any write changes ctime)
    identities: dict[str, list[int]] = field(default_factory=dict)
    #: a linked hand-off under ``enforce`` of files others can write: each file's manifest row (size, digests), which
    #: the sidecar checks the file against before it first answers ready (:mod:`trtwarm.sidecar.metrics`)
    recheck: dict[str, dict[str, Any]] = field(default_factory=dict)
    remote: dict[str, Any] = field(default_factory=dict)  # --remote: bytes/seconds pulled and pushed, errors by kind

    def summary(self) -> dict[str, Any]:
        """A compact one-line form for stdout and the termination message."""
        return {"result": self.result, "key": self.key[:16], "name": self.name, "path": self.path,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


UNUSABLE_HINT = ("mount a writable emptyDir at --handoff-dir, shared with the inference container (outside Kubernetes: "
                 "pass --handoff-dir DIR, a directory this user may write)")


def require_writable(handoff_dir: Path) -> None:
    """Create the hand-off directory if needed and check that this user may write it, before anything is built or
    pulled: a hand-off that cannot be written, found only after a build, wastes the build.

    :raises VolumeError: naming the directory (exit 6, as when writing it fails)
    """
    try:
        handoff_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise VolumeError(f"cannot use the hand-off directory {handoff_dir}: it is not a directory",
                          hint=UNUSABLE_HINT) from None
    except OSError as exc:
        raise volume_error(exc, "create the hand-off directory", handoff_dir, hint=UNUSABLE_HINT) from exc
    if not os.access(handoff_dir, os.W_OK | os.X_OK):  # also False on a read-only mount (EROFS), even for root
        raise VolumeError(f"cannot write the hand-off to {handoff_dir}: this user (uid {os.getuid()}) may not write "
                          "there, or it is mounted read-only", hint=UNUSABLE_HINT)


def write(handoff_dir: Path, report: WarmReport) -> None:
    """Write ``engine.json`` and point the ``engine`` symlink at the engine, both atomically."""
    handoff_dir.mkdir(parents=True, exist_ok=True)
    atomic_symlink(Path(report.path), handoff_dir / LINK)
    doc = {**vars(report), "ready": True}  # a shallow view: json.dumps only reads it (asdict deep-copies each value)
    # not fsynced: the hand-off dir is the Pod's emptyDir, which a node crash (the only thing that loses the page
    # cache) takes away with the Pod; a container restart sees the data, and the atomic rename still hides halves
    atomic_write_json(handoff_dir / REPORT, doc, durable=False)


#: Triton backend platform and model file name per trtwarm builder (``command`` builds are assumed to be plans)
TRITON_PLATFORMS = {"tensorrt": ("tensorrt_plan", "model.plan"), "command": ("tensorrt_plan", "model.plan"),
                    "onnxruntime": ("onnxruntime_onnx", "model.onnx")}


def triton_repo(repo: Path, model: str, engine: Path, builder: str) -> Path:
    """Lay out a Triton model repository for *engine*: ``<repo>/<model>/1/<file>`` (a link) and ``config.pbtxt``.

    :raises UnsafeVolume: ``<repo>/<model>`` or its ``1`` is a symlink or a file (nothing followed, exit 9)

    The config names the platform and file only; Triton completes inputs, outputs and batching from the model
    (its default auto-complete). Both files are replaced atomically. :return: the model directory
    """
    platform, filename = TRITON_PLATFORMS.get(builder, TRITON_PLATFORMS["tensorrt"])
    version = repo / model / "1"
    repo.mkdir(parents=True, exist_ok=True)
    safe.makedirs(repo, version, 0o755)  # never through a link: Triton's container shares this directory
    safe.symlink(repo, engine, version / filename)  # and again for each write: a link swapped in meanwhile too
    config = f'name: "{model}"\nplatform: "{platform}"\ndefault_model_filename: "{filename}"\n'
    safe.write(repo, repo / model / "config.pbtxt", config.encode(), 0o644)
    return repo / model


def write_failure(handoff_dir: Path, doc: dict[str, Any]) -> None:
    """Record a failed init in ``engine.json`` (``ready: false``), so the sidecar reports the error; best effort."""
    clear(handoff_dir)  # an init that failed before it started (a bad flag) has not set the previous report aside
    try:
        handoff_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(handoff_dir / REPORT, {**doc, "ready": False, "trtwarm_version": __version__})
    except OSError as exc:
        log.debug("cannot record the failure in %s: %s", handoff_dir, exc)


def read(handoff_dir: Path) -> dict[str, Any] | None:
    """Read ``engine.json``; None when missing, partial or garbage (the sidecar then reports not ready)."""
    return read_json_object(handoff_dir / REPORT, 1 << 20)


def clear(handoff_dir: Path) -> None:
    """Set a previous run's hand-off aside, so nothing stale is served after a failed re-run, and nothing is lost.

    ``engine.json`` is renamed to ``engine.prev.json`` (a rename needs no free space, so even a full hand-off
    volume keeps the last report for inspection) and the ``engine`` link is removed.
    """
    try:
        safe.rename(handoff_dir, handoff_dir / REPORT, handoff_dir / PREVIOUS)  # a link there is moved, not followed
    except FileNotFoundError:
        pass
    except OSError as exc:  # a read-only hand-off dir is reported when writing
        log.debug("cannot set %s aside: %s", handoff_dir / REPORT, exc)
    try:
        safe.unlink(handoff_dir, handoff_dir / LINK)
    except OSError as exc:
        log.debug("cannot remove %s: %s", handoff_dir / LINK, exc)


def _fit(doc: dict[str, Any]) -> str:
    """JSON of *doc* within :data:`TERMINATION_LIMIT` bytes, shortening ``log_tail`` and then ``error``."""
    doc = dict(doc)
    text = json.dumps(doc, separators=(",", ":"))
    for field_name in ("log_tail", "error"):
        while len(text) > TERMINATION_LIMIT and doc.get(field_name):
            value = str(doc[field_name])
            # the tail keeps its end, the error its start; each halving strictly shortens, so this ends
            doc[field_name] = value[(len(value) + 1) // 2 :] if field_name == "log_tail" else value[: len(value) // 2]
            text = json.dumps(doc, separators=(",", ":"))
    return text


def termination_message(path: Path, doc: dict[str, Any]) -> None:
    """Write *doc* (at most 4 KiB of JSON) to the Kubernetes termination log, when it exists and is writable."""
    if not path.exists() or not os.access(path, os.W_OK):
        return
    text = _fit(doc)
    try:
        path.write_text(text)
    except OSError as exc:
        log.debug("cannot write termination message: %s", exc)


__all__ = ["LINK", "PREVIOUS", "REPORT", "WarmReport", "clear", "read", "require_writable", "termination_message",
           "triton_repo", "write", "write_failure"]
