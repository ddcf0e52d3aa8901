"""Issue 28, chart day two: upgrades, prebuild Jobs and object names, rendered by Helm's engine and checked as the
objects the API server would get."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from k8s import CHART, container, objects, pod_spec, render, validate, workload

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
KEYS = [{"name": "ci", "public_key_file": "ci.pub"}]  # a policy needs a key: the init refuses one without


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


# --- renders that could never become Ready fail at `helm template` time, naming the values (F8, F12, F18, F6) ---

TRITON_PORTS = [{"name": "web", "containerPort": 8000}, {"name": "grpc", "containerPort": 8001}]


@pytest.mark.parametrize("values,message", [
    ({"workload": {"container": {"ports": TRITON_PORTS}}},
     r'workload.container.readinessProbe.httpGet.port "http" names no port of workload.container.ports'),
    ({"workload": {"container": {"livenessProbe": {"tcpSocket": {"port": "metrics"}}}}},
     r'livenessProbe.tcpSocket.port "metrics" names no port'),
    ({"exporter": {"port": 8002}}, r"exporter.port=8002 is taken by the inference container .*Triton's 8000/8001/8002"),
    ({"exporter": {"port": 8001}}, r"exporter.port=8001 is taken"),
    ({"exporter": {"port": 7000}, "workload": {"container": {
        "image": {"repository": "vllm/vllm-openai", "tag": "1"}, "command": ["serve"],
        "ports": [{"name": "http", "containerPort": 7000}]}}}, r"exporter.port=7000 is taken .*\[7000\]"),
    ({"cache": {"type": "emptyDir"}, "engine": {"readOnly": True}}, r"cache.type=emptyDir with engine.readOnly=true"),
    ({"cache": {"type": "emptyDir"}, "trust": {"mode": "warn", "role": "consumer"}},
     r"cache.type=emptyDir with trust.role=consumer"),
    ({"cache": {"type": "hostPath", "hostPath": {"path": "/", "type": "Directory"}}}, r'cache.hostPath.path="/" is'),
    ({"cache": {"type": "hostPath", "hostPath": {"path": "/etc/trtwarm", "type": "Directory"}}},
     r"a system directory"),
    ({"cache": {"type": "hostPath", "hostPath": {"path": "/var/lib/", "type": "Directory"}}}, r"system directory"),
    ({"engine": {"verify": "stamp", "stamps": {"hostPath": "/proc/1"}}}, r"engine.stamps.hostPath=\"/proc/1\""),
    ({"trust": {"mode": "warn", "signingKey": {"existingSecret": "k"}}, "engine": {"tensorrt": {"plugins": ["/p.so"]}}},
     r"runs engine.tensorrt.plugins: code from there could read the signing key"),
    ({"trust": {"mode": "warn", "signingKey": {"existingSecret": "k"}},
      "engine": {"builder": "command", "command": {"template": "cp {model} {output}", "version": "1"}}},
     r"runs engine.command.template"),
    ({"workload": {"extraContainers": [{"name": "trtwarm-exporter", "image": "x:1"}]}},
     r'named "trtwarm-exporter" twice'),
    ({"workload": {"container": {"name": "trtwarm-init"}}}, r'workload.container.name="trtwarm-init"'),
    ({"workload": {"extraVolumes": [{"name": "trtwarm-cache", "emptyDir": {}}]}},
     r'"trtwarm-cache" is a name the chart'),
])
def test_a_render_that_could_never_become_ready_fails_naming_the_values(values: dict, message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)
    off = copy.deepcopy(values)  # a parent chart that includes the named templates gets the same guard (F12)
    off.setdefault("workload", {})["enabled"] = False
    with pytest.raises(helm.HelmError, match=message):
        render(off)


def test_the_working_neighbours_of_the_refused_renders_pass() -> None:
    renamed = {"workload": {"container": {"ports": TRITON_PORTS, "readinessProbe": {
        "httpGet": {"path": "/v2/health/ready", "port": "web"}}}}}
    for values in (renamed, {"workload": {"container": {"readinessProbe": {"httpGet": {"path": "/", "port": 8000}}}}},
                   {"exporter": {"port": 8002, "enabled": False}},
                   {"cache": {"type": "emptyDir"}, "engine": {"readOnly": True}, "remote": {"url": "s3://engines/p"}},
                   {"cache": {"type": "emptyDir"}, "trust": {"mode": "warn", "role": "consumer", "keys": KEYS},
                    "remote": {"url": "s3://engines/p", "pullOnly": True}},
                   {"cache": {"type": "hostPath", "hostPath": {"path": "/var/lib/trtwarm/cache", "type": "Directory"}}},
                   {"trust": {"mode": "warn", "keys": KEYS,
                              "signingKey": {"existingSecret": "k", "allowUntrustedBuildSteps": True}},
                    "engine": {"tensorrt": {"plugins": ["/p.so"]}}}):
        assert validate(objects(render(values)), [29, 37]) == [], values


def test_workload_disabled_still_checks_every_guard() -> None:
    """F12: the guards of the init's flags and the cache volume run although no workload is rendered."""
    for values, message in (({"engine": {"shapes": {"a": "1"}, "profiles": ["a=1:1:1"]}}, "do not mix"),
                            ({"cache": {"type": "hostPath"}}, "DirectoryOrCreate makes a root-owned"),
                            ({"gc": {"mode": "sidecar"}, "exporter": {"enabled": False}}, "needs exporter.enabled")):
        with pytest.raises(helm.HelmError, match=message):
            render({**values, "workload": {"enabled": False}})


# --- the rest of issue 28, one check each ---------------------------------------------------------------------

def test_dra_claims_of_the_server_are_the_init_containers_too() -> None:
    """F3: with a GPU by resource claim, the init container builds on the device the server gets."""
    values = {"workload": {"podSpecExtra": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "h100"}]},
                           "containerExtra": {"resources": {"claims": [{"name": "gpu"}]}},
                           "container": {"resources": {"limits": {"nvidia.com/gpu": None}}}}}
    objs = objects(render(values))
    assert validate(objs, [33, 37]) == []
    spec = pod_spec(objs)
    init = container(spec, "trtwarm-init")
    assert init["resources"]["claims"] == [{"name": "gpu"}] == container(spec, "inference")["resources"]["claims"]
    assert "claims" not in container(spec, "trtwarm-exporter").get("resources", {})


def test_workload_identity_reaches_the_init_container_only() -> None:
    """F7: the EKS identity webhook skips every container the Pod names; the init alone pushes and pulls."""
    values = yaml.safe_load((CHART / "ci" / "remote-pull-only-values.yaml").read_text())
    values.setdefault("workload", {})["extraContainers"] = [{"name": "proxy", "image": "envoy:1"}]
    objs = objects(render(values))
    annotations = workload(objs)["spec"]["template"]["metadata"]["annotations"]
    skipped = set(annotations["eks.amazonaws.com/skip-containers"].split(","))
    spec = pod_spec(objs)
    names = {c["name"] for c in spec["initContainers"] + spec["containers"]}
    assert skipped == names - {"trtwarm-init"}
    secret = objects(render(remote_values()))  # a Secret reaches the init only (envFrom) and needs no skipping
    assert "annotations" not in workload(secret)["spec"]["template"]["metadata"]


def test_pull_only_image_by_digest_and_numbers_and_hashes_as_written() -> None:
    """F15, F16, F17."""
    digest = "sha256:" + "cd" * 32
    values = yaml.safe_load((CHART / "ci" / "remote-pull-only-values.yaml").read_text())
    values["remote"]["pullOnlyImage"] = {"repository": "ghcr.io/trtwarm/trtwarm-init-pull", "digest": digest}
    values["engine"] = {"keyExtra": {"date": 20250101, "ratio": 0.5, "big": 12345678901}}
    values["cache"] = {"mountPath": "/models/cache #1", "pvc": {"storageClass": "nfs #fast", "size": "50Gi"}}
    values.setdefault("workload", {})["priorityClassName"] = "gpu #high"
    objs = objects(render(values))
    init = container(pod_spec(objs), "trtwarm-init")
    assert init["image"] == f"ghcr.io/trtwarm/trtwarm-init-pull@{digest}"
    assert {"--key-extra=date=20250101", "--key-extra=ratio=0.5", "--key-extra=big=12345678901"} <= set(init["args"])
    assert {m["name"]: m["mountPath"] for m in init["volumeMounts"]}["trtwarm-cache"] == "/models/cache #1"
    assert pod_spec(objs)["priorityClassName"] == "gpu #high"
    assert next(o for o in objs if o["kind"] == "PersistentVolumeClaim")["spec"]["storageClassName"] == "nfs #fast"


def test_a_service_publishes_the_inference_ports_of_ready_pods() -> None:
    """F19."""
    objs = objects(render({}))
    [service] = [o for o in objs if o["kind"] == "Service"]
    assert service["spec"]["selector"] == workload(objs)["spec"]["selector"]["matchLabels"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", 8000, "http"), ("grpc", 8001, "grpc")]
    sts = objects(render({"workload": {"kind": "StatefulSet"}, "service": {"ports": [{"name": "api", "port": 80,
                                                                                      "targetPort": "http"}]}}))
    names = sorted(o["metadata"]["name"] for o in sts if o["kind"] == "Service")
    assert names == ["rel-trtwarm", "rel-trtwarm-server"]
    assert not [o for o in objects(render({"service": {"enabled": False}})) if o["kind"] == "Service"]


def test_notes_name_the_claims_access_modes_and_the_uid() -> None:
    """F13, F20."""
    def notes(values: dict) -> str:
        return next(t for p, t in render(values).items() if p.endswith("NOTES.txt"))

    rwo = notes({"cache": {"pvc": {"accessModes": ["ReadWriteOnce"]}}})
    assert "asks for ReadWriteOnce from" in rwo and "Multi-Attach" in rwo and "default classes of EKS" not in rwo
    host = notes({"cache": {"type": "hostPath", "hostPath": {"type": "Directory"}}})
    assert "writable by uid 1000" in host
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (CHART / chart["icon"].rsplit("/helm/trtwarm/", 1)[1]).is_file()
    assert chart["version"] != "0.1.0"


def test_an_enforcing_profile_hands_over_a_private_copy_in_a_sized_emptydir() -> None:
    values = yaml.safe_load((CHART / "ci" / "trust-values.yaml").read_text())
    spec = pod_spec(objects(render(values)))
    assert "--handoff=copy" in container(spec, "trtwarm-init")["args"]
    handoff = next(v for v in spec["volumes"] if v["name"] == "trtwarm-handoff")
    assert handoff["emptyDir"] == {"sizeLimit": "20Gi"}  # the engine itself lives there
    default = pod_spec(objects(render({})))
    assert not [a for a in container(default, "trtwarm-init")["args"] if a.startswith("--handoff=")]
    assert next(v for v in default["volumes"] if v["name"] == "trtwarm-handoff")["emptyDir"] == {"sizeLimit": "16Mi"}
    linked = pod_spec(objects(render({**values, "handoff": {"mode": "link"}})))
    assert "--handoff=copy" not in container(linked, "trtwarm-init")["args"]


@pytest.mark.parametrize("values", [
    {"trust": {"mode": None}}, {"trust": {"mode": "strict"}},
    {"trust": {"mode": "warn", "keys": [{"name": "k", "public_key_file": "k.pub", "models": []}]}},
    {"trust": {"mode": "warn", "keys": [{"name": "k", "public_key_file": "k.pub", "models": [1]}]}},
    {"trust": {"mode": "warn", "keys": [{"name": "k", "public_key_file": "k.pub", "trusted": True}]}},
    {"trust": {"mode": "warn", "policy": {}}},
    {"gc": {"mode": "sidecar", "interval": "0s"}}, {"gc": {"interval": "0"}}, {"exporter": {"scanInterval": "0.0"}},
    {"exporter": {"leaseInterval": "-1s"}}, {"engine": {"lockTimeout": "0m"}}, {"engine": {"progressInterval": "0"}},
    {"engine": {"stamps": {"maxAge": "0d"}}}, {"gc": {"keepPerModel": 0}}, {"gc": {"activeDeadlineSeconds": 0}},
    {"exporter": {"readinessProbe": {"timeoutSeconds": 0}}}, {"exporter": {"livenessProbe": {"periodSeconds": 0}}},
    {"handoff": {"mode": "symlink"}}, {"remote": {"pullOnlyImage": {"digest": "latest"}}},
])
def test_the_schema_refuses_bad_trust_policies_and_zero_intervals(values: dict) -> None:
    with pytest.raises(helm.HelmError, match="schema"):
        render(values)


def test_the_schema_accepts_positive_intervals_and_probe_timeouts() -> None:
    values = {"gc": {"mode": "sidecar", "interval": "0.5h", "keepPerModel": 1}, "engine": {"lockTimeout": "90",
              "progressInterval": "1s"}, "exporter": {"readinessProbe": {"timeoutSeconds": 2}, "leaseInterval": "10s"}}
    spec = pod_spec(objects(render(values)))
    exporter = container(spec, "trtwarm-exporter")
    assert exporter["readinessProbe"]["timeoutSeconds"] == 2
    assert {"--gc-interval=0.5h", "--lease-interval=10s", "--gc-keep-per-model=1"} <= set(exporter["args"])
    assert {"--lock-timeout=90", "--progress-interval=1s"} <= set(container(spec, "trtwarm-init")["args"])


def _string_leaves(node: object, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _string_leaves(v, (*path, k))]
    return [path] if isinstance(node, str) else []


def _strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


def test_no_string_value_loses_a_hash_suffix_anywhere_it_is_rendered() -> None:
    """F17: each string value of values.yaml in turn gets a ` #marker` suffix; wherever the marker reaches the
    rendered text, it is part of a string the API server gets, never a YAML comment that silently cut the value."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    base = {"gc": {"mode": "cronjob"}, "metrics": {"enabled": True, "rules": {"enabled": True}},
            "rbac": {"events": True}, "remote": {"url": "s3://engines/p", "prebuild": {"enabled": True,
                                                                                       "gpuProducts": ["NVIDIA-L4"]}}}
    rendered_once = 0
    for i, path in enumerate(_string_leaves(defaults)):
        values = copy.deepcopy(base)
        node = values
        for key in path[:-1]:
            node = node.setdefault(key, {})
        marker = f"#m{i}x"
        node[path[-1]] = f"{_dig(defaults, path) or 'v'} {marker}"
        try:
            rendered = render(values)
        except helm.HelmError:
            continue  # the schema or a guard refuses this value: nothing rendered to lose
        text = "\n".join(t for p, t in rendered.items() if not p.endswith("NOTES.txt"))
        if marker not in text:
            continue
        rendered_once += 1
        assert any(marker in s for s in _strings(objects(rendered))), (".".join(path), marker)
    assert rendered_once >= 20, rendered_once


def _dig(node: dict, path: tuple) -> object:
    for key in path:
        node = node[key]
    return node


def test_the_fast_validator_agrees_with_kubernetes_validate() -> None:
    """tests/k8s.py compiles kubernetes-validate's schemas once; on valid and broken objects it says what the
    library says, for the oldest and the newest supported version."""
    import kubernetes_validate

    objs = objects(render(yaml.safe_load((CHART / "ci" / "remote-values.yaml").read_text())))
    broken = copy.deepcopy(workload(objs))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    extra = copy.deepcopy(next(o for o in objs if o["kind"] == "Job"))
    extra["spec"]["template"]["spec"]["containers"][0]["bogus"] = True
    for minor in (29, 37):
        for obj in objs:
            if obj["kind"] in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
                continue
            kubernetes_validate.validate(obj, f"1.{minor}.0", strict=True)
        assert validate(objs, [minor]) == []
        for bad in (broken, extra):
            with pytest.raises(kubernetes_validate.ValidationError):
                kubernetes_validate.validate(bad, f"1.{minor}.0", strict=True)
            assert len(validate([bad], [minor])) == 1


def test_prebuild_jobs_check_the_trust_policy_and_sign_with_the_key_while_serving_pods_stay_consumers() -> None:
    """The pattern the README recommends (F6): serving Pods are key-less consumers; the prebuild Jobs, the one place
    with the key, sign every entry they build and check what they find against the same policy."""
    values = remote_values()
    values["trust"] = {**yaml.safe_load((CHART / "ci" / "trust-values.yaml").read_text())["trust"],
                       "signingKey": {"existingSecret": "trtwarm-signing-key"}}
    objs = objects(render(values))
    assert validate(objs, [29, 37]) == []
    init = container(pod_spec(objs), "trtwarm-init")
    assert "--read-only" in init["args"] and not [a for a in init["args"] if a.startswith("--signing-key")]
    for job in (o for o in objs if o["kind"] == "Job"):
        spec = job["spec"]["template"]["spec"]
        [main] = spec["containers"]
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["TRTWARM_TRUST_MODE"] == "enforce" and env["TRTWARM_SIGNING_KEY"].endswith("/signing.key")
        mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        key_dir = env["TRTWARM_SIGNING_KEY"].rsplit("/", 1)[0]
        policy_dir = env["TRTWARM_TRUST_POLICY"].rsplit("/", 1)[0]
        assert mounts[key_dir]["readOnly"] and volumes[mounts[key_dir]["name"]]["secret"]["secretName"] == \
            "trtwarm-signing-key"
        assert volumes[mounts[policy_dir]["name"]]["configMap"]["name"] == "rel-trtwarm-trust"
    values["trust"].pop("signingKey")
    with pytest.raises(helm.HelmError, match="remote.prebuild.enabled with trust.mode=enforce needs"):
        render(values)
