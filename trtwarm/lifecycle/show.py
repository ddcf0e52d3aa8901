"""``trtwarm show KEY|PREFIX|NAME``: one entry in full, for the person deciding what to do with it.

Files with sizes and recorded digests, the key document, builder and device, who built it and when, signature
status, verification, leases with their expiry, and the ``trtwarm init`` command line that resolves to it.
Read-only, like ``ls``; ``--verify`` re-hashes the entry now (what every hit does) and says what it found.
"""

from __future__ import annotations

import argparse
import json
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError, EntriesDamaged, EntryInvalid
from trtwarm.fs.ops import read_json_object
from trtwarm.key import model_part
from trtwarm.lifecycle.filters import select
from trtwarm.lifecycle.entryinfo import EntryInfo
from trtwarm.lifecycle.inventory import Inventory, scan
from trtwarm.lifecycle.tables import human_age, human_bytes, utc
from trtwarm.volume.files import scan_files
from trtwarm.volume.layout import Layout

SIGNATURE = "manifest.sig.json"


def signature_status(info: EntryInfo, policy: Path | None = None) -> str:
    """The entry's signature status in words: ``unsigned`` without ``manifest.sig.json``; else who signed it, and,
    with a trust policy, whether a key it trusts for this entry signed exactly this manifest
    (:meth:`trtwarm.trust.policy.Gate.status`, the check ``init`` makes).

    :raises ConfigError: an unreadable policy
    """
    path = info.path / SIGNATURE
    if not path.exists():
        return "unsigned"
    if policy is not None and info.manifest:  # the check init makes, whatever shape the envelope has
        from trtwarm.trust.policy import Gate
        from trtwarm.volume.entry import Entry

        ok, detail = Gate.create(policy, "warn").status(Entry(info.path, info.manifest))
        return f"signed by trusted key {detail[:16]} ({policy})" if ok else f"NOT trusted by {policy}: {detail}"
    doc = read_json_object(path, 1 << 20)
    sigs = doc.get("signatures") if doc else None
    if not isinstance(sigs, list):
        return f"{SIGNATURE} present but not a signature envelope"
    ids = ", ".join(str(s.get("keyid", "?"))[:16] for s in sigs if isinstance(s, dict)) or "no key"
    return f"signed by {ids} (not checked: pass --trust-policy)"


def _files(info: EntryInfo) -> list[dict[str, Any]]:
    """Every file under the entry with its size, and the digest and role the manifest records for it."""
    m = info.manifest
    recorded = {f.get("path"): f for f in m.get("files") or [] if isinstance(f, dict)}
    if "engine_file" in m and m["engine_file"] not in recorded:
        recorded[m["engine_file"]] = {"role": "engine", "sha256": m.get("engine_sha256")}
    out = []
    try:  # through descriptors: a link inside is listed, never followed, and any depth is read
        found = scan_files(Path(info.path))
    except EntryInvalid:
        found = {}
    for rel, st in sorted(found.items()):
        if stat.S_ISDIR(st.st_mode):
            continue  # an empty directory
        rec = recorded.get(rel, {})
        role = rec.get("role") or ("manifest" if rel in ("manifest.json", SIGNATURE) else "unlisted")
        chunks = rec.get("chunk_sha256")
        out.append({"path": rel, "bytes": st.st_size, "sha256": rec.get("sha256"), "role": role,
                    "symlink": stat.S_ISLNK(st.st_mode), "chunk_bytes": rec.get("chunk_bytes"),
                    "chunks": len(chunks) if isinstance(chunks, list) else None})
    return out


def _leases(inv: Inventory, key: str | None) -> list[dict[str, Any]]:
    out = []
    for lease in sorted(inv.leases.get(key or "", []), key=lambda x: -x.heartbeat):
        doc = read_json_object(lease.path, 1 << 16) or {}
        out.append({"holder": lease.holder, "pod": doc.get("pod"), "namespace": doc.get("namespace"),
                    "node": doc.get("node"), "heartbeat_ts": lease.heartbeat,
                    "expires_ts": lease.expires, "fresh": lease.fresh(inv.now)})
    return out


def _shape_arg(shapes: Mapping[str, Any]) -> str:
    return ";".join(f"{n}={':'.join('x'.join(map(str, s[k])) for k in ('min', 'opt', 'max'))}"
                    for n, s in sorted(shapes.items()))


def _builder_args(builder: Mapping[str, Any], device: Mapping[str, Any]) -> list[str]:
    name = str(builder.get("name", "tensorrt"))
    args = ["--builder", name]
    if name == "command":
        args += ["--build-command", str(builder.get("command")), "--builder-version", str(builder.get("version")),
                 "--device", "gpu" if device.get("kind") == "gpu" else "cpu"]
    elif name == "onnxruntime":
        from trtwarm.builders.onnxruntime import PROVIDERS

        # the key names ONNX Runtime's provider (CPUExecutionProvider); the flag takes trtwarm's word for it (cpu)
        flag = next((word for word, ep in PROVIDERS.items() if ep == builder.get("provider")), "cpu")
        args += ["--ort-provider", flag] if flag != "cpu" else []
    return args


def _trt_args(build: Mapping[str, Any]) -> list[str]:
    args = []
    for field, flag in (("workspace", "--workspace"), ("opt_level", "--opt-level")):
        if build.get(field) is not None:
            args += [flag, str(build[field])]
    if build.get("hardware_compat", "none") != "none":
        args += ["--hardware-compat", str(build["hardware_compat"])]
    args += [flag for field, flag in (("version_compatible", "--version-compatible"),
                                      ("exclude_lean_runtime", "--exclude-lean-runtime")) if build.get(field)]
    if build.get("tf32") is False:
        args += ["--tf32", "off"]
    for plugin in build.get("plugins") or []:
        args += ["--plugin", str(plugin.get("name"))]
    return args


def init_command(doc: Mapping[str, Any], name: str, cache_dir: str) -> str:
    """A ``trtwarm init`` command line whose key is this key document (the model path is the one unknown: it
    must be the file whose SHA-256 the document records; a plugin is named by its file name)."""
    build, builder = doc.get("build") or {}, doc.get("builder") or {}
    model = model_part(name)
    args = ["trtwarm", "init", "--model", f"{model}.onnx", "--name", model, "--cache-dir", cache_dir]
    args += _builder_args(builder, doc.get("device") or {})
    if build.get("precision"):
        args += ["--precision", str(build["precision"])]
    if len(build.get("profiles") or []) > 1:
        args += [a for profile in build["profiles"] for a in ("--profile", _shape_arg(profile))]
    else:
        args += [a for n, s in sorted((build.get("shapes") or {}).items()) for a in ("--shape", _shape_arg({n: s}))]
    args += _trt_args(build)
    args += [a for k, v in sorted((build.get("extra") or {}).items()) for a in ("--key-extra", f"{k}={v}")]
    return shlex.join(args)


def _init_command(doc: Mapping[str, Any], name: str, cache_dir: str) -> str | None:
    """:func:`init_command`, or None for a key document of another shape than trtwarm writes (hand-edited)."""
    try:
        return init_command(doc, name, cache_dir)
    except (AttributeError, TypeError, KeyError, ValueError):  # the document's parts are not the mappings it writes
        return None


def _verify_now(info: EntryInfo) -> str:
    from trtwarm.volume.entry import check_entry

    try:
        check_entry(info.path, info.key)
    except EntryInvalid as exc:
        return f"failed: {exc.reason}"
    return "ok: manifest, size and SHA-256 match"


def describe(inv: Inventory, info: EntryInfo, cache_dir: str, verify: bool,
             policy: Path | None = None) -> dict[str, Any]:
    """Everything ``show`` prints, as ``show --json`` prints it."""
    m = info.manifest
    doc = m.get("key_document") or {}
    verified = _verify_now(info) if verify else None
    if verified and not verified.startswith("ok") and info.status == "ok":  # what the check found now is the status
        info.status, info.problem = "damaged", verified.removeprefix("failed: ")
    return {**info.as_json(), "model": model_part(info.name), "files": _files(info), "key_document": doc or None,
            "built_by": m.get("built_by"), "build_seconds": m.get("build_seconds"),
            "trtwarm_version": m.get("trtwarm_version"), "schema": m.get("schema"),
            "signature": signature_status(info, policy), "leases": _leases(inv, info.key),
            "verified_now": verified,
            "init_command": _init_command(doc, info.name, cache_dir) if doc else None}


def _who(by: Mapping[str, Any] | None) -> str:
    if not by:
        return "?"
    if by.get("pod"):
        return f"pod {by.get('namespace') or 'default'}/{by['pod']} on node {by.get('node') or '?'}"
    return f"pid {by.get('pid')} on host {by.get('hostname')}"


def _lease_line(lease: Mapping[str, Any], now: float) -> str:
    expires = lease["expires_ts"] - now
    when = f"expires in {human_age(expires)} ({utc(lease['expires_ts'])})" if expires > 0 else \
        f"expired {human_age(-expires)} ago: its Pod is gone"
    return f"{lease['holder']}: heartbeat {human_age(now - lease['heartbeat_ts'])} ago, {when}"


def _chunks_note(f: Mapping[str, Any]) -> str:
    if not f.get("chunks") or not isinstance(f.get("chunk_bytes"), int):
        return ""
    return f"  ({f['chunks']} chunk digests of {human_bytes(f['chunk_bytes'])})"


def render(d: Mapping[str, Any], now: float) -> str:
    """The text form of :func:`describe`."""
    status = d["status"] if d["status"] == "ok" else f"{d['status']}: {d['problem']}"
    built = f"{d['created'] or utc(d['created_ts'])} by {_who(d['built_by'])}"
    if d["build_seconds"] is not None:
        built += f" in {d['build_seconds']:.1f} s (trtwarm {d['trtwarm_version']})"
    verified = d["verified_now"] or "every hit re-checks size and SHA-256 (--verify load: also loads it); " \
                                    "`trtwarm show --verify` checks now"
    rows = [("entry", d["name"]), ("path", str(Path(d["path"]).parent if d["engine_bytes"] is not None else d["path"])),
            ("key", d["key"] or "?"), ("status", status), ("builder", d["builder"]), ("device", d["device"]),
            ("precision", d["precision"]), ("shapes", d["shapes"]), ("built", built), ("signature", d["signature"]),
            ("verification", verified), ("last used", f"{utc(d['last_used_ts'])} ({human_age(now - d['last_used_ts'])}"
                                         " ago)" if d["last_used_ts"] else "-")]
    rows += [("leases" if i == 0 else "", _lease_line(lease, now)) for i, lease in enumerate(d["leases"])] or \
        [("leases", "none (no Pod uses it now)")]
    rows += [("files" if i == 0 else "", f"{f['path']}  {human_bytes(f['bytes'])}  {f['role']}"
              + (f"  sha256 {f['sha256']}" if f["sha256"] else "") + _chunks_note(f)
              + ("  (a symlink!)" if f["symlink"] else ""))
             for i, f in enumerate(d["files"])]
    rows.append(("init", d["init_command"] or "- (no readable key document)"))
    lines = [f"{k:<13}{v}" for k, v in rows]
    if d["key_document"]:
        lines += ["key document", json.dumps(d["key_document"], indent=2, sort_keys=True)]
    return "\n".join(lines)


def find(inv: Inventory, selector: str) -> EntryInfo:
    """The one entry *selector* names. :raises ConfigError: none, or several (listed)."""
    hits = select(inv.entries, selector)
    if len(hits) == 1:
        return hits[0]
    if not hits:
        building = [o for o in inv.building if o.lock_id.startswith(selector.lower())]
        detail = f"; a build of key {building[0].lock_id[:16]} is in progress" if building else ""
        raise ConfigError(f"no entry matches {selector!r}{detail}", hint="`trtwarm ls` lists names and keys; a key "
                          "prefix needs at least 8 hex digits")
    raise ConfigError(f"{selector!r} matches {len(hits)} entries: {', '.join(sorted(h.name for h in hits))}",
                      hint="give a longer key prefix or a full entry name")


def cmd_show(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm show``."""
    layout = Layout(Path(ns.cache_dir))
    layout.require()  # a missing or foreign dir is exit 6: an unmounted volume must not look empty
    inv = scan(layout, manifests=True)
    policy = Path(ns.trust_policy) if ns.trust_policy else None
    d = describe(inv, find(inv, ns.selector), ns.cache_dir, ns.verify, policy)
    print(json.dumps(d, indent=2, sort_keys=True) if ns.json else render(d, inv.now))
    if d["status"] == "damaged":  # shown in full; the exit code says it is damaged
        raise EntriesDamaged(f"{d['name']} is damaged: {d['problem']}", hint="`trtwarm verify --fix` quarantines "
                             "it (kept for inspection); the next init that may write the volume rebuilds it")
    return 0


def add_parser(sub: Any, cache_default: str) -> None:
    """Define ``trtwarm show`` on the subparsers action *sub*."""
    p = sub.add_parser("show", help="one entry in full: files, key document, who built it, leases, its init line")
    p.add_argument("selector", metavar="KEY|PREFIX|NAME", help="a key, a key prefix (8+ hex digits), an entry "
                   "name (with or without its --key16 suffix) or a model name")
    p.add_argument("--cache-dir", default=cache_default, help="the shared cache volume (%(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--verify", action="store_true", help="re-hash the entry now; exit 8 if it fails")
    p.add_argument("--trust-policy", metavar="FILE", help="check the entry's signature against this trust policy")
    p.set_defaults(func=cmd_show)


__all__ = ["SIGNATURE", "add_parser", "cmd_show", "describe", "find", "init_command", "render", "signature_status"]
