"""The chart's engine images (a read-only seed tier: an image volume, or copied by the image's own init container
where image volumes are missing) and node pre-warm DaemonSets (one per GPU class); rendered by Helm's engine and
checked as the objects the API server would get. tests/test_chart_clusters.py has the cluster cases (versions, Pod
Security, mounts); tests/test_prewarm_chart.py runs the rendered pre-warm."""

from __future__ import annotations

import copy

import pytest

from k8s import CHART, container, flag, mounts, objects, pod_spec, render, validate

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
IMAGE = "registry.example/ml/engines:2026.12"
H100 = {"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0", "memoryGiB": 80}
PREWARM = {"cache": {"type": "hostPath", "hostPath": {"type": "Directory"}},
           "remote": {"url": "oci://registry.example/ml/engines", "tensorrtVersion": "10.16.1.11+cu12"},
           "engine": {"model": {"volume": {"persistentVolumeClaim": {"claimName": "models"}}}},
           "prewarm": {"enabled": True, "matrix": {"models": [{"model": "resnet50.onnx"}], "precision": ["fp16"]},
                       "gpus": [H100]}}


def _objects(values: dict) -> list[dict]:
    return objects(render(values))


def _daemonset(objs: list[dict]) -> dict:
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet"]
    return ds


def test_an_engine_image_is_an_image_volume_the_init_reads_as_a_seed_tier() -> None:
    objs = _objects({"engines": {"image": {"reference": IMAGE, "pullPolicy": "Always"}}})
    assert validate(objs, [35, 36, 37]) == []  # image volumes: on by default from 1.35
    spec = pod_spec(objs)
    (volume,) = [v for v in spec["volumes"] if v["name"] == "trtwarm-engines"]
    assert volume["image"] == {"reference": IMAGE, "pullPolicy": "Always"}  # a tag moves: always pulled
    init = container(spec, "trtwarm-init")
    assert flag(init, "seed-cache") == "/trtwarm-engines/cache"  # the image's layer holds cache/VERSION
    (mount,) = [m for m in init["volumeMounts"] if m["name"] == "trtwarm-engines"]
    assert mount == {"name": "trtwarm-engines", "mountPath": "/trtwarm-engines", "readOnly": True}
    assert "trtwarm-engines" not in mounts(container(spec, "trtwarm-exporter"))  # only the init reads it
    assert flag(container(spec, "trtwarm-init"), "seed-cache") is not None
    assert "--seed-cache" not in str(_objects({}))  # off by default


def test_without_image_volumes_the_engine_image_copies_its_tree_into_an_empty_dir_first() -> None:
    objs = _objects({"engines": {"image": {"reference": IMAGE, "mode": "copy"}}})
    assert validate(objs, [29, 33, 37]) == []  # no image volume: valid on every supported version
    spec = pod_spec(objs)
    names = [c["name"] for c in spec["initContainers"]]
    assert names.index("trtwarm-engines-tools") < names.index("trtwarm-engines-copy") < names.index("trtwarm-init")
    copier = container(spec, "trtwarm-engines-copy")
    assert copier["image"] == IMAGE  # the engine image itself, run with the static cp the tools container left
    assert copier["command"] == ["/trtwarm-tools/busybox", "cp", "-R", "/cache", "/trtwarm-engines/"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["trtwarm-engines"] and "image" not in volumes["trtwarm-engines"]
    assert flag(container(spec, "trtwarm-init"), "seed-cache") == "/trtwarm-engines/cache"


def test_engine_image_values_that_cannot_work_are_refused_at_render_time(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(helm.errors.HelmError, match="engines.image.mountPath=\"/models/cache\" overlaps cache"):
        render({"engines": {"image": {"reference": IMAGE, "mountPath": "/models/cache"}}})
    # lint takes a Kubernetes version too and logs a template's `fail` on stderr
    helm.lint(str(CHART), {"engines": {"image": {"reference": IMAGE}}}, kube_version="v1.30.0")
    assert "engines.image.mode=volume needs Kubernetes 1.35 or newer" in capfd.readouterr().err
    copying = helm.lint(str(CHART), {"engines": {"image": {"reference": IMAGE, "mode": "copy"}}},
                        kube_version="v1.30.0")
    assert copying["errors"] == [] and "needs Kubernetes" not in capfd.readouterr().err
    with pytest.raises(helm.errors.HelmError, match="mode"):
        render({"engines": {"image": {"reference": IMAGE, "mode": "mount"}}})


def test_prewarm_runs_on_the_gpu_nodes_of_its_class_without_any_gpu_access_and_exports_what_the_node_holds() -> None:
    objs = _objects(PREWARM)
    assert validate(objs, [29, 33, 37]) == []
    ds = _daemonset(objs)
    spec = ds["spec"]["template"]["spec"]
    # pinned by GPU Feature Discovery's label: a node without this GPU (or without any) gets no pre-warm Pod; not by
    # the GPU Operator's nvidia.com/gpu.present, which GFD alone does not set
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pull = container(spec, "trtwarm-prewarm")
    assert pull["command"] == ["trtwarm", "prewarm", "--matrix=/etc/trtwarm/matrix/matrix.json",
                               "--cache-dir=/models/cache", "--gpu-product=NVIDIA H100 80GB HBM3",
                               "--gpu-compute-capability=9.0", "--gpu-memory-gib=80"]
    env = {e["name"]: e.get("value") for e in pull["env"]}
    assert env["TRTWARM_TENSORRT_VERSION"] == "10.16.1.11+cu12"
    assert env["TRTWARM_REMOTE"] == "oci://registry.example/ml/engines"
    # no GPU: no device request, no NVIDIA_VISIBLE_DEVICES, no DRA claim, the image without a GPU library
    assert not [e for e in pull["env"] if e["name"].startswith(("NVIDIA_", "CUDA_"))]
    for c in spec["initContainers"] + spec["containers"]:
        assert not any(k.startswith("nvidia.com/") for part in c["resources"].values() for k in part), c["name"]
        assert "claims" not in c["resources"]
    assert "resourceClaims" not in spec and "runtimeClassName" not in spec
    assert pull["image"] == "ghcr.io/trtwarm/trtwarm-init-pull:0.1.0"
    assert mounts(pull)["trtwarm-model"] == "/models/src"  # the key needs the model's bytes
    (cache,) = [v for v in spec["volumes"] if v["name"] == "trtwarm-cache"]
    assert cache["hostPath"]["path"] == "/var/lib/trtwarm/cache"
    exporter = container(spec, "trtwarm-exporter")
    assert exporter["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # its Pods are never the workload's: the Deployment, Services, PodMonitor and PDB select other labels
    (deploy,) = [o for o in objs if o["kind"] == "Deployment"]
    selector = deploy["spec"]["selector"]["matchLabels"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in selector.items())
    (config,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("prewarm")]
    assert '"base":"/models/src"' in config["data"]["matrix.json"]


def test_a_changed_prewarm_list_rolls_the_daemonset() -> None:
    before = _daemonset(_objects(PREWARM))["spec"]["template"]["metadata"]["annotations"]["checksum/matrix"]
    changed = copy.deepcopy(PREWARM)
    changed["prewarm"]["matrix"]["precision"] = ["fp16", "int8"]
    after = _daemonset(_objects(changed))["spec"]["template"]["metadata"]["annotations"]["checksum/matrix"]
    assert before != after
    assert _daemonset(_objects(PREWARM))["spec"]["template"]["metadata"]["annotations"]["checksum/matrix"] == before


@pytest.mark.parametrize(("change", "message"), [
    ({"cache": {"type": "pvc"}}, "prewarm.enabled needs cache.type=hostPath"),
    ({"remote": {"url": ""}}, "prewarm.enabled needs remote.url"),
    ({"prewarm": {"matrix": {}}}, "prewarm.enabled needs prewarm.matrix"),
    ({"prewarm": {"gpus": []}}, "prewarm.enabled needs prewarm.gpus"),
    ({"prewarm": {"gpus": [H100, {**H100, "memoryGiB": 81}]}}, 'prewarm.gpus lists "NVIDIA H100 80GB HBM3" twice'),
    ({"prewarm": {"gpus": [{**H100, "product": "NVIDIA H100 (80GB)"}]}}, "give its nodeSelector"),
    ({"prewarm": {"gpus": [{**H100, "computeCapability": "9"}]}}, "computeCapability"),
    ({"prewarm": {"gpus": [{"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0"}]}}, "memoryGiB"),
    ({"prewarm": {"gpus": [{**H100, "uuid": "GPU-1"}]}}, "uuid"),
    ({"remote": {"tensorrtVersion": ""}}, "tensorrt rows and remote.tensorrtVersion is empty"),
    ({"prewarm": {"matrix": {"models": [{"model": "a.onnx"}], "options": {"builder": "onnxruntime"}}}},
     "prewarm.matrix has onnxruntime rows"),
    ({"prewarm": {"matrix": {"models": [{"model": "a.onnx", "builder": "onnxruntime"}],
                             "options": {"builder": "command"}}}}, "prewarm.matrix has onnxruntime rows"),
])
def test_a_prewarm_that_could_not_work_is_refused_naming_the_value(change: dict, message: str) -> None:
    values = copy.deepcopy(PREWARM)
    for section, patch in change.items():
        values[section] = {**values[section], **patch}
    with pytest.raises(helm.errors.HelmError, match=message):
        render(values)
    values.setdefault("workload", {})["enabled"] = False  # a parent chart including the templates: guarded too
    with pytest.raises(helm.errors.HelmError, match=message):
        render(values)


def test_the_server_mounts_the_engine_image_where_a_seed_hit_points() -> None:
    """A seed-tier hit hands the engine over in place: the `engine` link points into the image, so the server needs
    the same read-only mount (or the link dangles)."""
    spec = pod_spec(_objects({"engines": {"image": {"reference": IMAGE}}}))
    server = [c for c in spec["containers"] if c["name"] not in ("trtwarm-exporter",)][0]
    assert mounts(server)["trtwarm-engines"] == "/trtwarm-engines"
    assert all(m.get("readOnly") for m in server["volumeMounts"] if m["name"] == "trtwarm-engines")


def test_an_oci_repository_reads_the_registry_credentials_of_a_dockerconfigjson_secret() -> None:
    values = copy.deepcopy(PREWARM)
    values["remote"]["oci"] = {"authSecret": "regcred", "insecure": True}
    values["remote"]["prebuild"] = {"enabled": True, "gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}
    objs = _objects(values)
    assert validate(objs, [29, 37]) == []
    pods = [pod_spec(objs), _daemonset(objs)["spec"]["template"]["spec"]]
    pods += [o["spec"]["template"]["spec"] for o in objs if o["kind"] == "Job"]
    assert len(pods) == 3
    for spec in pods:
        (puller,) = [c for c in spec.get("initContainers", []) + spec["containers"]
                     if c["name"] in ("trtwarm-init", "trtwarm-prewarm", "prebuild")]
        env = {e["name"]: e.get("value") for e in puller["env"]}
        assert env["REGISTRY_AUTH_FILE"] == "/etc/trtwarm/registry/.dockerconfigjson", puller["name"]
        assert env["TRTWARM_INSECURE_REGISTRY"] == "true"
        assert mounts(puller)["trtwarm-registry-auth"] == "/etc/trtwarm/registry"
        (secret,) = [v for v in spec["volumes"] if v["name"] == "trtwarm-registry-auth"]
        assert secret["secret"]["secretName"] == "regcred"
    server = [c for c in pod_spec(objs)["containers"] if c["name"] != "trtwarm-exporter"][0]
    assert "trtwarm-registry-auth" not in mounts(server)  # only what talks to the registry gets the credentials
