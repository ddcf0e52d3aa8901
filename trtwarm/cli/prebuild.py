"""CI prebuilds from a matrix file (:mod:`trtwarm.cli.matrix`): ``trtwarm prebuild --matrix FILE`` builds on this
GPU what the repository lacks and pushes it, and with ``--oci-image`` also pushes the entries as one engine image.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.cli.flags import remote_environ
from trtwarm.cli.matrix import matrix_platforms, matrix_rows, settings_for
from trtwarm.config import Settings
from trtwarm.errors import ConfigError, Interrupted, TrtwarmError, exit_code_for, hint_for
from trtwarm.remote.backend import open_repository, parse_remote
from trtwarm.remote.sync import RemoteSync

log = logging.getLogger("trtwarm.cli.prebuild")


def _one(label: str, settings: Settings, sync: RemoteSync | None, keep: list[tuple[str, str]] | None = None) -> str:
    """Build and push one row unless the remote has it. :return: what happened

    :param sync: None without ``--remote`` (``--oci-image`` alone): build into the local cache only
    :param keep: for ``--oci-image``: the row's ``(key, entry name)`` is added, and an entry the remote has is
        pulled into the local cache (the image is made from it)
    """
    from trtwarm.init.plan import resolve
    from trtwarm.init.warm import warm

    plan = resolve(settings)
    if keep is not None:
        keep.append((plan.key, plan.name))

    def local() -> Any:  # judged by the trust policy first: an entry no trusted key signed is set aside, never pushed
        return plan.store.lookup(plan.key, plan.name, trust=plan.trust_check)

    if sync is None:
        return "present in the cache" if local() else warm(settings).result
    if sync.repo.get_ref(plan.key) is not None:
        if keep is not None and local() is None:
            sync.strict = True  # a refused or failing pull fails the row: the image must hold every row
            sync.pull(plan.key, plan.name)
            return "present, pulled for the image"
        return "present"
    found = local()
    if found is not None:
        sync.push(found)
        return f"pushed from the local cache ({sync.stats['push']}){_digest(sync.stats)}"
    report = warm(settings)
    return f"{report.result}, {report.remote.get('push', 'not pushed')}{_digest(report.remote)}"


def _digest(stats: Mapping[str, Any]) -> str:
    """`` manifest sha256:...`` after a push to an OCI registry (what a push wrote or adopted), else nothing."""
    return f" manifest {stats['manifest_digest']}" if stats.get("manifest_digest") else ""


def run(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm prebuild``: one progress line per row, a summary table; exit status of the first failure."""
    if not ns.remote and not ns.oci_image:
        raise ConfigError("prebuild needs --remote s3://BUCKET/PREFIX or oci://REGISTRY/REPOSITORY (or "
                          "TRTWARM_REMOTE), or --oci-image REGISTRY/REPOSITORY:TAG")
    environ = remote_environ(ns, environ)  # the wait flags, for the check below and for every row
    remote = parse_remote(ns.remote, environ, insecure=ns.insecure_registry) if ns.remote else None
    rows = matrix_rows(Path(ns.matrix))
    _check_platform(matrix_platforms(Path(ns.matrix)))
    _image_target(ns, environ)  # a malformed --oci-image fails before any build
    # the repository once, first: wrong credentials, a missing bucket or a dead endpoint fail the run with their
    # own exit code and hint, instead of each row retrying and failing alike
    if remote is not None:
        next(iter(open_repository(remote).keys()), None)
    work = Path(tempfile.mkdtemp(prefix="trtwarm-prebuild-"))  # hand-offs, and the cache unless --cache-dir
    try:
        return _run_rows(rows, ns, environ, remote, Path(ns.cache_dir) if ns.cache_dir else work / "cache", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # engines included: GBs a run on a CI runner otherwise


def _check_platform(platforms: list[str]) -> None:
    """:raises ConfigError: this runner's platform is not one the matrix declares (its engines would serve no node)."""
    from trtwarm.node.hostplatform import host_platform

    here = host_platform()
    if here not in platforms:
        raise ConfigError(f"this runner is {here}, and the matrix declares the platforms {', '.join(platforms)}",
                          hint="run prebuild on a runner of each declared platform (an engine runs only on the OS and "
                          "CPU architecture it was built on), or add this one to \"platforms\"")
    others = [p for p in platforms if p != here]
    if others:
        log.info("building the %s engines; %s need a runner of their own", here, ", ".join(others))


def _run_rows(rows: list[tuple[str, list[str]]], ns: argparse.Namespace, environ: Mapping[str, str], remote: Any,
              cache: Path, work: Path) -> int:
    from trtwarm.lifecycle.tables import render

    results, codes = [], []
    keep: list[tuple[str, str]] | None = [] if ns.oci_image else None
    for index, (label, flags) in enumerate(rows, 1):
        start = time.monotonic()
        try:
            settings = settings_for(flags, environ, cache_dir=str(cache), remote=ns.remote,
                                    remote_push="required", handoff_dir=str(work / "handoff" / str(index)))
            sync = RemoteSync(remote, _store(settings), push="required") if remote is not None else None
            outcome = _one(label, settings, sync, keep)
        except Interrupted:  # SIGTERM/SIGINT stops the whole matrix, not this row
            raise
        except TrtwarmError as exc:
            codes.append(exit_code_for(exc))
            outcome = f"FAILED ({codes[-1]}): {exc.message}"
            log.error("[%d/%d] %s: %s", index, len(rows), label, outcome)
            if hint_for(exc):
                log.error("hint: %s", hint_for(exc))
        else:
            log.info("[%d/%d] %s: %s (%.1f s)", index, len(rows), label, outcome, time.monotonic() - start)
        results.append([label, outcome, f"{time.monotonic() - start:.1f}"])
    print(render(["ROW", "RESULT", "SECONDS"], results, right=("SECONDS",)))
    print(f"\n{len(rows)} rows: {len(rows) - len(codes)} ok, {len(codes)} failed")
    if codes:
        if ns.oci_image:
            log.error("the engine image %s was not pushed: a row failed", ns.oci_image)
        return codes[0]
    if keep is not None:  # the reference a Pod spec's image volume takes: no oci:// scheme, pinned by digest
        from trtwarm.remote.oci.url import split_reference

        registry, repository, _tag = split_reference(ns.oci_image, tag=True)
        print(f"engine image {registry}/{repository}@{_push_image(ns, environ, cache, keep)}")
    return 0


def _image_target(ns: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    """``--oci-image REGISTRY/REPOSITORY:TAG`` checked before any build. :raises ConfigError:"""
    if not ns.oci_image:
        return None
    from trtwarm.remote.oci.url import split_reference

    try:
        _registry, _repository, tag = split_reference(ns.oci_image, tag=True)
    except ValueError as exc:
        raise ConfigError(f"--oci-image {ns.oci_image!r}: {exc}", hint="e.g. --oci-image "
                          "registry.example.com/engines/resnet50:server-24.12 (a tag per server release)") from None
    if tag is None:
        raise ConfigError(f"--oci-image {ns.oci_image!r} has no tag", hint="add :TAG, e.g. the server image's release")
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.url import parse as parse_oci

    # the registry once, before any build: wrong credentials or a dead registry fail with their own exit code
    OciClient(parse_oci(f"oci://{_registry}/{_repository}", environ, insecure=ns.insecure_registry)).check_bucket()
    return tag


def _push_image(ns: argparse.Namespace, environ: Mapping[str, str], cache: Path, keep: list[tuple[str, str]]) -> str:
    """Make and push the engine image of the matrix's entries (each in the local cache by now). :return: digest"""
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.image import push_image
    from trtwarm.remote.oci.url import parse as parse_oci
    from trtwarm.remote.oci.url import split_reference

    registry, repository, tag = split_reference(ns.oci_image, tag=True)
    store = _store_at(cache)
    found = []
    try:
        for key, name in dict.fromkeys(keep):
            entry = store.lookup(key, name)  # verified: the image is packed from what was checked
            if entry is None:
                raise ConfigError(f"the entry {name} is not in the local cache {cache}", hint="run prebuild again")
            found.append(entry)
        client = OciClient(parse_oci(f"oci://{registry}/{repository}", environ, insecure=ns.insecure_registry))
        return push_image(client, str(tag), cache, found)
    finally:
        for entry in found:
            entry.close()


def _store(settings: Settings) -> Any:
    return _store_at(settings.cache_dir)


def _store_at(cache: Path) -> Any:
    from trtwarm.volume.layout import Layout
    from trtwarm.volume.store import EngineStore

    layout = Layout(cache)
    layout.ensure()
    return EngineStore(layout)


__all__ = ["run"]
