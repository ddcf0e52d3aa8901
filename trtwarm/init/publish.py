"""Building a plan's engine and publishing it: staging, the load check, the manifest of every file, the signature,
the one atomic rename (and, with ``--remote-push required``, the push from staging before that rename).

Call :func:`build_and_publish` with the key's build lock held; :mod:`trtwarm.init.warm` decides when.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from trtwarm import __version__
from trtwarm.errors import BuildError, EntryInvalid
from trtwarm.fs.ops import volume_full
from trtwarm.init.plan import Plan
from trtwarm.volume.files import SCHEMA, list_built
from trtwarm.volume.lock import PROGRESS_SECONDS
from trtwarm.volume.entry import Entry

log = logging.getLogger("trtwarm.init.warm")


@contextlib.contextmanager
def ticker(message: str, *args: object, every: float = PROGRESS_SECONDS,
           detail: Callable[[], str] | None = None) -> Iterator[None]:
    """Log ``message (N s elapsed[, detail])`` every *every* seconds while the block runs."""
    stop, start = threading.Event(), time.monotonic()

    def run() -> None:
        while not stop.wait(every):
            now = detail() if detail else ""
            log.info(message + " (%.0f s elapsed%s)", *args, time.monotonic() - start, f"; {now}" if now else "")

    thread = threading.Thread(target=run, name="trtwarm-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1)


def _manifest(plan: Plan, files: list[dict[str, Any]], build_seconds: float) -> dict[str, Any]:
    """Manifest schema 2: every file of the entry; the engine's fields repeated for schema-1 readers."""
    ident, engine = plan.settings.identity, next(f for f in files if f["role"] == "engine")
    return {"schema": SCHEMA, "key": plan.key, "key_document": plan.doc, "name": plan.name, "files": files,
            "engine_file": engine["path"], "engine_sha256": engine["sha256"], "engine_bytes": engine["bytes"],
            "created": time.time(),
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(build_seconds, 3), "trtwarm_version": __version__,
            "built_by": {"pod": ident.pod, "namespace": ident.namespace, "node": ident.node,
                         "hostname": ident.hostname, "pid": os.getpid(), "ci_job": ident.ci_job}}


def _build_into(plan: Plan, staging: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Build, load-check, list and hash every file: return the manifest and its signature (None: no key)."""
    start = time.monotonic()
    with ticker("building %s", plan.label, every=plan.settings.progress_interval, detail=plan.builder.progress):
        try:
            engine = plan.builder.build(plan.settings.model, plan.facts, staging)
        except BuildError as exc:  # builders word a full disk their own way (ORT: "Protobuf serialization failed")
            if not volume_full(staging):
                raise
            log.error("the build failed on a full cache volume: %s", exc.message)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(staging)) from exc
    plan.seconds["build"] = time.monotonic() - start
    log.info("built %s in %.1f s%s", plan.label, plan.seconds["build"],
             "; checking that it loads" if plan.builder.checks_load else "")
    try:
        plan.builder.load(engine, plan.facts)
    except EntryInvalid as exc:
        raise BuildError(f"the freshly built engine {exc.reason}", hint="the builder produced an engine this node "
                         "cannot load; check the builder and runtime versions") from exc
    try:
        files = list_built(staging, engine.relative_to(staging).as_posix())
    except EntryInvalid as exc:
        raise BuildError(exc.reason, hint="a builder must write regular files into its output directory") from exc
    manifest = _manifest(plan, files, plan.seconds["build"])
    extra = plan.builder.report()  # what the builder learned (e.g. TensorRT's engine_info), as in engine.json
    if extra:
        manifest["extra"] = extra
    return manifest, plan.gate.sign(manifest, files)


def build_and_publish(plan: Plan) -> bool:
    """Build into a private staging directory and publish it with one rename (call with the key's lock held).

    :return: whether ours is the entry now (False: another builder published first and ours was discarded)
    :raises BuildError: the builder failed; :raises OSError: the volume is full or read-only (see :func:`warm`)
    """
    store = plan.store
    _sweep(store, plan.key)
    with store.staging(plan.key) as staging:
        manifest, signature = _build_into(plan, staging)
        adopted = _remote_push_staged(plan, staging, manifest, signature)  # --remote-push required
        won = adopted is None and store.publish(staging, plan.name, manifest, signature)
    # again: a builder killed just before this one took over may still have been exiting at the first sweep (the
    # kernel drops its lock before the process is gone), and its directory would stay until it is a day old
    _sweep(store, plan.key)
    if not won and adopted is None:
        plan.seconds.pop("build", None)
    return won


def _sweep(store: Any, key: str) -> None:
    for path in store.clean_staging(key):
        log.info("removed stale staging directory %s left by a dead builder", path.name)


def _remote_push_staged(plan: Plan, staging: Any, manifest: dict[str, Any],
                        signature: dict[str, Any] | None) -> Entry | None:
    """``--remote-push required``: push from staging before the local publish; a loser publishes the winner's."""
    if plan.remote is None or plan.settings.remote_push != "required":
        return None
    adopted: Entry | None = plan.remote.push_staged(staging, manifest, signature, plan.name,
                                                    plan.load_check(trust=False))
    return adopted


__all__ = ["build_and_publish", "ticker"]
