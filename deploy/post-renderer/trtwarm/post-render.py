#!/usr/bin/env python3
"""Helm post-renderer: put trtwarm in front of chosen workloads of a chart you do not own.

Reads the rendered manifests on stdin, writes them to stdout. Only the workloads named by ``--target`` (or the
``TRTWARM_TARGET`` environment variable: ``Kind/name`` or ``name``, comma separated) change; every other document
passes through byte for byte (never re-serialized: a quoted ``"y"`` or ``"0o17"`` stays a string). A target is
edited with a round-trip YAML library (ruamel.yaml), so its own values keep their quoting too. In each target's Pod it

* appends ``trtwarm-exporter`` (a native sidecar) and ``trtwarm-init`` *after* the existing init containers (a model
  download runs first);
* gives ``trtwarm-init`` the server container's ``nvidia.com/*`` requests and limits (``nvidia.com/gpu``, a MIG
  resource, ...), so the kubelet hands the same GPU on to the server, and its DRA resource claims
  (``resources.claims``: containers of one Pod share a claim), so the init builds on the device the server gets;
* uses the chart's security context for its containers (uid/gid 1000, non-root, read-only root, no privilege
  escalation, no capabilities, RuntimeDefault seccomp) and sets ``fsGroup`` (and ``fsGroupChangePolicy``) only where
  the Pod has none;
* adds ``TRTWARM_ENGINE`` and the cache and hand-off mounts to the server container, and the volumes.

A Pod that already runs ``trtwarm-init`` (wired by the chart, by hand, or by an earlier pass) is left exactly as it
is, so running the post-renderer twice changes nothing and never drops a wiring's own flags (trust, --read-only).
The cache and the hand-off are mounted where no mount or model repository of the server is (``/trtwarm-cache`` and
``/trtwarm`` by default): a cache inside Triton's ``/models`` would be read as a model.

Every flag has an environment variable (Helm 4 plugins get the caller's environment; Helm 3 passes
``--post-renderer-args``). Needs Python 3.8+ and ruamel.yaml (``pip install 'ruamel.yaml>=0.18'``). Exit 2 with a
message for a bad target, flag or input.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import posixpath
import re
import shlex
import sys
from typing import Any

try:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString
except ImportError:  # pragma: no cover - depends on the user's machine
    print("trtwarm post-renderer: ruamel.yaml is missing (pip install 'ruamel.yaml>=0.18')", file=sys.stderr)
    sys.exit(2)

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}
POD_ENV = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in
           (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"), ("POD_UID", "metadata.uid"),
            ("NODE_NAME", "spec.nodeName"))] + [{"name": "HOME", "value": "/tmp"}]
#: a document separator: `---` alone on its line (at column 0 it ends any block scalar, so it is always one)
SEPARATOR = re.compile(r"^---[ \t]*(?:#[^\n]*)?\r?$", re.M)
#: server flags that name a model repository the cache must stay out of (Triton, TorchServe)
REPOSITORY_FLAGS = ("--model-repository", "--model_repository", "--model-store", "--model_store")


class Refused(Exception):
    """A flag, target or input that cannot work; the message says what to change."""


def parse(argv: list[str], env: dict[str, str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="trtwarm post-renderer", description=__doc__.split("\n\n")[0])
    opt = [("--target", "TRTWARM_TARGET", None, "workloads to patch: Kind/name or name, comma separated"),
           ("--container", "TRTWARM_CONTAINER", None, "the inference container in them"),
           ("--model", "TRTWARM_MODEL", None, "the ONNX model's path inside trtwarm-init"),
           ("--cache-claim", "TRTWARM_CACHE_CLAIM", "trtwarm-cache", "ReadWriteMany claim of the engine cache"),
           ("--cache-dir", "TRTWARM_CACHE_DIR", "/trtwarm-cache", "where the cache is mounted (outside the server's "
                                                                  "model repository and mounts)"),
           ("--handoff-dir", "TRTWARM_HANDOFF_DIR", "/trtwarm", "where the hand-off is mounted"),
           ("--model-claim", "TRTWARM_MODEL_CLAIM", "", "claim holding the model, mounted at /models/src"),
           ("--version", "TRTWARM_VERSION", "0.1.0", "trtwarm image tag"),
           ("--registry", "TRTWARM_REGISTRY", "ghcr.io/trtwarm", "where the trtwarm images are"),
           ("--args", "TRTWARM_ARGS", "", "more `trtwarm init` flags (shell words)")]
    for flag, var, default, text in opt:
        p.add_argument(flag, default=env.get(var, default), help=f"{text} (${var})")
    ns = p.parse_args(argv)
    missing = [f"{flag} (${var})" for flag, var, _d, _t in opt if not getattr(ns, flag[2:].replace("-", "_"))
               and flag in ("--target", "--container", "--model")]
    if missing:
        raise Refused(f"missing {', '.join(missing)}: the post-renderer patches only the workloads you name")
    for flag in ("cache_dir", "handoff_dir"):
        path = getattr(ns, flag)
        if not path.startswith("/") or posixpath.normpath(path) in ("/", "/tmp"):
            raise Refused(f"--{flag.replace('_', '-')}={path!r}: give an absolute directory of its own")
        setattr(ns, flag, posixpath.normpath(path))
    if _inside(ns.cache_dir, ns.handoff_dir) or _inside(ns.handoff_dir, ns.cache_dir):
        raise Refused(f"--cache-dir {ns.cache_dir} and --handoff-dir {ns.handoff_dir} must not contain each other")
    try:
        ns.init_args = shlex.split(ns.args)
    except ValueError as exc:
        raise Refused(f"--args ($TRTWARM_ARGS) is not valid shell words: {exc}") from None
    ns.targets = [t.strip() for t in ns.target.split(",") if t.strip()]
    return ns


def _inside(path: str, root: str) -> bool:
    """Whether *path* is *root* or lies under it."""
    root = posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _quoted(value: Any) -> Any:
    """*value* with every string that YAML 1.1 readers (the API server's) would take for a bool, a number or null
    double-quoted: the strings this script adds stay strings."""
    if isinstance(value, dict):
        return {k: _quoted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_quoted(v) for v in value]
    if isinstance(value, str) and not re.fullmatch(r"[A-Za-z/_][-A-Za-z0-9_./=]*", value) or \
            isinstance(value, str) and value.lower() in ("y", "n", "yes", "no", "on", "off", "true", "false", "null"):
        return DoubleQuotedScalarString(value)
    return value


def _named(items: list[Any], add: list[dict[str, Any]]) -> list[Any]:
    """*items* with each of *add* replacing the item of the same name in place, or appended (in place)."""
    names = [i.get("name") for i in items]
    for item in add:
        if item["name"] in names:
            items[names.index(item["name"])] = item
        else:
            items.append(item)
            names.append(item["name"])
    return items


def _gpu(server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    res = server.get("resources") or {}
    gpu = {k: v for part in ("requests", "limits") for k, v in (res.get(part) or {}).items()
           if str(k).startswith("nvidia.com/")}
    return {"requests": dict(gpu), "limits": dict(gpu)} if gpu else {}


def _containers(ns: argparse.Namespace, server: dict[str, Any]) -> list[dict[str, Any]]:
    cache, handoff = ns.cache_dir, ns.handoff_dir
    mounts = [{"name": "trtwarm-cache", "mountPath": cache}, {"name": "trtwarm-tmp", "mountPath": "/tmp"}]
    exporter = {"name": "trtwarm-exporter", "image": f"{ns.registry}/trtwarm-sidecar:{ns.version}",
                "restartPolicy": "Always", "command": ["trtwarm-sidecar"],
                "args": [f"--cache-dir={cache}", f"--handoff-dir={handoff}", "--port=9400"],
                "env": copy.deepcopy(POD_ENV), "ports": [{"name": "trtwarm-metrics", "containerPort": 9400}],
                # Ready once the init handed the engine over: the hand-off's link, checked by the kubelet without
                # following it into the cache volume; a restart of the exporter does not reset it (issue 28 F4)
                "readinessProbe": {"exec": {"command": ["test", "-L", f"{handoff}/engine"]}, "periodSeconds": 5},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "trtwarm-metrics"}, "periodSeconds": 10,
                                  "timeoutSeconds": 5, "failureThreshold": 6},
                "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": copy.deepcopy(SECURITY),
                "volumeMounts": [*mounts, {"name": "trtwarm-handoff", "mountPath": handoff, "readOnly": True}]}
    resources: dict[str, dict[str, Any]] = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "16Gi"}}
    init = {"name": "trtwarm-init", "image": f"{ns.registry}/trtwarm-init:{ns.version}", "command": ["trtwarm-init"],
            "args": [f"--model={ns.model}", f"--cache-dir={cache}", f"--handoff-dir={handoff}", *ns.init_args],
            "env": copy.deepcopy(POD_ENV), "resources": resources, "securityContext": copy.deepcopy(SECURITY),
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [*mounts, {"name": "trtwarm-handoff", "mountPath": handoff}]}
    if ns.model_claim:
        init["volumeMounts"].append({"name": "trtwarm-models", "mountPath": "/models/src", "readOnly": True})
    quoted = [_quoted(exporter), _quoted(init)]
    for part, gpu in _gpu(server).items():  # the server's own nodes, quoting and all
        quoted[1]["resources"][part].update(gpu)
    claims = (server.get("resources") or {}).get("claims")
    if claims:  # a copy: one node in two places would be written as a YAML anchor and alias
        quoted[1]["resources"]["claims"] = copy.deepcopy(claims)
    return quoted


def _wired(spec: dict[str, Any]) -> bool:
    """Whether the Pod already runs trtwarm init (the chart, a hand-written manifest, or an earlier pass)."""
    return any(c.get("name") == "trtwarm-init" or str((c.get("command") or [""])[0]).endswith("trtwarm-init")
               for c in spec.get("initContainers") or [])


def _check_paths(server: dict[str, Any], ns: argparse.Namespace, where: str) -> None:
    """Refuse a cache or hand-off path inside (or over) one of the server's mounts or its model repository."""
    taken = [(str(m.get("mountPath", "")), f"its mount {m.get('name')!r}") for m in server.get("volumeMounts") or []
             if m.get("name") not in ("trtwarm-cache", "trtwarm-handoff")]
    for arg in [str(a) for a in (server.get("args") or []) + (server.get("command") or [])]:
        flag, _, value = arg.partition("=")
        if flag in REPOSITORY_FLAGS and value.startswith("/"):
            taken.append((value, f"its model repository ({flag})"))
    for option, path in (("--cache-dir", ns.cache_dir), ("--handoff-dir", ns.handoff_dir)):
        for other, what in taken:
            if other.startswith("/") and (_inside(path, other) or _inside(other, path)):
                raise Refused(f"{where}: {option} {path} overlaps {other}, {what}, of container {ns.container!r} "
                              f"(the server would read trtwarm's files as its own): choose another {option}")


def patch_pod(spec: dict[str, Any], ns: argparse.Namespace, where: str) -> None:
    """Put trtwarm into the Pod *spec* of workload *where* (in place)."""
    servers = [c for c in spec.get("containers") or [] if c.get("name") == ns.container]
    if not servers:
        names = [c.get("name") for c in spec.get("containers") or []]
        raise Refused(f"{where} has no container {ns.container!r} (it has {names}): set --container")
    server = servers[0]
    _check_paths(server, ns, where)
    spec["initContainers"] = _named(spec.get("initContainers") or [], _containers(ns, server))
    server["env"] = _named(server.get("env") or [], [_quoted({"name": "TRTWARM_ENGINE",
                                                              "value": f"{ns.handoff_dir}/engine"})])
    server["volumeMounts"] = _named(server.get("volumeMounts") or [], _quoted([
        {"name": "trtwarm-cache", "mountPath": ns.cache_dir, "readOnly": True},
        {"name": "trtwarm-handoff", "mountPath": ns.handoff_dir, "readOnly": True}]))
    volumes = [{"name": "trtwarm-cache", "persistentVolumeClaim": {"claimName": ns.cache_claim}},
               {"name": "trtwarm-handoff", "emptyDir": {"sizeLimit": "16Mi"}}, {"name": "trtwarm-tmp", "emptyDir": {}}]
    if ns.model_claim:
        volumes.append({"name": "trtwarm-models", "persistentVolumeClaim": {"claimName": ns.model_claim,
                                                                             "readOnly": True}})
    spec["volumes"] = _named(spec.get("volumes") or [], _quoted(volumes))
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    pod_security = spec["securityContext"]
    if "fsGroup" not in pod_security:  # the cache must be writable by uid 1000; never re-own the chart's choice
        pod_security.update({"fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch"})


def _target(doc: Any, targets: list[str]) -> str | None:
    """``Kind/name`` of *doc* when it is one of *targets*."""
    if not isinstance(doc, dict) or doc.get("kind") not in WORKLOADS:
        return None
    name = (doc.get("metadata") or {}).get("name")
    return f"{doc['kind']}/{name}" if name in targets or f"{doc['kind']}/{name}" in targets else None


def _pod_spec(doc: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
        return spec["template"]["spec"]
    except (KeyError, TypeError):
        raise Refused(f"{where} has no Pod template spec") from None


def _yaml() -> YAML:
    rt = YAML()  # round-trip: comments, key order, quoting and the format of numbers are kept
    rt.preserve_quotes = True
    rt.allow_duplicate_keys = True
    rt.width = 1 << 16  # never fold a long string onto a second line
    rt.indent(mapping=2, sequence=4, offset=2)
    return rt


def split(text: str) -> list[str]:
    """*text* cut into its documents, each with the separator line that opened it: joined, they give *text* back."""
    starts = [m.start() for m in SEPARATOR.finditer(text)]
    bounds = [0, *[s for s in starts if s > 0], len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def _header(chunk: str) -> tuple[str, str]:
    """The chunk's separator line (with its newline) and the rest."""
    match = SEPARATOR.match(chunk)
    if not match:
        return "", chunk
    end = match.end() + (1 if chunk[match.end():match.end() + 1] == "\n" else 0)
    return chunk[:end], chunk[end:]


def render(text: str, ns: argparse.Namespace) -> tuple[str, list[str]]:
    """The manifests *text* with the targets patched, and notes for stderr.

    :raises Refused: a target is missing, has no such container, or the input is not YAML"""
    rt, out, found, notes = _yaml(), [], [], []
    for chunk in split(text):
        header, body = _header(chunk)
        try:
            doc = rt.load(body)
        except YAMLError as exc:
            raise Refused(f"the input is not YAML: {exc}") from None
        where = _target(doc, ns.targets)
        if where is None:
            out.append(chunk)  # byte for byte
            continue
        found.append(where)
        spec = _pod_spec(doc, where)
        if _wired(spec):
            notes.append(f"{where} already runs trtwarm-init: left as it is")
            out.append(chunk)
            continue
        patch_pod(spec, ns, where)
        if doc["kind"] == "Deployment" and int(doc["spec"].get("progressDeadlineSeconds", 600)) < 3600:
            doc["spec"]["progressDeadlineSeconds"] = 3600  # Pods wait for another Pod's build
        buf = io.StringIO()
        rt.dump(doc, buf)
        out.append(header + buf.getvalue())
    names = {f.split("/", 1)[1] for f in found} | set(found)
    missing = [t for t in ns.targets if t not in names]
    if missing:
        raise Refused(f"no {'/'.join(WORKLOADS)} matches {missing} in the rendered chart")
    return "".join(out), notes


def main(argv: list[str] | None = None) -> int:
    try:
        ns = parse(sys.argv[1:] if argv is None else argv, dict(os.environ))
        try:  # bytes, not text mode: line ends (CRLF too) pass through as they came
            source = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused(f"the input is not UTF-8: {exc}") from None
        text, notes = render(source, ns)
    except Refused as exc:
        print(f"trtwarm post-renderer: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"trtwarm post-renderer: {note}", file=sys.stderr)
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
