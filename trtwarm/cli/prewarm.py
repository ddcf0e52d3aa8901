"""``trtwarm prewarm --matrix FILE --remote URL``: fill this node's cache from the repository before Pods land.

Each row of a prebuild matrix (``trtwarm prebuild``'s format) is resolved for this node's GPU (the one given by
``--gpu-product``, ``--gpu-compute-capability`` and ``--gpu-memory-gib``, which needs no GPU access and no device
request; else the one NVML shows this container) and its TensorRT or declared ``--tensorrt-version``, and its entry is
pulled into ``--cache-dir`` unless the volume holds it already. ``--remote`` is any backend ``init`` takes
(``s3://`` or ``oci://``), with the same credentials.
Nothing is ever built: a row the repository lacks is reported (``absent``) and left to the first Pod that needs it,
which builds it as usual. Each pull takes the key's lock, so an init of the same key on this node waits for it
instead of pulling it again. The chart renders one pre-warm DaemonSet per GPU class (``prewarm.gpus``), pinned to its
nodes by GPU Feature Discovery's labels, which runs this as an init container with that class's facts, then the
sidecar, which exports what the volume holds.

Exit status: 0 when every row is present, pulled or absent from the repository; else the first failure's code
(13 an unreachable store, 10 a failing one, 11 credentials, 12 no bucket, 2 a bad matrix), so the kubelet retries
the init container with its back-off.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.cli.flags import add_insecure_flag, add_remote_wait_flags, remote_environ
from trtwarm.config import DEFAULT_CACHE_DIR
from trtwarm.errors import ConfigError, Interrupted, RemoteError, TrtwarmError, exit_code_for, hint_for

log = logging.getLogger("trtwarm.cli.prewarm")

#: outcomes that leave the node as it should be (nothing to retry)
SETTLED = ("present", "pulled", "absent", "refused")


def add_parser(sub: Any) -> None:
    """Add ``prewarm`` to the top-level subparsers *sub*."""
    p = sub.add_parser("prewarm", help="pull this node's engines of a prebuild matrix into the cache (no build)")
    p.add_argument("--matrix", required=True, help="the prebuild matrix (JSON; `trtwarm prebuild`'s format)")
    p.add_argument("--remote", help="the repository: s3://BUCKET/PREFIX or oci://REGISTRY/REPOSITORY")
    add_insecure_flag(p)
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE_DIR), help="the node's cache (%(default)s)")
    p.add_argument("--gpu-product", metavar="NAME", help="key for this GPU instead of asking NVML (no GPU access "
                   "needed): its name as NVML gives it, e.g. 'NVIDIA H100 80GB HBM3', a MIG slice 'NVIDIA H100 80GB "
                   "HBM3 MIG 1g.10gb'; with --gpu-compute-capability and --gpu-memory-gib")
    p.add_argument("--gpu-compute-capability", metavar="X.Y", help="the declared GPU's compute capability, e.g. 9.0")
    p.add_argument("--gpu-memory-gib", metavar="GIB", help="the declared GPU's memory in whole GiB as the key holds "
                   "it (a MIG slice: the slice's), or none")
    p.add_argument("--dry-run", action="store_true", help="say what would be pulled, change nothing")
    p.add_argument("--json", action="store_true", help="one JSON object per row on stdout")
    p.add_argument("--log-format", default="text", choices=["text", "json"])
    add_remote_wait_flags(p)
    p.set_defaults(func=cmd_prewarm)


def cmd_prewarm(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm prewarm``: one log line per row, a table (or JSON lines), the exit status described above."""
    from trtwarm.cli.matrix import matrix_rows, settings_for
    from trtwarm.remote.backend import parse_remote

    if not ns.remote:
        raise ConfigError("prewarm needs --remote (or TRTWARM_REMOTE)",
                          hint="the repository the prebuild Job pushes to: s3://BUCKET/PREFIX or oci://HOST/REPO")
    environ = remote_environ(ns, environ)  # the wait flags, for every row
    remote = parse_remote(ns.remote, environ, insecure=ns.insecure_registry)  # a bad URL or setting: before any row
    gpu = _declared_gpu(ns)
    rows = matrix_rows(Path(ns.matrix))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="trtwarm-prewarm-") as work:
        for index, (label, flags) in enumerate(rows, 1):
            start = time.monotonic()
            settings = settings_for(flags, environ, cache_dir=ns.cache_dir, remote=ns.remote, remote_push="off",
                                    handoff_dir=str(Path(work) / "handoff"))
            row = _row(label, settings, remote, gpu, ns.dry_run)
            row["seconds"] = round(time.monotonic() - start, 3)
            log.info("[%d/%d] %s: %s%s", index, len(rows), label, row["result"],
                     f" ({row['detail']})" if row.get("detail") else "")
            results.append(row)
    _print(results, ns.json)
    _say_if_nothing_matched(results, gpu)
    failed = [r for r in results if r["result"] == "failed"]
    return int(failed[0]["exit"]) if failed else 0


def _declared_gpu(ns: argparse.Namespace) -> Any:
    """The GPU of ``--gpu-*`` (:func:`trtwarm.node.gpu.declared`), or None: NVML's. :raises ConfigError: some of
    the three facts given without the others, or malformed"""
    from trtwarm.node.gpu import declared

    facts = (ns.gpu_product, ns.gpu_compute_capability, ns.gpu_memory_gib)
    if not any(facts):
        return None
    if not all(facts):
        raise ConfigError("--gpu-product, --gpu-compute-capability and --gpu-memory-gib go together",
                          hint="give all three (the key's device section names each), or none to ask NVML")
    return declared(*facts)


def _say_if_nothing_matched(results: list[dict[str, Any]], gpu: Any) -> None:
    """A declared GPU whose every row is absent from the repository: most likely facts that are not the GPU's."""
    if gpu is not None and results and all(r["result"] == "absent" for r in results):
        log.warning("the repository has no engine of this matrix for %r (compute capability %d.%d, %s GiB): if "
                    "engines were prebuilt for it, the declared facts differ from theirs; compare them with the "
                    "key document's device section in `trtwarm remote ls --json` (chart: prewarm.gpus)", gpu.name,
                    *gpu.compute_capability, gpu.memory_gib if gpu.memory_gib is not None else "unknown")


def _row(label: str, settings: Any, remote: Any, gpu: Any, dry_run: bool) -> dict[str, Any]:
    """Resolve one row on this node and pull it unless present; a failure is reported in the row, not raised."""
    row: dict[str, Any] = {"row": label}
    try:
        row.update(_pull(settings, remote, gpu, dry_run))
    except Interrupted:  # SIGTERM/SIGINT stops the whole pre-warm, not this row
        raise
    except TrtwarmError as exc:
        row.update(result="failed", exit=exit_code_for(exc), detail=exc.message)
        if hint_for(exc):
            log.error("hint: %s", hint_for(exc))
        if gpu is None and isinstance(exc, ConfigError) and "GPU" in exc.message:
            log.error("hint: the pre-warm needs no GPU of its own: name the node's GPU with --gpu-product, "
                      "--gpu-compute-capability and --gpu-memory-gib (chart: prewarm.gpus)")
    return row


def _pull(settings: Any, remote: Any, gpu: Any, dry_run: bool) -> dict[str, Any]:
    from trtwarm.init.plan import resolve
    from trtwarm.remote.sync import RemoteSync, bounded
    from trtwarm.volume.lock import BuildLock

    plan = resolve(settings, gpu=gpu)
    out = {"key": plan.key, "name": plan.name}
    store = plan.store
    if store.lookup(plan.key, plan.name, plan.load_check(trust=False),
                    trust=plan.trust_check) is not None:
        return {**out, "result": "present"}
    # strict: a failing store is this row's failure (nothing builds in its place here); the trust policy judges
    # the ref before a byte of it is fetched
    sync = RemoteSync(bounded(remote, settings), store, push="off", strict=True, verify_ref=plan.gate.check_ref)
    if dry_run:
        ref = sync.repo.get_ref(plan.key)
        return {**out, "result": "would pull" if ref is not None else "absent"}
    plan.layout.ensure()
    s = settings
    lock = BuildLock(plan.layout, plan.key, s.identity, mode=s.lock_mode, timeout=s.lock_timeout,
                     progress=s.progress_interval, label=plan.name)
    if not lock.take_or_wait(lambda: store.find(plan.key, plan.name) is not None):
        return {**out, "result": "present", "detail": "another process published it meanwhile"}
    try:
        if store.find(plan.key, plan.name) is not None:
            return {**out, "result": "present", "detail": "another process published it meanwhile"}
        entry = sync.pull(plan.key, plan.name, plan.load_check(trust=False, pulled=True))
    except RemoteError:
        if sync.refused is None:
            raise
        entry = None  # refused (untrusted, or a corrupt blob): the Pod that needs it builds it, as without us
    finally:
        lock.release()
    if entry is not None:
        return {**out, "result": "pulled", "bytes": sync.stats["pulled_bytes"]}
    if sync.refused is not None:
        return {**out, "result": "refused", "detail": f"{sync.refused[0]}: {sync.refused[1]}"}
    return {**out, "result": "absent", "detail": f"{sync.repo.url} has no engine for this node"}


def _print(results: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in results:
            print(json.dumps(row, sort_keys=True))
        return
    from trtwarm.lifecycle.tables import render

    print(render(["ROW", "RESULT", "NAME", "SECONDS"],
                 [[r["row"], r["result"], r.get("name", "-"), f"{r['seconds']:.1f}"] for r in results],
                 right=("SECONDS",)))
    counts = {k: sum(r["result"] == k for r in results) for k in (*SETTLED, "failed", "would pull")}
    print(f"\n{len(results)} rows: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n))


__all__ = ["add_parser", "cmd_prewarm"]
