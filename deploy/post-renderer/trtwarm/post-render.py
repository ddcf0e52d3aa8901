#!/usr/bin/env python3
"""Helm post-renderer: put trtwarm in front of chosen workloads of a chart you do not own.

Reads the rendered manifests on stdin, writes them to stdout. Only the workloads named by ``--target`` (or the
``TRTWARM_TARGET`` environment variable: ``Kind/name`` or ``name``, comma separated) change; everything else passes
through untouched. In each target's Pod it

* appends ``trtwarm-exporter`` (a native sidecar) and ``trtwarm-init`` *after* the existing init containers (a model
  download runs first);
* gives ``trtwarm-init`` the server container's ``nvidia.com/*`` requests and limits (``nvidia.com/gpu``, a MIG
  resource, ...), so the kubelet hands the same GPU on to the server;
* uses the chart's security context for its containers (uid/gid 1000, non-root, read-only root, no privilege
  escalation, no capabilities, RuntimeDefault seccomp) and sets ``fsGroup`` (and ``fsGroupChangePolicy``) only where
  the Pod has none;
* adds ``TRTWARM_ENGINE`` and the cache and hand-off mounts to the server container, and the volumes.

Every flag has an environment variable (Helm 4 plugins get the caller's environment; Helm 3 passes
``--post-renderer-args``). Needs Python 3.8+ and PyYAML. Exit 2 with a message for a bad target or flag.
"""

from __future__ import annotations

import argparse
import copy
import os
import shlex
import sys
from typing import Any

try:
    import yaml
except ImportError:  # pragma: no cover - depends on the user's machine
    sys.exit("trtwarm post-renderer: PyYAML is missing (pip install pyyaml)")

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}
POD_ENV = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in
           (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"), ("POD_UID", "metadata.uid"),
            ("NODE_NAME", "spec.nodeName"))] + [{"name": "HOME", "value": "/tmp"}]


class Refused(Exception):
    """A flag or target that cannot work; the message says what to change."""


def parse(argv: list[str], env: dict[str, str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="trtwarm post-renderer", description=__doc__.split("\n\n")[0])
    opt = [("--target", "TRTWARM_TARGET", None, "workloads to patch: Kind/name or name, comma separated"),
           ("--container", "TRTWARM_CONTAINER", None, "the inference container in them"),
           ("--model", "TRTWARM_MODEL", None, "the ONNX model's path inside trtwarm-init"),
           ("--cache-claim", "TRTWARM_CACHE_CLAIM", "trtwarm-cache", "ReadWriteMany claim of the engine cache"),
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
    ns.targets = [t.strip() for t in ns.target.split(",") if t.strip()]
    return ns


def _named(items: list[dict[str, Any]], add: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*items* with each of *add* replacing the item of the same name in place, or appended."""
    out, names = list(items), [i.get("name") for i in items]
    for item in add:
        if item["name"] in names:
            out[names.index(item["name"])] = item
        else:
            out.append(item)
            names.append(item["name"])
    return out


def _gpu(server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    res = server.get("resources") or {}
    gpu = {k: v for part in ("requests", "limits") for k, v in (res.get(part) or {}).items()
           if k.startswith("nvidia.com/")}
    return {"requests": dict(gpu), "limits": dict(gpu)} if gpu else {}


def _containers(ns: argparse.Namespace, server: dict[str, Any]) -> list[dict[str, Any]]:
    mounts = [{"name": "trtwarm-cache", "mountPath": "/models/cache"}, {"name": "trtwarm-tmp", "mountPath": "/tmp"}]
    exporter = {"name": "trtwarm-exporter", "image": f"{ns.registry}/trtwarm-sidecar:{ns.version}",
                "restartPolicy": "Always", "command": ["trtwarm-sidecar"],
                "args": ["--cache-dir=/models/cache", "--handoff-dir=/trtwarm", "--port=9400"],
                "env": copy.deepcopy(POD_ENV), "ports": [{"name": "trtwarm-metrics", "containerPort": 9400}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "trtwarm-metrics"}, "periodSeconds": 5},
                "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}},
                "securityContext": copy.deepcopy(SECURITY),
                "volumeMounts": [*mounts, {"name": "trtwarm-handoff", "mountPath": "/trtwarm", "readOnly": True}]}
    resources = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "16Gi"}}
    for part, gpu in _gpu(server).items():
        resources[part].update(gpu)
    init = {"name": "trtwarm-init", "image": f"{ns.registry}/trtwarm-init:{ns.version}", "command": ["trtwarm-init"],
            "args": [f"--model={ns.model}", "--cache-dir=/models/cache", "--handoff-dir=/trtwarm",
                     *shlex.split(ns.args)],
            "env": copy.deepcopy(POD_ENV), "resources": resources, "securityContext": copy.deepcopy(SECURITY),
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [*mounts, {"name": "trtwarm-handoff", "mountPath": "/trtwarm"}]}
    if ns.model_claim:
        init["volumeMounts"].append({"name": "trtwarm-models", "mountPath": "/models/src", "readOnly": True})
    return [exporter, init]


def patch_pod(spec: dict[str, Any], ns: argparse.Namespace, where: str) -> None:
    """Put trtwarm into the Pod *spec* of workload *where* (in place)."""
    servers = [c for c in spec.get("containers", []) if c.get("name") == ns.container]
    if not servers:
        names = [c.get("name") for c in spec.get("containers", [])]
        raise Refused(f"{where} has no container {ns.container!r} (it has {names}): set --container")
    server = servers[0]
    spec["initContainers"] = _named(spec.get("initContainers") or [], _containers(ns, server))
    server["env"] = _named(server.get("env") or [], [{"name": "TRTWARM_ENGINE", "value": "/trtwarm/engine"}])
    server["volumeMounts"] = _named(server.get("volumeMounts") or [], [
        {"name": "trtwarm-cache", "mountPath": "/models/cache", "readOnly": True},
        {"name": "trtwarm-handoff", "mountPath": "/trtwarm", "readOnly": True}])
    volumes = [{"name": "trtwarm-cache", "persistentVolumeClaim": {"claimName": ns.cache_claim}},
               {"name": "trtwarm-handoff", "emptyDir": {"sizeLimit": "16Mi"}}, {"name": "trtwarm-tmp", "emptyDir": {}}]
    if ns.model_claim:
        volumes.append({"name": "trtwarm-models", "persistentVolumeClaim": {"claimName": ns.model_claim,
                                                                             "readOnly": True}})
    spec["volumes"] = _named(spec.get("volumes") or [], volumes)
    pod_security = spec.setdefault("securityContext", {})
    if "fsGroup" not in pod_security:  # the cache must be writable by uid 1000; never re-own the chart's choice
        pod_security.update({"fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch"})


def _matches(obj: dict[str, Any], targets: list[str]) -> bool:
    name = (obj.get("metadata") or {}).get("name")
    return obj.get("kind") in WORKLOADS and (name in targets or f"{obj.get('kind')}/{name}" in targets)


def render(docs: list[Any], ns: argparse.Namespace) -> list[Any]:
    """Patch the targets among *docs*; :raises Refused: a target is missing or has no such container."""
    found = []
    for doc in docs:
        if isinstance(doc, dict) and _matches(doc, ns.targets):
            where = f"{doc['kind']}/{doc['metadata']['name']}"
            template = doc["spec"]["jobTemplate"]["spec"]["template"] if doc["kind"] == "CronJob" else \
                doc["spec"]["template"]
            patch_pod(template["spec"], ns, where)
            if doc["kind"] == "Deployment" and doc["spec"].get("progressDeadlineSeconds", 600) < 3600:
                doc["spec"]["progressDeadlineSeconds"] = 3600  # Pods wait for another Pod's build
            found.append(where)
    names = {f.split("/", 1)[1] for f in found} | set(found)
    missing = [t for t in ns.targets if t not in names]
    if missing:
        raise Refused(f"no {'/'.join(WORKLOADS)} matches {missing} in the rendered chart")
    return docs


def main(argv: list[str] | None = None) -> int:
    try:
        ns = parse(sys.argv[1:] if argv is None else argv, dict(os.environ))
        docs = render(list(yaml.safe_load_all(sys.stdin)), ns)
    except Refused as exc:
        print(f"trtwarm post-renderer: {exc}", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        print(f"trtwarm post-renderer: the input is not YAML: {exc}", file=sys.stderr)
        return 2
    yaml.safe_dump_all([d for d in docs if d is not None], sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
