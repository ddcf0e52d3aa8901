"""The chart on the clusters users run (../shared/reference/bad-day.md, "A cluster"): every Kubernetes minor version
the chart claims, a field the API server drops while a feature gate is off, the Pod Security level each mode needs,
mounts that overlap, images under an air gap, quotas that require resources, disruption budgets, names the API server
would refuse, and the pre-warm DaemonSets' day-two values. Rendered by Helm's engine for the version at hand
(`--kube-version`) and validated with that version's OpenAPI schema (kubernetes-validate)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s import CHART, SCHEMA_MINORS, container, objects, pod_spec, render, validate, workload
from pss import baseline, restricted

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
IMAGE = "registry.example/ml/engines:2026.12"
DIGEST = "sha256:" + "ab" * 32
H100 = {"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0", "memoryGiB": 80}
PREWARM = {"cache": {"type": "hostPath", "hostPath": {"type": "Directory"}},
           "remote": {"url": "s3://engines/prod", "tensorrtVersion": "10.16.1.11+cu12"},
           "prewarm": {"enabled": True, "gpus": [H100],
                       "matrix": {"models": [{"model": "resnet50.onnx"}], "precision": ["fp16"]}}}


def _version(minor: int) -> str:
    return f"v1.{minor}.0"


def _pod_specs(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every Pod spec the chart renders, by object."""
    out = {}
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            out[name] = o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            out[name] = o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            out[name] = o["spec"]
    return out


# --- every minor version the chart claims ----------------------------------------------------------------------

def test_the_chart_claims_the_versions_the_tests_render() -> None:
    claim = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert claim == ">=1.25.0-0" and SCHEMA_MINORS[0] == 25  # the oldest claimed version has a schema here


@pytest.mark.parametrize("minor", SCHEMA_MINORS)
@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_every_configuration_renders_valid_objects_at_every_claimed_minor_version(minor: int, path: Path | None) -> None:
    """Rendered for that version (`.Capabilities.KubeVersion`), validated with that version's schema; below 1.29
    (no native sidecars) the exporter is a regular container, as the values doc says."""
    values = yaml.safe_load(path.read_text()) if path else {}
    if minor < 29:
        values.setdefault("exporter", {})["mode"] = "legacy"
    objs = objects(render(values, kube_version=_version(minor)))
    assert validate(objs, [minor]) == []
    assert pod_spec(objs)


@pytest.mark.parametrize("minor", range(25, 29))
def test_native_sidecars_are_refused_where_the_version_has_none(minor: int) -> None:
    with pytest.raises(helm.HelmError, match="exporter.mode=native needs Kubernetes 1.29 or newer"):
        render({}, kube_version=_version(minor))


# --- image volumes: only where the API server keeps them --------------------------------------------------------

@pytest.mark.parametrize("minor", SCHEMA_MINORS)
@pytest.mark.parametrize("gate", [False, True], ids=["gate-default", "gate-stated-on"])
def test_an_image_volume_renders_only_where_the_api_server_keeps_it(minor: int, gate: bool) -> None:
    """ImageVolume: alpha 1.31-1.32, beta but off by default 1.33-1.34, on by default 1.35, GA 1.36. Where the gate
    is off the API server silently drops the volume and its mounts and the Pod crash-loops: refused at render time,
    unless the user states the gate is on (1.33-1.34 only); `copy` mode works on every version."""
    values = {"engines": {"image": {"reference": IMAGE, "imageVolumeFeatureGate": gate}},
              "exporter": {"mode": "legacy" if minor < 29 else "native"}}
    keeps = minor >= 35 or (gate and minor >= 33)
    if not keeps:
        with pytest.raises(helm.HelmError, match=rf"engines.image.mode=volume .*{minor}.*engines.image.mode=copy"):
            render(values, kube_version=_version(minor))
        values["workload"] = {"enabled": False}  # a parent chart that includes the templates is refused too
        with pytest.raises(helm.HelmError, match="engines.image.mode=volume"):
            render(values, kube_version=_version(minor))
    else:
        objs = objects(render(values, kube_version=_version(minor)))
        assert validate(objs, [minor]) == []
        spec = pod_spec(objs)
        assert [v for v in spec["volumes"] if "image" in v]
        assert restricted(spec, minor) == []  # the restricted level admits image volumes from 1.33
    values["engines"]["image"]["mode"] = "copy"
    values.pop("workload", None)
    copied = objects(render(values, kube_version=_version(minor)))
    assert validate(copied, [minor]) == [] and restricted(pod_spec(copied), minor) == []


def test_the_minimum_version_is_one_number_in_the_schema_the_values_doc_and_the_changelog() -> None:
    schema = (CHART / "values.schema.json").read_text()
    values = (CHART / "values.yaml").read_text()
    changelog = (CHART.parent.parent / "docs" / "chart-changelog.md").read_text()
    section = changelog[changelog.index("## 0.4.0"):changelog.index("## 0.3.0")]
    for text in (schema, values, section):
        assert "1.35" in text and "1.33-1.34" in text
        assert not re.search(r"1\.3[12]\+|Kubernetes 1\.3[12] ", text), text[:200]


def test_the_pod_security_level_of_each_mode() -> None:
    """restricted: the defaults, an image volume (1.33+), copy mode; baseline: the root container that fixes the
    cache's ownership; privileged: a hostPath cache (and so the pre-warm)."""
    for values in ({}, {"engines": {"image": {"reference": IMAGE}}}, {"engines": {"image": {"reference": IMAGE,
                                                                                           "mode": "copy"}}}):
        for name, spec in _pod_specs(objects(render(values))).items():
            assert restricted(spec, 33) == [], name
    assert restricted(pod_spec(objects(render({"engines": {"image": {"reference": IMAGE,
                                                                      "imageVolumeFeatureGate": True}}},
                                              kube_version="v1.33.0"))), 32) != []  # 1.32's rules refuse it
    fixing = pod_spec(objects(render({"cache": {"fixPermissions": {"enabled": True}}})))
    assert restricted(fixing) and baseline(fixing) == []
    for name, spec in _pod_specs(objects(render(PREWARM))).items():
        assert [v for v in baseline(spec) if "hostPath" not in v] == [], name
    readme = (CHART / "README.md").read_text()
    assert "image volume" in readme[readme.index("## Pod Security"):readme.index("## Readiness")]


# --- mounts ------------------------------------------------------------------------------------------------------

MODEL = {"persistentVolumeClaim": {"claimName": "models"}}


@pytest.mark.parametrize(("values", "message"), [
    ({"engines": {"image": {"mountPath": "/tmp"}}}, "overlaps trtwarm init's /tmp"),
    ({"engines": {"image": {"mountPath": "/tmp/engines"}}}, "overlaps trtwarm init's /tmp"),
    ({"engines": {"image": {"mountPath": "/models"}}}, "overlaps cache.mountPath"),  # docs/oci.md's old example
    ({"engines": {"image": {"mountPath": "/models/cache"}}}, "overlaps cache.mountPath"),
    ({"engines": {"image": {"mountPath": "/models/cache/seed"}}}, "overlaps cache.mountPath"),
    ({"engines": {"image": {"mountPath": "/models/src/"}}, "engine": {"model": {"volume": MODEL}}},
     "overlaps engine.model.mountPath"),
    ({"engines": {"image": {"mountPath": "/trtwarm"}}}, "overlaps handoff.mountPath"),
    ({"engines": {"image": {"mountPath": "/trtwarm/triton"}}}, "overlaps"),
    ({"engines": {"image": {"mountPath": "/srv/x"}}, "handoff": {"mountPath": "/srv"}}, "overlaps handoff.mountPath"),
    ({"engines": {"image": {"mountPath": "/var/lib/trtwarm-stamps"}}, "engine": {
        "verify": "stamp", "stamps": {"hostPath": "/var/lib/trtwarm/stamps"}}}, "overlaps the stamps directory"),
    ({"engines": {"image": {"mountPath": "/etc/trtwarm/e"}}}, "overlaps the trust policy"),
    ({"engines": {"image": {"mountPath": "/data/models"}}, "workload": {"container": {
        "volumeMounts": [{"name": "x", "mountPath": "/data"}]}}}, r"overlaps workload.container.volumeMounts\[0\]"),
    ({"engines": {"image": {"mountPath": "/"}}}, "overlaps"),
    ({"engines": {"image": {"mountPath": "/etc"}}}, "overlaps"),
    ({"engines": {"image": {"mountPath": "/usr"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/usr/local/engines"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/opt"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/dev/shm"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/proc/1"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/var/run/secrets"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/etc/hosts"}}}, "the image or the kubelet own"),
    # the trees an image owns: the init's venv, Triton's install, the CA certificates TLS to the store needs
    ({"engines": {"image": {"mountPath": "/opt/trtwarm"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/opt/tritonserver"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/etc/ssl"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/home/triton-server"}}}, "the image or the kubelet own"),
    ({"engines": {"image": {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}}},
     "the image or the kubelet own"),
    # the model in the init image (no model volume): a mount over its directory, or the file, hides it
    ({"engines": {"image": {"mountPath": "/models/src"}}}, "overlaps engine.model.path"),
    ({"engines": {"image": {"mountPath": "/models/src/model.onnx"}}}, "overlaps engine.model.path"),
    # copy mode mounts a tools emptyDir at /trtwarm-tools beside the engines in the copying container
    ({"engines": {"image": {"mountPath": "/trtwarm-tools", "mode": "copy"}}}, "overlaps copy mode's tools directory"),
    ({"engines": {"image": {"mountPath": "/trtwarm-tools/e", "mode": "copy"}}}, "overlaps copy mode's tools"),
    ({"engines": {"image": {"mountPath": "/x/../tmp"}}}, "overlaps trtwarm init's /tmp"),
    ({"engines": {"image": {"mountPath": "//trtwarm//triton/"}}}, "overlaps handoff.mountPath"),
    ({"cache": {"mountPath": "/trtwarm"}}, "cache.mountPath=\"/trtwarm\" and handoff.mountPath=\"/trtwarm\" overlap"),
    ({"handoff": {"mountPath": "/models/cache/handoff"}}, "overlap"),
    ({"cache": {"mountPath": "/tmp"}}, "overlap"),
    ({"engine": {"model": {"mountPath": "/models", "volume": MODEL}}}, "engine.model.mountPath=\"/models\" overlap"),
    # the other mounts against the chart's own and the paths the kubelet or the image own
    ({"cache": {"mountPath": "/etc/trtwarm"}, "trust": {"mode": "warn", "existingConfigMap": "p"}},
     "cache.mountPath=\"/etc/trtwarm\" and the chart's trust and registry-credential mounts"),
    ({"engine": {"model": {"mountPath": "/etc/trtwarm/models", "volume": MODEL}}}, "engine.model.mountPath"),
    ({"cache": {"mountPath": "/var/lib/trtwarm-stamps"}, "engine": {
        "verify": "stamp", "stamps": {"hostPath": "/var/lib/trtwarm/stamps"}}}, "overlap"),
    ({"handoff": {"mountPath": "/etc"}}, "handoff.mountPath=\"/etc\" is a path the image or the kubelet own"),
    ({"handoff": {"mountPath": "/var/run/secrets"}, "rbac": {"events": True}}, "the image or the kubelet own"),
    ({"cache": {"mountPath": "/usr/local/cache"}}, "cache.mountPath=\"/usr/local/cache\" is a path the image"),
])
def test_a_mount_that_overlaps_another_or_a_path_the_image_or_kubelet_owns_is_refused(values: dict[str, Any],
                                                                                      message: str) -> None:
    values = copy.deepcopy(values)
    if "engines" in values:
        values["engines"]["image"]["reference"] = IMAGE
    with pytest.raises(helm.HelmError, match=message):
        render(values)
    values.setdefault("workload", {})["enabled"] = False
    with pytest.raises(helm.HelmError, match=message.split(" ")[0]):
        render(values)


@pytest.mark.parametrize("path", ["/trtwarm-engines", "/engines", "/var/lib/engines", "/mnt/engines", "/models-seed",
                                  "/trtwarm-seed/x", "/trtwarm-tools"])
@pytest.mark.parametrize("mode", ["volume", "copy"])
def test_a_mount_of_its_own_renders_in_the_init_and_the_server(path: str, mode: str) -> None:
    if mode == "copy" and path == "/trtwarm-tools":
        return  # copy mode's own tools directory (refused above)
    spec = pod_spec(objects(render({"engines": {"image": {"reference": IMAGE, "mountPath": path, "mode": mode}}})))
    for name in ("trtwarm-init", "inference"):
        assert path in [m["mountPath"] for m in container(spec, name)["volumeMounts"]], name
    for c in spec["initContainers"] + spec["containers"]:  # no container mounts two volumes at one path
        mounts = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts", [])]
        assert len(mounts) == len(set(mounts)), (c["name"], mounts)


# --- images: pull policy, mirrors, resources ----------------------------------------------------------------------

@pytest.mark.parametrize(("reference", "policy", "expected"), [
    (IMAGE, "", "Always"), (IMAGE, "IfNotPresent", "Always"), (IMAGE, "Always", "Always"), (IMAGE, "Never", "Never"),
    ("registry.example/ml/engines", "", "Always"), (f"registry.example/ml/engines@{DIGEST}", "", "IfNotPresent"),
    (f"registry.example/ml/engines:2026.12@{DIGEST}", "Always", "Always"),
])
@pytest.mark.parametrize("mode", ["volume", "copy"])
def test_an_engine_image_by_tag_is_always_pulled(reference: str, policy: str, expected: str, mode: str) -> None:
    """The tag moves with every `prebuild --oci-image` push: `IfNotPresent` (also a 0.3.0 release's default, kept by
    `--reuse-values`) would keep on each node whatever it pulled first."""
    spec = pod_spec(objects(render({"engines": {"image": {"reference": reference, "pullPolicy": policy,
                                                          "mode": mode}}})))
    if mode == "volume":
        [volume] = [v for v in spec["volumes"] if v["name"] == "trtwarm-engines"]
        assert volume["image"]["pullPolicy"] == expected
    else:
        assert container(spec, "trtwarm-engines-copy")["imagePullPolicy"] == expected


def _everything(mirror: str = "") -> dict[str, Any]:
    """Every feature that adds a Pod or a container."""
    return {"global": {"imageRegistry": mirror}, "cache": {"type": "hostPath", "hostPath": {"type": "Directory"},
                                                          "fixPermissions": {"enabled": True}},
            "engines": {"image": {"reference": IMAGE, "mode": "copy"}}, "gc": {"mode": "sidecar"},
            "remote": {"url": "s3://engines/prod", "tensorrtVersion": "10.16.1.11+cu12",
                       "prebuild": {"enabled": True, "gpuProducts": ["NVIDIA-H100-80GB-HBM3"],
                                    "matrix": {"models": [{"model": "a.onnx"}]}}},
            "prewarm": {"enabled": True, "gpus": [H100]},
            "workload": {"extraContainers": []}}


def test_every_image_goes_through_the_mirror() -> None:
    """An air-gapped cluster pulls every image from `global.imageRegistry`: the engine image, copy mode's busybox,
    the permission fixer, the pre-warm, the prebuild Jobs."""
    objs = objects(render(_everything("mirror.example:5000")))
    images = [(name, c["name"], c["image"]) for name, spec in _pod_specs(objs).items()
              for c in spec.get("initContainers", []) + spec["containers"]]
    assert len(images) >= 10
    assert [i for i in images if not i[2].startswith("mirror.example:5000/")] == []
    volume = pod_spec(objects(render({"global": {"imageRegistry": "mirror.example:5000"},
                                      "engines": {"image": {"reference": IMAGE}}})))
    [engines] = [v for v in volume["volumes"] if v["name"] == "trtwarm-engines"]
    assert engines["image"]["reference"] == "mirror.example:5000/ml/engines:2026.12"


def test_every_container_the_chart_adds_has_requests_and_a_memory_limit() -> None:
    """A namespace quota on requests or limits refuses a Pod with one container without them."""
    objs = objects(render(_everything()))
    checked = 0
    for name, spec in _pod_specs(objs).items():
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["name"] == "inference":
                continue  # the user's own (workload.container.resources)
            res = c.get("resources") or {}
            assert {"cpu", "memory"} <= set(res.get("requests") or {}), (name, c["name"])
            assert "memory" in (res.get("limits") or {}), (name, c["name"])
            checked += 1
    assert checked >= 9
    fixer = container(pod_spec(objs), "trtwarm-fix-permissions")
    assert fixer["resources"] == {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}


def test_a_quantity_given_as_null_never_reaches_the_api_server() -> None:
    """`nvidia.com/gpu: null` removes the default GPU; where Helm keeps the null (--reuse-values), it is dropped."""
    values = {"workload": {"container": {"resources": {"limits": {"nvidia.com/gpu": None, "memory": "8Gi"}}}},
              "init": {"resources": {"limits": {"memory": None}}}}
    spec = pod_spec(objects(render(values)))
    for c in spec["initContainers"] + spec["containers"]:
        for part in (c.get("resources") or {}).values():
            if isinstance(part, dict):
                assert None not in part.values(), c["name"]


# --- disruption budget ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("replicas", "budget", "expected"), [
    (1, {}, {"maxUnavailable": 1}), (3, {"maxUnavailable": 0}, {"maxUnavailable": 0}),
    (3, {"maxUnavailable": "25%"}, {"maxUnavailable": "25%"}), (3, {"minAvailable": 2}, {"minAvailable": 2}),
    (3, {"minAvailable": "50%"}, {"minAvailable": "50%"}), (1, {"minAvailable": 0}, {"minAvailable": 0}),
    (0, {"minAvailable": 1}, {"minAvailable": 1}),
])
def test_the_disruption_budget_renders_as_given(replicas: int, budget: dict, expected: dict) -> None:
    objs = objects(render({"workload": {"replicas": replicas, "podDisruptionBudget": {"enabled": True, **budget}}}))
    assert validate(objs, [29, 37]) == []
    [pdb] = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == expected
    assert pdb["spec"]["selector"] == workload(objs)["spec"]["selector"]


@pytest.mark.parametrize(("replicas", "min_available"), [(1, 1), (1, "100%"), (1, "50%"), (2, 2), (3, "100%"),
                                                         (3, "67%"), (2, 5)])
def test_a_budget_that_would_block_every_drain_is_refused(replicas: int, min_available: int | str) -> None:
    values = {"workload": {"replicas": replicas, "podDisruptionBudget": {"enabled": True,
                                                                          "minAvailable": min_available}}}
    with pytest.raises(helm.HelmError, match=rf"minAvailable={min_available} with workload.replicas={replicas} keeps "
                                             "every Pod"):
        render(values)


# --- names ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [
    {"workload": {"kind": "StatefulSet", "serviceName": "engines #headless"}},
    {"workload": {"kind": "StatefulSet", "serviceName": "Engines"}},
    {"workload": {"kind": "StatefulSet", "serviceName": "1engines"}},
    {"workload": {"kind": "StatefulSet", "serviceName": "e" * 64}},
    {"trust": {"mode": "warn", "existingConfigMap": "policy #prod"}},
    {"trust": {"mode": "warn", "existingConfigMap": "Policy"}},
    {"trust": {"mode": "warn", "existingConfigMap": "-policy"}},
    {"nameOverride": "warm #1"}, {"nameOverride": "Warm"}, {"nameOverride": "warm-"}, {"nameOverride": "w" * 64},
    {"fullnameOverride": "engines #a"}, {"fullnameOverride": "9engines"}, {"fullnameOverride": "e.x"},
    {"fullnameOverride": "e" * 64},
    # the created ServiceAccount (and the RoleBinding's subject) took the name cut at ` #`, the Pods asked for it whole
    {"serviceAccount": {"create": True, "name": "engines #sa"}, "rbac": {"events": True}},
    {"serviceAccount": {"name": "Engines"}}, {"serviceAccount": {"name": "e" * 254}},
])
def test_a_name_value_the_api_server_would_refuse_is_refused_by_the_schema(values: dict[str, Any]) -> None:
    """Never cut at ` #` (a YAML comment) or by `trunc 63`: refused, naming the value."""
    with pytest.raises(helm.HelmError, match="schema"):
        render(values)


def test_valid_names_reach_the_objects_as_given() -> None:
    objs = objects(render({"workload": {"kind": "StatefulSet", "serviceName": "engines-headless"},
                           "trust": {"mode": "warn", "existingConfigMap": "policy.v2",
                                     "keys": [{"name": "ci", "public_key_file": "ci.pub"}]},
                           "nameOverride": "warm", "fullnameOverride": "gpu-engines"}))
    assert workload(objs)["spec"]["serviceName"] == "engines-headless"
    assert workload(objs)["metadata"]["name"] == "gpu-engines"
    assert {"name": "policy.v2"} in [v.get("configMap") for v in pod_spec(objs)["volumes"]]
    assert validate(objs, [29, 37]) == []
    objs = objects(render({"serviceAccount": {"create": True, "name": "engines.sa-1"}, "rbac": {"events": True}}))
    [account] = [o for o in objs if o["kind"] == "ServiceAccount"]
    [binding] = [o for o in objs if o["kind"] == "RoleBinding"]
    assert account["metadata"]["name"] == binding["subjects"][0]["name"] == pod_spec(objs)["serviceAccountName"] \
        == "engines.sa-1"


# --- the pre-warm DaemonSets on day two -----------------------------------------------------------------------------

def _daemonsets(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == "DaemonSet"]


def test_prewarm_daemonsets_roll_every_node_at_once_and_take_priority_affinity_and_tolerations() -> None:
    values = copy.deepcopy(PREWARM)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["inference"]}]}]}}}
    values["prewarm"].update({"priorityClassName": "node-warmers", "affinity": affinity,
                              "tolerations": [{"key": "dedicated", "operator": "Exists"}]})
    [ds] = _daemonsets(objects(render(values)))
    # all nodes re-pull in parallel; Helm 3's --wait expects desired - maxUnavailable = 0 Ready: it does not wait
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "node-warmers" and spec["affinity"] == affinity
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    values["prewarm"]["updateStrategy"] = {"type": "OnDelete"}
    [ds] = _daemonsets(objects(render(values)))
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}


@pytest.mark.parametrize("strategy", [{"typ": "OnDelete"}, {"type": "Rolling"},
                                      {"rollingUpdate": {"maxunavailable": 1}}, {"rollingUpdate": {"maxUnavailable": "x"}}])
def test_a_misspelt_prewarm_update_strategy_is_refused_not_dropped(strategy: dict[str, Any]) -> None:
    """A field the API server does not know is dropped with a warning at most: the DaemonSets would keep rolling one
    node at a time behind a value that reads as set."""
    values = copy.deepcopy(PREWARM)
    values["prewarm"]["updateStrategy"] = strategy
    with pytest.raises(helm.HelmError, match="updateStrategy"):
        render(values)


def test_two_products_and_a_mig_slice_are_three_daemonsets_that_never_share_a_pod() -> None:
    values = copy.deepcopy(PREWARM)
    values["prewarm"]["gpus"] = [
        H100, {"product": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "computeCapability": "9.0", "memoryGiB": 10},
        {"product": "NVIDIA A100-SXM4-80GB", "computeCapability": 8.0, "memoryGiB": 80},
        {"product": "NVIDIA A100-SXM4-80GB MIG 2g.20gb", "computeCapability": "8.0", "memoryGiB": 20,
         "nodeSelector": {"nvidia.com/mig-2g.20gb.product": "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"}}]
    objs = objects(render(values, name="r" * 53))
    assert validate(objs, [29, 37]) == []
    sets = _daemonsets(objs)
    assert len({d["metadata"]["name"] for d in sets}) == 4
    assert all(len(d["metadata"]["name"]) <= 63 for d in sets)
    pins = [d["spec"]["template"]["spec"]["nodeSelector"] for d in sets]
    assert pins[1]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"  # GFD's MIG `single` label
    assert pins[3] == {"nvidia.com/mig-2g.20gb.product": "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"}  # `mixed`, as given
    assert "--gpu-compute-capability=8.0" in container(sets[2]["spec"]["template"]["spec"],
                                                       "trtwarm-prewarm")["command"]
    for d in sets:  # no DaemonSet's selector matches another's Pods
        selector = d["spec"]["selector"]["matchLabels"]
        matches = [o for o in sets if selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()]
        assert matches == [d]


#: GPU Feature Discovery's labels of a node (k8s-device-plugin internal/lm: resource.go, mig-strategy.go): the NVML
#: name with spaces as `-`; under MIG `single` the slice's `<GPU>-MIG-<profile>` overrides `gpu.product`; under `mixed`
#: `gpu.product` stays the whole GPU's and each profile gets `mig-<profile>.product` (a `+` in a profile becomes `.`).
#: `nvidia.com/gpu.present` is the GPU Operator's label: a cluster with the device plugin and GFD alone lacks it.
NODES = {
    "cpu": {"kubernetes.io/os": "linux"},
    "h100-gfd-only": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
    "h100-operator": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "h100-mig-single": {"nvidia.com/gpu.present": "true", "nvidia.com/mig.strategy": "single",
                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"},
    "h100-mig-mixed": {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                       "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                       "nvidia.com/mig-1g.10gb.me.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"},
    "a100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
}
MIG = {"product": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "computeCapability": "9.0", "memoryGiB": 10}
MIG_ME = {"product": "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "computeCapability": "9.0", "memoryGiB": 10}
A100 = {"product": "NVIDIA A100-SXM4-80GB", "computeCapability": "8.0", "memoryGiB": 80}


@pytest.mark.parametrize(("strategy", "expected"), [
    ("single", {"cpu": set(), "h100-gfd-only": {"h100"}, "h100-operator": {"h100"}, "h100-mig-single": {"mig"},
                "h100-mig-mixed": {"h100"}, "a100": {"a100"}}),
    # under mixed the whole GPU's label stays on a MIG node: its class lands there too (it pulls, never keys wrong)
    ("mixed", {"cpu": set(), "h100-gfd-only": {"h100"}, "h100-operator": {"h100"}, "h100-mig-single": set(),
               "h100-mig-mixed": {"h100", "mig", "mig-me"}, "a100": {"a100"}}),
])
def test_each_gpu_node_gets_the_prewarm_of_its_own_gpu_classes_under_either_mig_strategy(
        strategy: str, expected: dict[str, set[str]]) -> None:
    """Scheduled as the DaemonSet controller places them (every nodeSelector label on the node): GFD's labels alone
    suffice, a node without a GPU gets none, a MIG node gets its slice's class under the strategy stated."""
    values = copy.deepcopy(PREWARM)
    values["prewarm"].update({"gpus": [H100, MIG, MIG_ME, A100], "migStrategy": strategy})
    classes = {H100["product"]: "h100", MIG["product"]: "mig", MIG_ME["product"]: "mig-me", A100["product"]: "a100"}
    objs = objects(render(values))
    assert validate(objs, [29, 37]) == []
    placed = {node: {classes[d["metadata"]["annotations"]["trtwarm.io/gpu-product"]] for d in _daemonsets(objs)
                     if d["spec"]["template"]["spec"]["nodeSelector"].items() <= labels.items()}
              for node, labels in NODES.items()}
    assert placed == expected


@pytest.mark.parametrize(("given", "flag"), [(9, "9.0"), (9.0, "9.0"), ("9.0", "9.0"), (8.9, "8.9"), ("8.9", "8.9"),
                                             (12.1, "12.1"), (10, "10.0")])
def test_a_compute_capability_reaches_the_prewarm_as_major_dot_minor(given: Any, flag: str) -> None:
    """`trtwarm prewarm` takes MAJOR.MINOR only (a bare `9` exits 2 on every node): a whole number, from a values file
    (a float to Helm) or `--set ...computeCapability=9` (an int), is printed with its `.0`."""
    values = copy.deepcopy(PREWARM)
    values["prewarm"]["gpus"] = [{**H100, "computeCapability": given}]
    [ds] = _daemonsets(objects(render(values)))
    assert f"--gpu-compute-capability={flag}" in container(ds["spec"]["template"]["spec"], "trtwarm-prewarm")["command"]


def test_a_gpu_class_whose_label_gfd_could_not_make_needs_its_own_node_selector() -> None:
    values = copy.deepcopy(PREWARM)
    values["prewarm"]["gpus"] = [{**H100, "product": "NVIDIA H100 (engineering sample)"}]
    with pytest.raises(helm.HelmError, match=r"prewarm.gpus\[0\]: nvidia.com/gpu.product=.*give its nodeSelector"):
        render(values)
    values["prewarm"]["gpus"][0]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    [ds] = _daemonsets(objects(render(values)))
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}


def test_a_prewarm_without_a_model_volume_is_told_every_row_will_fail() -> None:
    """The key holds the models' digests, and a pre-warm Pod mounts only engine.model.volume: without it every row
    fails on every node (the model does not exist there); the install notes say so and what to set."""
    def notes(values: dict[str, Any]) -> str:
        return next(t for p, t in render(values).items() if p.endswith("NOTES.txt"))

    values = copy.deepcopy(PREWARM)
    assert "engine.model.volume is empty" in notes(values)
    [ds] = _daemonsets(objects(render(values)))
    assert "trtwarm-model" not in [v["name"] for v in ds["spec"]["template"]["spec"]["volumes"]]
    values["engine"] = {"model": {"volume": {"persistentVolumeClaim": {"claimName": "models"}}}}
    assert "engine.model.volume is empty" not in notes(values)


def test_prewarm_pods_keep_the_workload_identity_token_for_the_container_that_pulls_only() -> None:
    values = copy.deepcopy(PREWARM)
    values["cache"]["fixPermissions"] = {"enabled": True}
    [ds] = _daemonsets(objects(render(values)))
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    spec = ds["spec"]["template"]["spec"]
    names = {c["name"] for c in spec["initContainers"] + spec["containers"]}
    assert set(annotations["eks.amazonaws.com/skip-containers"].split(",")) == names - {"trtwarm-prewarm"}
    values["remote"]["credentials"] = {"secretName": "s3"}  # a Secret reaches the puller only (envFrom)
    [ds] = _daemonsets(objects(render(values)))
    assert "eks.amazonaws.com/skip-containers" not in ds["spec"]["template"]["metadata"]["annotations"]
    assert container(ds["spec"]["template"]["spec"], "trtwarm-prewarm")["envFrom"] == [{"secretRef": {"name": "s3"}}]


@pytest.mark.parametrize("kind", ["PodMonitor", "ServiceMonitor"])
def test_a_monitor_scrapes_the_prewarm_pods_and_only_them(kind: str) -> None:
    values = copy.deepcopy(PREWARM)
    values["metrics"] = {"enabled": True, "kind": kind, "labels": {"release": "kube-prometheus-stack"}}
    objs = objects(render(values))
    assert validate(objs, [29, 37]) == []
    [ds] = _daemonsets(objs)
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    workload_labels = workload(objs)["spec"]["template"]["metadata"]["labels"]
    monitors = [o for o in objs if o["kind"] == kind]
    [mine] = [m for m in monitors if m["metadata"]["name"].endswith("-prewarm")]
    assert mine["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = mine["spec"]["selector"]["matchLabels"]
    if kind == "PodMonitor":
        assert selector.items() <= pod_labels.items() and not selector.items() <= workload_labels.items()
        assert mine["spec"]["podMetricsEndpoints"][0]["port"] == "trtwarm-metrics"
    else:
        [service] = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"].endswith("prewarm-metrics")]
        assert selector.items() <= service["metadata"]["labels"].items()
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert not service["spec"]["selector"].items() <= workload_labels.items()
        assert service["spec"]["clusterIP"] == "None"
        assert mine["spec"]["endpoints"][0]["port"] == "trtwarm-metrics"
        others = [m for m in monitors if m is not mine]
        for other in others:  # the workload's monitor does not pick the pre-warm Service
            assert not other["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = [p["name"] for p in container(ds["spec"]["template"]["spec"], "trtwarm-exporter")["ports"]]
    assert "trtwarm-metrics" in ports
    relabel = (mine["spec"].get("podMetricsEndpoints") or mine["spec"]["endpoints"])[0]["relabelings"]
    assert relabel[0]["replacement"] == "hostPath/$1"  # one series per node cache
