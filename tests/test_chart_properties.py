"""Issue 28: a property test over random value combinations of the chart (500, as the review used), rendered by
Helm's engine for a Kubernetes version it draws (1.29-1.37). Every render that succeeds is valid for that version,
names its objects uniquely and within their limits, and points every probe at a port its container has; a render that could
never become Ready (a renamed port under the probe, a read-only consumer on a private emptyDir cache, the exporter
on a server port) does not pass: it fails at `helm template` time with a message naming the values."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from k8s import objects, render, validate

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (pip install '.[test]')")
st = hypothesis.strategies

SUPPORTED = range(29, 38)
#: names the API server limits to 52 (a suffix is added to them) or to a DNS label (63)
LIMITS = {"CronJob": 52, "StatefulSet": 52}
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: a message that names a value: `cache.type`, `exporter.port=8002`, `workload.container.readinessProbe...`, or
#: the schema's `at '/cache/hostPath/path'`
NAMES_A_VALUE = re.compile(r"\b(workload|engines?|cache|exporter|gc|metrics|trust|remote|handoff|service|init|prewarm)"
                           r"(\.[A-Za-z]+)+|at '/[a-zA-Z]+/")
PRODUCTS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "NVIDIA-A100-SXM4-80GB",
            "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "Tesla-T4", "NVIDIA-L4"]
GPUS = [{"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0", "memoryGiB": 80},
        {"product": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "computeCapability": 9.0, "memoryGiB": 10},
        {"product": "NVIDIA L4", "computeCapability": "8.9", "memoryGiB": 22}]
RELEASES = st.one_of(st.sampled_from(["rel", "r" * 53, "trtwarm", "my-trtwarm", "a"]),
                     st.from_regex(r"[a-z][a-z0-9-]{0,51}[a-z0-9]", fullmatch=True))


@st.composite
def chart_values(draw: Any) -> dict[str, Any]:
    """One combination of the values users set most, with the ones the review found breaking weighted in."""
    port_name = draw(st.sampled_from(["http", "http", "http", "http", "web"]))
    probe_port = draw(st.sampled_from(["http", "http", "http", 8000, "metrics"]))
    container: dict[str, Any] = {
        "ports": [{"name": port_name, "containerPort": 8000}, {"name": "grpc", "containerPort": 8001}],
        # null drops the chart's default probe; a map merges over it (Helm), so a tcpSocket probe nulls httpGet
        "readinessProbe": draw(st.sampled_from([None, {"httpGet": {"path": "/v2/health/ready", "port": probe_port}},
                                                {"httpGet": None, "tcpSocket": {"port": probe_port}}])),
        "resources": draw(st.sampled_from([{"limits": {"nvidia.com/gpu": 1}},
                                           {"limits": {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu": None}},
                                           {"limits": {"nvidia.com/gpu": None}}]))}
    cache_type = draw(st.sampled_from(["pvc", "pvc", "hostPath", "emptyDir"]))
    cache: dict[str, Any] = {"type": cache_type}
    if cache_type == "hostPath":
        cache["hostPath"] = {"path": draw(st.sampled_from(["/var/lib/trtwarm/cache", "/data/engines", "/", "/etc",
                                                           "/var/lib"])),
                             "type": draw(st.sampled_from(["Directory", "DirectoryOrCreate"]))}
        cache["fixPermissions"] = {"enabled": draw(st.booleans())}
    if cache_type == "pvc":
        cache["pvc"] = {"existingClaim": draw(st.sampled_from(["", "engines-rwx", "shared #nfs"])),
                        "accessModes": draw(st.sampled_from([["ReadWriteMany"], ["ReadWriteOnce"]]))}
    trust_mode = draw(st.sampled_from(["off", "off", "warn", "enforce"]))
    trust: dict[str, Any] = {"mode": trust_mode, "role": draw(st.sampled_from(["builder", "consumer"]))}
    if trust_mode != "off":
        trust["keys"] = [{"name": "ci", "public_key_file": "ci.pub", "models": ["m*"]}]
        if draw(st.booleans()):
            trust["signingKey"] = {"existingSecret": "signing"}
    remote: dict[str, Any] = {}
    if draw(st.booleans()):
        remote = {"url": "s3://engines/prod", "pullOnly": draw(st.booleans()),
                  "credentials": {"secretName": draw(st.sampled_from(["", "s3-creds"]))}}
        if draw(st.booleans()):
            remote["prebuild"] = {"enabled": True, "gpuProducts": draw(st.lists(st.sampled_from(PRODUCTS), min_size=1,
                                                                                max_size=3, unique=True)),
                                  "matrix": {"models": [{"model": draw(st.sampled_from(["a.onnx", "b #1.onnx"]))}]}}
    gc_mode = draw(st.sampled_from(["none", "sidecar", "cronjob"]))
    metrics_on = draw(st.booleans())
    digest = f"r.example/e@sha256:{'a' * 64}"
    engines = {"image": {"reference": draw(st.sampled_from(["", "", "", "registry.example/e:1", digest])),
                         "mode": draw(st.sampled_from(["volume", "copy", "copy"])),
                         "imageVolumeFeatureGate": draw(st.booleans()),  # stated on: 1.33-1.34 take image volumes
                         "mountPath": draw(st.sampled_from(["/trtwarm-engines"] * 5 + ["/models", "/trtwarm/triton",
                                                                                      "/tmp", "/engines"]))}}
    prewarm: dict[str, Any] = {"enabled": draw(st.sampled_from([False, False, False, True]))}
    if prewarm["enabled"]:
        prewarm["gpus"] = draw(st.lists(st.sampled_from(GPUS), min_size=draw(st.sampled_from([0, 1, 1])), max_size=3,
                                        unique_by=lambda g: g["product"]))  # none: refused, naming prewarm.gpus
        prewarm["matrix"] = {"models": [{"model": "a.onnx"}]}
        if draw(st.sampled_from([True, True, False])):  # mostly a pre-warm that can work: a node cache, a repository
            cache.update(type="hostPath", hostPath={"path": "/var/lib/trtwarm/cache", "type": "Directory"})
            remote.setdefault("url", "oci://registry.example/engines")
        if remote:
            remote["tensorrtVersion"] = draw(st.sampled_from(["", "10.16.1.11+cu12", "10.16.1.11+cu12"]))
    return {
        "nameOverride": draw(st.sampled_from(["", "", "warm", "x" * 60])),
        "workload": {"kind": draw(st.sampled_from(["Deployment", "StatefulSet"])), "replicas": draw(st.integers(0, 3)),
                     "extraContainers": draw(st.sampled_from([[], [], [], [{"name": "proxy", "image": "envoy:1"}],
                                                              [{"name": "trtwarm-exporter", "image": "x:1"}]])),
                     "podDisruptionBudget": {"enabled": draw(st.booleans()),
                                             "minAvailable": draw(st.sampled_from([""] * 6 + [1, "50%", "100%"]))},
                     "container": container,
                     "runtimeClassName": draw(st.sampled_from(["", "nvidia"]))},
        "engine": {"builder": draw(st.sampled_from(["tensorrt", "onnxruntime"])),
                   "verify": draw(st.sampled_from(["digest", "stamp", "load"])), "readOnly": draw(st.booleans()),
                   "keyExtra": draw(st.dictionaries(st.sampled_from(["date", "note", "v"]),
                                                    st.one_of(st.integers(0, 10**11), st.sampled_from(["a #b", "y"])),
                                                    max_size=2)),
                   "tensorrt": {"plugins": draw(st.sampled_from([[], ["/opt/p.so"]]))}},
        "cache": cache,
        "exporter": {"enabled": draw(st.booleans()) or gc_mode != "none" or metrics_on,
                     "mode": draw(st.sampled_from(["native", "native", "legacy"])),
                     "port": draw(st.sampled_from([9400] * 6 + [8000, 8001, 8002, 9090]))},
        "gc": {"mode": gc_mode},
        "metrics": {"enabled": metrics_on, "kind": draw(st.sampled_from(["PodMonitor", "ServiceMonitor"])),
                    "rules": {"enabled": draw(st.booleans())}},
        "rbac": {"events": draw(st.booleans())},
        "serviceAccount": {"create": draw(st.booleans())},
        "service": {"enabled": draw(st.booleans())},
        "trust": trust,
        "remote": remote,
        "engines": engines,
        "prewarm": prewarm,
    }


def never_ready(values: dict[str, Any]) -> list[str]:
    """What makes a combination unable to ever become Ready, worked out independently of the templates."""
    why = []
    c = values["workload"]["container"]
    names = [p["name"] for p in c["ports"]]
    for how in ("httpGet", "tcpSocket"):
        port = ((c.get("readinessProbe") or {}).get(how) or {}).get("port")
        if isinstance(port, str) and port not in names:
            why.append("workload.container.readinessProbe")
    if values["exporter"]["enabled"] and values["exporter"]["port"] in (8000, 8001, 8002):
        why.append("exporter.port")
    remote = values["remote"]
    if values["cache"]["type"] == "emptyDir":
        if values["trust"]["role"] == "consumer" and not (remote.get("url") and remote.get("pullOnly")):
            why.append("trust.role")
        if values["engine"]["readOnly"] and not remote.get("url"):
            why.append("engine.readOnly")
    return why


def check_render(values: dict[str, Any], release: str, minor: int) -> str:
    """Render for Kubernetes 1.*minor*; check a success as that version's API server would take it, or a failure's
    message. Returns the outcome."""
    blockers = never_ready(values)
    try:
        rendered = render(values, name=release, kube_version=f"v1.{minor}.0")
    except helm.HelmError as exc:
        message = str(exc)
        assert NAMES_A_VALUE.search(message), message  # (the first guard that fires may be another one)
        return "refused for never-Ready" if any(b in message for b in blockers) else "refused"
    assert not blockers, f"{blockers} can never become Ready, yet it rendered"
    objs = objects(rendered)
    assert validate(objs, [minor]) == []
    seen = set()
    for obj in objs:
        name = obj["metadata"]["name"]
        assert (obj["kind"], name) not in seen, (obj["kind"], name)
        seen.add((obj["kind"], name))
        assert len(name) <= LIMITS.get(obj["kind"], 63) and DNS_LABEL.fullmatch(name), (obj["kind"], name)
        for key, value in (obj["metadata"].get("labels") or {}).items():
            assert len(str(value)) <= 63, (key, value)
        for spec in _pod_specs(obj):
            _check_probes(spec)
    return "rendered"


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet"):
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "CronJob":
        return [obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    return [obj["spec"]] if obj["kind"] == "Pod" else []


def _check_probes(spec: dict[str, Any]) -> None:
    """Container and volume names are unique in the Pod (the API server's rule, beyond the schema), and every probe
    names a port its container has (a number is any port the process listens on)."""
    names = [c["name"] for c in spec.get("initContainers", []) + spec["containers"]]
    volumes = [v["name"] for v in spec.get("volumes", [])]
    assert len(set(names)) == len(names) and len(set(volumes)) == len(volumes), (names, volumes)
    for c in spec.get("initContainers", []) + spec["containers"]:
        ports = {p.get("name") for p in c.get("ports", [])}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            for how in ("httpGet", "tcpSocket", "grpc"):
                port = ((c.get(kind) or {}).get(how) or {}).get("port")
                assert not isinstance(port, str) or port in ports, (c["name"], kind, port, ports)


def test_500_random_value_combinations_render_valid_or_fail_naming_the_values() -> None:
    outcomes: dict[str, int] = {}
    started = time.monotonic()

    @hypothesis.settings(max_examples=500, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(chart_values(), RELEASES, st.sampled_from(SUPPORTED))
    def check(values: dict[str, Any], release: str, minor: int) -> None:
        outcome = check_render(values, release, minor)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    check()
    assert outcomes.get("rendered", 0) >= 100 and outcomes.get("refused for never-Ready", 0) >= 50, outcomes
    print(f"chart property test: {outcomes} in {time.monotonic() - started:.1f} s")
