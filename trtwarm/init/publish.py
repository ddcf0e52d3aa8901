"""Building a plan's engine and publishing it: the build and its load check in a Pod-private directory, the copy into
staging hashed from the private bytes, the manifest of every file, the signature, the one atomic rename (and, with
``--remote-push required``, the push of the private bytes before that rename).

Builds happen where nobody else can write: a writer of the volume who changes a file in ``.staging`` after the copy
breaks the signature (the digests are the private bytes'), it cannot make the builder sign its bytes. The entry
handed over after the publish is the one built (:class:`~trtwarm.volume.entry.Entry` with the private files'
descriptors and the manifest and signature in memory), never the volume's directory read again.

Call :func:`build_and_publish` with the key's build lock held; :mod:`trtwarm.init.warm` decides when.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trtwarm import __version__
from trtwarm.errors import BuildError, ConfigError, EntryInvalid, UnsafeVolume
from trtwarm.fs import safe
from trtwarm.fs.ops import pid_alive, pid_field, volume_full
from trtwarm.init.plan import Plan
from trtwarm.volume.entry import UNSIGNED, Entry
from trtwarm.volume.files import SCHEMA, stage_built
from trtwarm.volume.lock import PROGRESS_SECONDS
from trtwarm.volume.stamps import on_volume
from trtwarm.volume.store import host_tag
from trtwarm.volume.verified import Dir

log = logging.getLogger("trtwarm.init.warm")
_PRIVATE = "trtwarm-build-"


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


def _build_into(plan: Plan, private: Dir) -> str:
    """Build into the *private* directory and check that it loads there: the engine's path in it."""
    start = time.monotonic()
    with ticker("building %s", plan.label, every=plan.settings.progress_interval, detail=plan.builder.progress):
        try:
            engine = plan.builder.build(plan.settings.model, plan.facts, private.proc)  # the directory, not a name
        except BuildError as exc:  # builders word a full disk their own way (ORT: "Protobuf serialization failed")
            if not volume_full(private.proc):
                raise
            raise BuildError(f"the build failed on a full build directory {private.path.parent}: {exc.message}",
                             hint="give the build directory room for the engine (--build-dir, TRTWARM_BUILD_DIR; "
                             "in a Pod an emptyDir whose sizeLimit exceeds the engine)") from exc
    plan.seconds["build"] = time.monotonic() - start
    log.info("built %s in %.1f s%s", plan.label, plan.seconds["build"],
             "; checking that it loads" if plan.builder.checks_load else "")
    try:
        plan.builder.load(engine, plan.facts)  # in the private directory: nobody else can change it meanwhile
    except EntryInvalid as exc:
        raise BuildError(f"the freshly built engine {exc.reason}", hint="the builder produced an engine this node "
                         "cannot load; check the builder and runtime versions") from exc
    return engine.relative_to(private.proc).as_posix()


def _stage(plan: Plan, private: Dir, staging: Dir, engine_file: str) -> tuple[dict[str, Any], Entry]:
    """Copy the build into *staging*, hashing the private bytes as they are copied; the manifest and its signature
    over those digests. :return: the manifest and the entry as built (its verified bytes: the private files)"""
    layout = plan.layout
    try:
        files, built = stage_built(private, staging, engine_file, layout.file_mode(), layout.dir_mode())
    except EntryInvalid as exc:
        raise BuildError(exc.reason, hint="a builder must write regular files into its output directory") from exc
    manifest = _manifest(plan, files, plan.seconds["build"])
    extra = plan.builder.report()  # what the builder learned (e.g. TensorRT's engine_info), as in engine.json
    if extra:
        manifest["extra"] = extra
    built.envelope = plan.gate.sign(manifest, files)
    built.envelope_problem = None if built.envelope is not None else UNSIGNED
    return manifest, Entry(layout.entry_dir(plan.name), manifest, built)


def check_build_dir(settings: Any, where: Path | None = None) -> None:
    """Builds happen where nobody else can write: refuse a ``--build-dir`` (or, without one, a temporary directory;
    *where*: the private directory made there, as its descriptor reaches it) on the cache volume, where a writer of
    the volume could change the bytes before they are hashed and signed, or in the hand-off directory, which the
    server's container shares. :raises ConfigError:"""
    where = where or settings.build_dir or Path(tempfile.gettempdir())
    for other, what in ((settings.cache_dir, "the cache volume"), (settings.handoff_dir, "the hand-off directory")):
        if on_volume(where, other):
            raise ConfigError(f"the build directory {where} is on {what} {other}: others can write there, and a "
                              "build must be made, loaded and hashed where only this Pod can", hint="point "
                              "--build-dir (TRTWARM_BUILD_DIR) at a directory of this Pod's own, e.g. an emptyDir "
                              "with room for the engine (default: TMPDIR)")


@contextlib.contextmanager
def private_build_dir(plan: Plan) -> Iterator[Dir]:
    """A new directory only this process may enter, under ``--build-dir`` (default: the temporary directory),
    removed afterwards; those a killed init of this host left there are removed first (an init restarted in the same
    Pod finds its emptyDir as the killed one left it). :raises ConfigError: it cannot be made there"""
    parent = plan.settings.build_dir
    _sweep_private(Path(parent or tempfile.gettempdir()))
    with contextlib.ExitStack() as stack:
        try:
            private = stack.enter_context(Dir.private(parent, f"{_PRIVATE}{plan.key[:16]}.{host_tag()}.{os.getpid()}."))
        except OSError as exc:
            where = parent or tempfile.gettempdir()
            raise ConfigError(f"cannot make a private build directory under {where}: {exc.strerror}",
                              hint="--build-dir (TRTWARM_BUILD_DIR) must name a writable directory off the cache "
                              "volume that only this Pod writes (in a Pod: an emptyDir with room for the engine)") \
                from exc
        # again where it was made: a link swapped in on the way after the start's check leads elsewhere
        check_build_dir(plan.settings, Path(os.path.realpath(private.proc)))
        yield private


def _sweep_private(parent: Path) -> None:
    """Remove the private build directories under *parent* of this host's inits that are gone (``<prefix><key16>.
    <host>.<pid>.<rand>``, the pid dead): a killed build leaves its partial engine there. Only directories of this
    uid: in a *parent* others write (a host's ``/tmp``), what they put there under such a name (a link, a file,
    their directory) is theirs, skipped, never a reason to fail the build."""
    try:
        names = [p.name for p in parent.iterdir() if p.name.startswith(_PRIVATE)]
    except OSError:
        return
    for name in names:
        parts = name[len(_PRIVATE):].split(".")
        pid = pid_field(parts[2]) if len(parts) == 4 and parts[1] == host_tag() else None
        if pid is None or pid_alive(pid):
            continue
        try:
            st = os.lstat(parent / name)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            log.info("removing the private build directory %s left by an init that is gone", name)
            safe.rmtree(parent, parent / name, ignore_errors=True)
        except (OSError, UnsafeVolume) as exc:  # swapped meanwhile: not ours to remove
            log.debug("not removing %s: %s", name, exc)


def build_and_publish(plan: Plan) -> Entry | None:
    """Build in a private directory, copy it into a staging directory and publish that with one rename (call with
    the key's lock held).

    :return: the entry as built (its verified bytes: the private files, its manifest and signature in memory; the
        caller hands it over and closes it), or None: another entry took the name first and ours was discarded
    :raises BuildError: the builder failed; :raises OSError: the volume is full or read-only (see :func:`warm`)
    """
    store = plan.store
    _sweep(store, plan.key)
    with private_build_dir(plan) as private, store.staging(plan.key) as staging:
        engine_file = _build_into(plan, private)
        manifest, built = _stage(plan, private, staging, engine_file)
        try:
            adopted = _remote_push_staged(plan, staging, built)  # --remote-push required
            won = adopted is None and store.publish(staging, plan.name, manifest, built.opened.envelope)
        except BaseException:
            built.close()
            raise
    # again: a builder killed just before this one took over may still have been exiting at the first sweep (the
    # kernel drops its lock before the process is gone), and its directory would stay until it is a day old
    _sweep(store, plan.key)
    if not won:
        built.close()
        if adopted is None:
            plan.seconds.pop("build", None)
        return None
    return built


def _sweep(store: Any, key: str) -> None:
    for path in store.clean_staging(key):
        log.info("removed stale staging directory %s left by a dead builder", path.name)


def _remote_push_staged(plan: Plan, staging: Dir, built: Entry) -> Entry | None:
    """``--remote-push required``: push the build (from its verified bytes) before the local publish; a loser
    publishes the winner's."""
    if plan.remote is None or plan.settings.remote_push != "required":
        return None
    check = plan.load_check(trust=False, pulled=True)
    adopted: Entry | None = plan.remote.push_staged(staging, built, plan.name, check)
    return adopted


__all__ = ["build_and_publish", "private_build_dir", "ticker"]
