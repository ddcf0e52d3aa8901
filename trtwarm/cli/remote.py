"""``trtwarm remote ls|show|rm|gc|coverage`` and ``trtwarm prebuild``: argument parsing and output.

Every command takes ``--remote s3://BUCKET/PREFIX`` (``TRTWARM_REMOTE``) and ``--json``; ``rm`` and ``gc`` print
their plan and change nothing without ``--yes`` (``--dry-run`` never changes anything). Listing reads refs only.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.cli.flags import add_insecure_flag, add_remote_wait_flags, remote_environ
from trtwarm.errors import ConfigError, EntriesDamaged, ModelError, TrtwarmError, exit_code_for
from trtwarm.remote.backend import open_repository, parse_remote
from trtwarm.remote.repo import Repository, manifest_files, ref_path

log = logging.getLogger("trtwarm.remote")


def add_parsers(sub: Any) -> None:
    """Add ``remote`` (with its subcommands) and ``prebuild`` to the top-level subparsers *sub*."""
    remote = sub.add_parser("remote", help="the central engine repository (S3-compatible storage or an OCI registry)")
    rsub = remote.add_subparsers(dest="remote_command", required=True, metavar="SUBCOMMAND")
    for name, func, text in (("ls", cmd_ls, "one row per ref"), ("show", cmd_show, "one ref's manifest"),
                             ("rm", cmd_rm, "remove refs (their blobs go with gc)"),
                             ("gc", cmd_gc, "retention: old refs, unreferenced blobs after a grace period (incomplete "
                              "multipart uploads: a bucket lifecycle rule, docs/remote.md)"),
                             ("coverage", cmd_coverage, "which Pods would hit: matrix × GPU products")):
        p = rsub.add_parser(name, help=text)
        p.add_argument("--remote", help="s3://BUCKET/PREFIX or oci://REGISTRY/REPOSITORY (TRTWARM_REMOTE)")
        add_insecure_flag(p)
        p.add_argument("--json", action="store_true")
        p.add_argument("--log-format", default="text", choices=["text", "json"])
        add_remote_wait_flags(p)
        p.set_defaults(func=func)
        _own_flags(p, name)
    pre = sub.add_parser("prebuild", help="CI: build on this GPU what the remote lacks, and push it")
    pre.add_argument("--matrix", required=True, help="models × precisions × options (JSON; see docs/remote.md)")
    pre.add_argument("--remote", help="s3://BUCKET/PREFIX or oci://REGISTRY/REPOSITORY")
    add_insecure_flag(pre)
    pre.add_argument("--oci-image", metavar="REGISTRY/REPOSITORY:TAG", help="also push the matrix's entries as one "
                     "engine image, for a Kubernetes image volume (see docs/oci.md)")
    pre.add_argument("--cache-dir", help="local cache to build in and reuse (default: a temporary one, removed at "
                     "the end)")
    pre.add_argument("--log-format", default="text", choices=["text", "json"])
    add_remote_wait_flags(pre)
    pre.set_defaults(func=cmd_prebuild)


def _repo(ns: argparse.Namespace, environ: Mapping[str, str]) -> Repository:
    if not ns.remote:
        raise ConfigError("no repository given", hint="pass --remote s3://BUCKET/PREFIX or oci://REGISTRY/REPOSITORY "
                          "(or set TRTWARM_REMOTE)")
    repo = open_repository(parse_remote(ns.remote, remote_environ(ns, environ), insecure=ns.insecure_registry))
    repo.client.check_bucket()  # a missing bucket or wrong credentials fail here, with their own exit code
    return repo


def _out(doc: Any) -> None:
    print(json.dumps(doc, indent=2 if sys.stdout.isatty() else None, sort_keys=True))


def _row(key: str, ref: dict[str, Any]) -> list[str]:
    from trtwarm.node.device import short_name
    from trtwarm.lifecycle.tables import human_bytes, utc

    m = ref["manifest"]
    doc = m.get("key_document") or {}
    builder = doc.get("builder") or {}
    built = m.get("built_by") or {}
    return [str(m.get("name", "?")).rsplit("--", 1)[0], key[:16], f"{builder.get('name')} {builder.get('version')}",
            short_name(doc.get("device") or {}), str((doc.get("build") or {}).get("precision", "-")),
            human_bytes(sum(r["bytes"] for r in manifest_files(m))), utc(m.get("created")),
            str(built.get("ci_job") or built.get("pod") or built.get("hostname") or "-"),
            "yes" if ref.get("signature") else "no"]


def _own_flags(p: argparse.ArgumentParser, name: str) -> None:
    """The flags of one ``remote`` subcommand beyond those they share."""
    if name in ("show", "rm"):
        p.add_argument("keys", nargs="+", metavar="KEY", help="a key, a prefix of 8+ hex digits, or a NAME "
                       "as `remote ls` shows it")
    if name in ("rm", "gc"):
        p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
        p.add_argument("--yes", action="store_true", help="do it")
    if name == "gc":
        p.add_argument("--max-age", help="remove refs created longer ago, e.g. 90d")
        p.add_argument("--keep-per-model", type=int, help="keep the newest N refs of each model and "
                       "configuration (precision, GPU, shapes: an fp16 engine never displaces the int8 one)")
        p.add_argument("--blob-grace", default="1d", help="unreferenced blobs younger than this stay (%(default)s)")
    if name == "coverage":
        p.add_argument("--matrix", required=True, help="the prebuild matrix (JSON)")
        p.add_argument("--gpus", required=True, help="comma-separated GPU products, e.g. 'NVIDIA H100 80GB HBM3', "
                       "each optionally @PLATFORM (sm9.0@linux-aarch64); without, one column per platform of "
                       "the matrix's \"platforms\" (default: this host's)")
        p.add_argument("--tensorrt", help="the servers' TensorRT, e.g. 10.16.1.11+cu12 (tensorrt rows)")


def cmd_ls(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm remote ls``."""
    from trtwarm.lifecycle.tables import render

    repo = _repo(ns, environ)
    refs = repo.read_refs()
    pins = {k: repo.pinned(k) for k, r, _p in refs if r is not None}
    digests = any(pins.values())  # an OCI registry: each ref is a manifest with a digest
    if ns.json:
        _out([{"key": k, "ref": r, "problem": p or None, **_pin_fields(pins.get(k))} for k, r, p in refs])
    else:
        rows = [_row(k, r) + ([_short(pins.get(k))] if digests else []) if r
                else ["(unreadable)", k[:16], "-", "", "", "", "", "", ""] + ([""] if digests else [])
                for k, r, p in refs]
        print(render(["NAME", "KEY", "BUILDER", "DEVICE", "PRECISION", "SIZE", "CREATED", "BUILT BY", "SIGNED"]
                     + (["DIGEST"] if digests else []), sorted(rows), right=("SIZE",)))
        for key, _ref, problem in (r for r in refs if r[1] is None):  # below the table: a long reason must not widen
            print(f"unreadable ref {key[:16]}: {problem}")
        print(f"\n{len(refs)} refs in {ns.remote}")
    bad = [k for k, r, _p in refs if r is None]
    if bad:  # every other ref was listed; the exit code says some are not trtwarm refs (as `ls` for entries)
        raise EntriesDamaged(f"{len(bad)} of {len(refs)} refs are unreadable: {', '.join(k[:16] for k in bad[:3])}"
                             + (", ..." if len(bad) > 3 else ""), hint="`trtwarm remote rm KEY` removes one; a "
                             "prebuild or a builder's push writes it again")
    return 0


def _pin_fields(pinned: str | None) -> dict[str, str]:
    """``digest`` and ``reference`` (``registry/repository@sha256:...``) of a ref in a registry; nothing for S3."""
    return {"digest": pinned.rsplit("@", 1)[1], "reference": pinned} if pinned else {}


def _short(pinned: str | None) -> str:
    """``sha256:`` and 12 hex digits: ``remote show`` and ``--json`` give the whole digest."""
    return pinned.rsplit("@", 1)[1][:19] if pinned else "-"


def _select(repo: Repository, selectors: list[str]) -> list[str]:
    """The keys *selectors* name: a key, a prefix of 8+ hex digits, or an entry name as ``remote ls`` shows it."""
    keys = [k for k, _meta in repo.keys()]
    names: dict[str, list[str]] | None = None
    chosen = []
    for sel in selectors:
        if len(sel) >= 8 and all(c in "0123456789abcdef" for c in sel.lower()):
            found = [k for k in keys if k.startswith(sel.lower())]
        else:  # a name: read the refs once (their manifests hold the names)
            names = names if names is not None else _names(repo)
            found = names.get(sel.rsplit("--", 1)[0] if "--" in sel else sel, [])
        if len(found) != 1:
            raise ConfigError(f"{sel!r} matches {len(found)} refs", hint="give more of the key (`trtwarm remote ls`)"
                              if found else "`trtwarm remote ls` lists the keys in this repository")
        if found[0] not in chosen:  # a key given twice (a prefix and the whole key) is one ref
            chosen.append(found[0])
    return chosen


def _names(repo: Repository) -> dict[str, list[str]]:
    """Keys by entry name without its ``--<key16>`` (what ``remote ls`` shows as NAME)."""
    out: dict[str, list[str]] = {}
    for key, ref, _problem in repo.read_refs():
        if ref is not None:
            out.setdefault(str(ref["manifest"].get("name", "")).rsplit("--", 1)[0], []).append(key)
    return out


def cmd_show(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm remote show KEY``: the ref (manifest and signature) as JSON; in a registry also its manifest's
    ``digest`` and the pinned ``reference``."""
    repo = _repo(ns, environ)
    docs = []
    for key in _select(repo, ns.keys):
        ref = repo.get_ref(key)
        docs.append(None if ref is None else {**ref, **_pin_fields(repo.pinned(key))})
    _out(docs[0] if len(docs) == 1 else docs)
    return 0


def cmd_rm(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm remote rm KEY...``: removes refs; the blobs go with a later ``remote gc``."""
    repo = _repo(ns, environ)
    keys = _select(repo, ns.keys)
    act = ns.yes and not ns.dry_run
    for key in keys:
        if act:
            repo.delete_ref(key)
        if not ns.json:
            print(f"{'removed' if act else 'would remove'} {_ref_name(repo, key)}")
    if ns.json:
        _out({"refs": [_ref_name(repo, k) for k in keys], "done": act})
    elif not act:
        print("(plan only: pass --yes to remove)")
    return 0


def _ref_name(repo: Repository, key: str) -> str:
    """``refs/<key>.json`` in a bucket, ``oci://registry/repository:<key>`` in a registry."""
    return ref_path(key) if getattr(repo, "lists_blobs", True) else f"{repo.url}:{key}"


def cmd_gc(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm remote gc``: plan, then (with ``--yes``) delete refs and unreferenced old blobs."""
    from trtwarm.config import parse_duration
    from trtwarm.lifecycle.tables import human_bytes
    from trtwarm.remote.gc import execute, plan, ref_versions

    if ns.keep_per_model is not None and ns.keep_per_model < 1:  # 0 or less would plan to remove every ref
        raise ConfigError(f"--keep-per-model {ns.keep_per_model} would remove every ref",
                          hint="give a count of 1 or more (or --max-age); `trtwarm remote rm` removes chosen refs")
    max_age = parse_duration(ns.max_age, "--max-age") if ns.max_age else None  # bad flags fail before the store
    grace = parse_duration(ns.blob_grace, "--blob-grace")
    _warn_short_grace(ns.blob_grace, grace)
    repo = _repo(ns, environ)
    blobs = list(repo.blobs())  # blobs first: one uploaded after this listing is not in the plan at all
    versions = ref_versions(repo)  # before the plan's reads: a ref written after this is read again before deletes
    todo = plan(repo.read_refs(), blobs, time.time(), max_age=max_age, keep_per_model=ns.keep_per_model,
                blob_grace=grace)
    if not getattr(repo, "lists_blobs", True):
        todo.note = "manifests only: a registry's unreferenced blobs go with its own garbage collection"
    act = ns.yes and not ns.dry_run
    if act:
        execute(repo, todo, versions, grace)
    if ns.json:
        _out({**todo.as_json(), "done": act})
        return 0
    verb = "removed" if act else "would remove"
    for key, name, reason in todo.refs:
        print(f"{verb} ref {key[:16]} {name} ({reason})")
    for sha, size in todo.blobs:
        print(f"{verb} blob {sha[:16]} ({human_bytes(size)}, unreferenced)")
    for sha, size, why in todo.spared:
        print(f"kept blob {sha[:16]} ({human_bytes(size)}): {why}")
    print(f"{len(todo.refs)} refs and {len(todo.blobs)} blobs ({human_bytes(sum(s for _, s in todo.blobs))}); kept "
          f"{todo.kept_refs} refs, {todo.referenced} referenced blobs, {todo.young} unreferenced blobs inside the "
          f"grace period" + (f"; {todo.note}" if todo.note else "") + ("" if act else "\n(plan only: pass --yes)"))
    return 0


def _warn_short_grace(text: str, grace: float) -> None:
    """A grace under twice the push's refresh age leaves a reused, unrefreshed orphan to the delete-time checks."""
    from trtwarm.remote.push import REFRESH_AGE

    if grace < 2 * REFRESH_AGE:
        log.warning("--blob-grace %s is under %.0f h, twice the age (%.0f h) after which a push uploads a blob it "
                    "reuses again: an orphan blob a push reuses meanwhile is guarded only by the checks just before "
                    "each delete, and by the push's own check after its ref (docs/remote.md)", text,
                    2 * REFRESH_AGE / 3600, REFRESH_AGE / 3600)


def cmd_coverage(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm remote coverage``: a table of matrix row × GPU product, present or missing, and a percentage."""
    from trtwarm.lifecycle.tables import render
    from trtwarm.cli.matrix import coverage_rows, matrix_platforms
    from trtwarm.node.hostplatform import parse_platform
    from trtwarm.remote.coverage import columns, cover, cpu_row, is_cpu, percent

    gpus = [g.strip() for g in ns.gpus.split(",") if g.strip()]
    if not gpus:  # "100 % of nothing" would pass a CI gate
        raise ConfigError("--gpus names no GPU product", hint='e.g. --gpus "NVIDIA H100 80GB HBM3,NVIDIA A100-SXM4-'
                          '80GB" (`nvidia-smi --query-gpu=name --format=csv` on a node), or cpu')
    try:  # GPU@PLATFORM; without one, a column per platform the matrix declares (default: this host's)
        gpus = [g if "@" not in g else f"{g.partition('@')[0]}@{parse_platform(g.partition('@')[2])}" for g in gpus]
    except ValueError as exc:
        raise ConfigError(f"--gpus: {exc}") from None
    gpus = columns(gpus, matrix_platforms(Path(ns.matrix)))
    rows = coverage_rows(Path(ns.matrix), environ, ns.tensorrt)
    if any(cpu_row(want) for _label, want in rows) and not any(is_cpu(g) for g in gpus):
        gpus.append("cpu")  # CPU rows are answered in a CPU column, never as MISSING under a GPU product
    refs = [(k, r) for k, r, _p in _repo(ns, environ).read_refs() if r is not None]
    cells = cover(rows, gpus, refs)
    failed = {label: err for label, err in rows if isinstance(err, TrtwarmError)}
    if ns.json:
        _out({"percent": round(percent(cells), 1), "gpus": gpus,
              "cells": [{"row": c.row, "gpu": c.gpu, "key": c.key} for c in cells if c.applies],
              "unreadable": {label: err.message for label, err in failed.items()}})
    else:
        table = [[label, *(_cell(c, failed.get(label)) for c in cells if c.row == label)] for label, _ in rows]
        print(render(["MODEL/PRECISION", *gpus], table))
        counted = [c for c in cells if c.applies]
        print(f"\ncoverage {percent(cells):.0f}% ({sum(c.key is not None for c in counted)} of {len(counted)})")
    for label, err in failed.items():  # every other row was still answered; the run fails, naming these
        log.error("%s: %s", label, err.message)
    return exit_code_for(next(iter(failed.values()))) if failed else 0


def _cell(cell: Any, error: TrtwarmError | None) -> str:
    """A coverage table cell: ``present``, ``MISSING``, ``-`` (does not apply), or why the row has no key."""
    if error is not None:
        return "NO MODEL" if isinstance(error, ModelError) else "BAD ROW"
    return "-" if not cell.applies else "present" if cell.key else "MISSING"


def cmd_prebuild(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm prebuild``."""
    from trtwarm.cli.prebuild import run

    return run(ns, environ)


__all__ = ["add_parsers"]
