"""Helpers for the chart and manifest tests: render with the real Helm engine, validate, and read Pod specs."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "trtwarm"
#: Kubernetes minor versions whose schemas kubernetes-validate ships (1.25 ... 1.37)
SCHEMA_MINORS = range(25, 38)
CRD_REQUIRED = {  # prometheus-operator CRDs: not in the OpenAPI bundle; their required fields are checked here
    "PodMonitor": ("spec.selector", "spec.podMetricsEndpoints"),
    "ServiceMonitor": ("spec.selector", "spec.endpoints"),
    "PrometheusRule": ("spec.groups",),
}


def render(values: dict[str, Any] | None = None, chart: Path = CHART, name: str = "rel",
           namespace: str = "ml", kube_version: str | None = None) -> dict[str, str]:
    """Render *chart* with *values* for Kubernetes *kube_version* (``helm template --kube-version``; default: the
    engine's own, 1.36 for Helm 4.2): the ``helm`` CLI when it is on PATH, else Helm's Go SDK (helm-python-sdk)."""
    if shutil.which("helm"):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values_file:
            values_file.write(yaml.safe_dump(values or {}))
            values_file.flush()
            version = ["--kube-version", kube_version] if kube_version else []
            out = subprocess.run(["helm", "template", name, str(chart), "-n", namespace, "-f", values_file.name,
                                  *version], capture_output=True, text=True, check=True).stdout
        return {f"doc{i}": doc for i, doc in enumerate(out.split("\n---\n"))}
    import helm_python as helm

    loaded = helm.Chart.load(str(chart))
    if kube_version is None:
        return loaded.render(values or {}, name=name, namespace=namespace)
    # the SDK's render takes the engine's options as JSON; Chart.render does not pass kube_version on (0.2.2)
    import json

    from helm_python import _native

    options = {"name": name, "namespace": namespace, "kube_version": kube_version}
    return json.loads(_native.call_string("helm_render", loaded._raw(), json.dumps(values or {}), json.dumps(options)))


def objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """The Kubernetes objects in rendered templates (NOTES.txt and empty documents dropped)."""
    out = []
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            continue
        out += [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict) and doc.get("kind")]
    return out


def manifests(path: Path) -> list[dict[str, Any]]:
    """The objects of a YAML file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict) and doc.get("kind")]


def validate(objs: list[dict[str, Any]], minors: range | list[int] = SCHEMA_MINORS) -> list[str]:
    """Validate against the Kubernetes OpenAPI schema of each minor version (strict: no unknown fields).

    The schemas are kubernetes-validate's own; each (version, kind) validator is built once and an object already
    found valid is not checked again, so a property test can validate hundreds of renders."""
    import json

    errors = []
    for obj in objs:
        if obj["kind"] in CRD_REQUIRED:
            errors += [f"{obj['kind']}: missing {field}" for field in CRD_REQUIRED[obj["kind"]]
                       if _dig(obj, field) is None]
            continue
        text = json.dumps(obj, sort_keys=True)
        for minor in minors:
            if (minor, text) in _VALID:
                continue
            error = next(iter(_validator(minor, obj["kind"], obj["apiVersion"]).iter_errors(obj)), None)
            if error is None:
                _VALID.add((minor, text))
            else:
                errors.append(f"1.{minor} {obj['kind']}/{obj['metadata']['name']}: {error.message.splitlines()[0]}"
                              f" at {'.'.join(map(str, error.absolute_path))}")
    return errors


_VALID: set[tuple[int, str]] = set()


@functools.lru_cache(maxsize=None)
def _validator(minor: int, kind: str, api_version: str) -> Any:
    """kubernetes-validate's strict schema of *kind* for Kubernetes 1.*minor*, compiled once."""
    import jsonschema
    import kubernetes_validate.utils as kv
    from packaging.version import Version
    from referencing import Registry, Resource

    version = [v for v in kv.all_versions() if Version(kv.major_minor(v)) <= Version(f"1.{minor}")][-1]
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = _schema_file(f"{directory}/{kind.lower()}-{api}.json")
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_schema_file(f"{directory}/_definitions.json")) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.lru_cache(maxsize=None)
def _schema_file(name: str) -> Any:
    import json

    import importlib_resources

    return json.loads(importlib_resources.files("kubernetes_validate").joinpath(name).read_text())


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def workload(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Deployment or StatefulSet."""
    [found] = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    return found


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The workload's Pod spec."""
    return workload(objs)["spec"]["template"]["spec"]


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """A container or init container by name."""
    [found] = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    return found


def mounts(c: dict[str, Any]) -> dict[str, str]:
    """volume name -> mountPath."""
    return {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}


def flag(c: dict[str, Any], name: str) -> str | None:
    """The value of ``--name=value`` in a container's args."""
    for arg in c.get("args", []):
        match = re.fullmatch(rf"--{re.escape(name)}=(.*)", str(arg))
        if match:
            return match[1]
    return None


def gpu(c: dict[str, Any]) -> dict[str, str]:
    """The nvidia.com/* limits of a container."""
    limits = (c.get("resources") or {}).get("limits") or {}
    return {k: str(v) for k, v in limits.items() if k.startswith("nvidia.com/")}


def assert_wired(spec: dict[str, Any], main: str, init: str = "trtwarm-init", exporter: str | None = "trtwarm-exporter",
                 native: bool = True) -> None:
    """What every trtwarm Pod needs, wherever its manifest came from."""
    inits = [c["name"] for c in spec.get("initContainers", [])]
    assert init in inits and main in [c["name"] for c in spec["containers"]]
    i, m = container(spec, init), container(spec, main)
    assert gpu(i) == gpu(m), f"init GPUs {gpu(i)} != main GPUs {gpu(m)}"  # none for a CPU server
    cache_dir, handoff_dir = flag(i, "cache-dir"), flag(i, "handoff-dir")
    cache_vol = next(n for n, p in mounts(i).items() if p == cache_dir)
    handoff_vol = next(n for n, p in mounts(i).items() if p == handoff_dir)
    assert mounts(m).get(cache_vol) == cache_dir and mounts(m).get(handoff_vol) == handoff_dir
    env = {e["name"]: e.get("value") for e in m.get("env", [])}
    assert env["TRTWARM_ENGINE"] == f"{handoff_dir}/engine"
    if exporter is None:
        return
    e = container(spec, exporter)
    # Ready once the engine is handed over, checked by the kubelet (not by the exporter's memory, lost on a restart)
    # in the hand-off only: the link (-L, never followed into the cache volume) or, handed over as a copy, the file
    test_op, path = e["readinessProbe"]["exec"]["command"][1:]
    assert e["readinessProbe"]["exec"]["command"][0] == "test" and path == f"{handoff_dir}/engine"
    assert test_op == ("-s" if "--handoff=copy" in i["args"] else "-L")
    assert e["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = e["livenessProbe"]["httpGet"]["port"]
    assert port in [p["name"] for p in e["ports"]] or port in [p["containerPort"] for p in e["ports"]]
    assert mounts(e)[cache_vol] == cache_dir and mounts(e)[handoff_vol] == handoff_dir
    if native:
        # first, or right after the root init that fixes the cache's ownership (which must finish before it reads)
        assert [n for n in inits if n != "trtwarm-fix-permissions"][0] == exporter and e["restartPolicy"] == "Always"
        assert inits.index(exporter) < inits.index(init)
    else:
        assert exporter in [c["name"] for c in spec["containers"]] and "restartPolicy" not in e
