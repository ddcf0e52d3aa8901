"""Issue 28, chart day two: upgrades, prebuild Jobs and object names, rendered by Helm's engine and checked as the
objects the API server would get."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from k8s import CHART, objects, pod_spec, render, validate, workload

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def remote_values() -> dict:
    return yaml.safe_load((CHART / "ci" / "remote-values.yaml").read_text())


def jobs(values: dict, name: str = "rel") -> dict[str, dict]:
    """The prebuild Jobs by GPU product."""
    objs = objects(helm.Chart.load(str(CHART)).render(values, name=name, namespace="ml"))
    assert validate(objs, [29, 37]) == []
    return {j["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]: j
            for j in objs if j["kind"] == "Job"}


def test_an_upgrade_with_a_changed_matrix_creates_new_prebuild_jobs_and_an_unchanged_one_keeps_them() -> None:
    """A Job's Pod template is immutable: `helm upgrade` patching it in place fails. The Job is named by a hash of
    what it runs, so a changed matrix is a new Job (Helm deletes the old one) that runs the new matrix."""
    before = jobs(remote_values())
    assert jobs(remote_values()).keys() == before.keys()
    assert {p: j["metadata"]["name"] for p, j in jobs(remote_values()).items()} == \
        {p: j["metadata"]["name"] for p, j in before.items()}  # an unchanged release is left alone
    changed = remote_values()
    changed["remote"]["prebuild"]["matrix"]["precision"] = ["fp16", "int8"]
    after = jobs(changed)
    for product, job in after.items():
        old = before[product]
        assert job["metadata"]["name"] != old["metadata"]["name"], product
        annotations = job["spec"]["template"]["metadata"]["annotations"]
        assert annotations["checksum/matrix"] != old["spec"]["template"]["metadata"]["annotations"]["checksum/matrix"]
    image = remote_values()
    image["init"] = {"image": {"tag": "0.2.0"}}
    assert all(jobs(image)[p]["metadata"]["name"] != j["metadata"]["name"] for p, j in before.items())


def test_a_changed_trust_policy_rolls_the_pods_that_read_it_at_start() -> None:
    values = yaml.safe_load((CHART / "ci" / "trust-values.yaml").read_text())
    first = workload(objects(render(values)))["spec"]["template"]["metadata"]["annotations"]["checksum/trust"]
    rotated = copy.deepcopy(values)
    rotated["trust"]["keys"] = rotated["trust"]["keys"][1:]
    second = workload(objects(render(rotated)))["spec"]["template"]["metadata"]["annotations"]["checksum/trust"]
    assert first != second and re.fullmatch("[0-9a-f]{64}", first)
    mine = {**values, "workload": {"podAnnotations": {"team": "ml"}}}
    annotations = workload(objects(render(mine)))["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"team": "ml", "checksum/trust": first}
    assert "annotations" not in workload(objects(render({})))["spec"]["template"]["metadata"]


@pytest.mark.parametrize("products", [
    ["NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"],  # ends in '.' once cut naively
    ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "NVIDIA-H100 80GB_HBM3"],
])
def test_prebuild_job_names_are_unique_and_valid_for_the_longest_release_name(products: list[str]) -> None:
    values = remote_values()
    values["remote"]["prebuild"]["gpuProducts"] = products
    found = jobs(values, name="r" * 53)
    assert sorted(found) == sorted(products)
    names = [j["metadata"]["name"] for j in found.values()]
    assert len(set(names)) == len(names)
    assert all(len(n) <= 63 and NAME.fullmatch(n) for n in names), names
    values["remote"]["prebuild"]["gpuProducts"] = [products[0], products[0]]
    with pytest.raises(helm.HelmError, match="lists .* twice"):
        render(values)


def test_prebuild_jobs_pull_like_the_workload_use_its_gpu_resource_and_never_write_the_models() -> None:
    values = remote_values()
    values["workload"] = {"imagePullSecrets": [{"name": "ngc"}], "runtimeClassName": "nvidia",
                          "container": {"name": "inference", "image": {"repository": "x/server", "tag": "1"},
                                        "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpu": None}}}}
    for job in jobs(values).values():
        spec = job["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "ngc"}] and spec["runtimeClassName"] == "nvidia"
        [main] = spec["containers"]
        assert main["resources"]["limits"] == {"memory": "16Gi", "nvidia.com/mig-1g.10gb": "1"}
        assert main["resources"]["requests"]["nvidia.com/mig-1g.10gb"] == "1"
        model = next(v for v in spec["volumes"] if v["name"] == "model")
        assert model["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
        assert job["spec"]["activeDeadlineSeconds"] > 0
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "rel" and labels["app.kubernetes.io/component"] == "prebuild"
    own = remote_values()
    own["remote"]["prebuild"]["resources"] = {"limits": {"nvidia.com/gpu": 2}}
    for job in jobs(own).values():
        limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 2 and set(limits) == {"memory", "nvidia.com/gpu"}


def test_job_pods_have_their_own_labels_that_no_selector_of_the_workload_matches() -> None:
    values = remote_values()
    values.update({"gc": {"mode": "cronjob"}, "metrics": {"enabled": True, "kind": "PodMonitor"},
                   "workload": {"replicas": 2, "podDisruptionBudget": {"enabled": True}}})
    objs = objects(render(values))
    selectors = [o["spec"]["selector"]["matchLabels"] for o in objs if o["kind"] in
                 ("Deployment", "PodMonitor", "PodDisruptionBudget")]
    selectors += [o["spec"]["selector"] for o in objs if o["kind"] == "Service"]
    assert len(selectors) == 4  # the Service of the inference port too
    pods = [o["spec"]["template"]["metadata"]["labels"] for o in objs if o["kind"] == "Job"]
    pods += [o["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"] for o in objs if o["kind"] == "CronJob"]
    pods += [o["metadata"]["labels"] for o in objs if o["kind"] == "Pod"]
    assert len(pods) == 4
    for labels in pods:
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} <= set(labels)
        assert not any(s.items() <= labels.items() for s in selectors), labels
    assert pod_spec(objs)


def test_helm_test_mounts_the_cache_read_only_checks_signatures_and_pulls_like_the_workload() -> None:
    values = yaml.safe_load((CHART / "ci" / "trust-values.yaml").read_text())
    values["workload"].update({"imagePullSecrets": [{"name": "ngc"}]})
    [pod] = [o for o in objects(render(values)) if o["kind"] == "Pod"]
    [verify] = pod["spec"]["containers"]
    assert {m["name"]: m.get("readOnly") for m in verify["volumeMounts"]}["trtwarm-cache"] is True
    assert "--trust-policy=/etc/trtwarm/trust/policy.json --trust-mode=enforce" in verify["args"][0]
    policy = next(v for v in pod["spec"]["volumes"] if v["name"] == "trtwarm-trust")
    assert policy["configMap"]["name"] == "rel-trtwarm-trust"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "ngc"}]
    [plain] = [o for o in objects(render({})) if o["kind"] == "Pod"]
    assert "--trust-policy" not in plain["spec"]["containers"][0]["args"][0]


def test_the_gc_cronjob_ends_a_hung_pass() -> None:
    [cron] = [o for o in objects(render({"gc": {"mode": "cronjob", "activeDeadlineSeconds": 600}}))
              if o["kind"] == "CronJob"]
    assert cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 600
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


def test_the_trust_config_map_name_fits_for_the_longest_release_name() -> None:
    values = yaml.safe_load((CHART / "ci" / "trust-values.yaml").read_text())
    objs = objects(helm.Chart.load(str(CHART)).render(values, name="r" * 53, namespace="ml"))
    [config] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert len(config["metadata"]["name"]) <= 63 and config["metadata"]["name"].endswith("-trust")
    assert config["metadata"]["name"] in [v.get("configMap", {}).get("name") for v in pod_spec(objs)["volumes"]]
