"""The Helm chart, rendered by the real Helm engine: lint, schema, Kubernetes OpenAPI validation and wiring."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k8s import CHART, ROOT, assert_wired, container, flag, mounts, objects, pod_spec, render, validate, workload
from pss import baseline, restricted

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")


def values_of(path: Path | None) -> dict:
    return yaml.safe_load(path.read_text()) if path else {}


def kube_minors(values: dict) -> range:
    """The Kubernetes versions a configuration supports: native sidecars need 1.29, legacy mode 1.25."""
    return range(25, 38) if (values.get("exporter") or {}).get("mode") == "legacy" else range(29, 38)


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_lint_is_clean_and_every_object_validates(path: Path | None) -> None:
    values = values_of(path)
    report = helm.lint(str(CHART), values, strict=True)
    assert report["errors"] == [] and report["messages"] == [], report
    objs = objects(render(values))
    assert validate(objs, kube_minors(values)) == []


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_every_configuration_is_wired(path: Path | None) -> None:
    values = values_of(path)
    objs = objects(render(values))
    spec = pod_spec(objs)
    main = (values.get("workload", {}).get("container", {}) or {}).get("name", "inference")
    legacy = (values.get("exporter") or {}).get("mode") == "legacy"
    assert_wired(spec, main, native=not legacy)
    kinds = {o["kind"] for o in objs}
    metrics = values.get("metrics") or {}
    if metrics.get("enabled"):
        monitor = next(o for o in objs if o["kind"] == metrics.get("kind", "PodMonitor"))
        endpoints = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"]["endpoints"]
        exporter_ports = [p["name"] for p in container(spec, "trtwarm-exporter")["ports"]]
        assert endpoints[0]["port"] in exporter_ports
        labels = monitor["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack"
        selector = monitor["spec"]["selector"]["matchLabels"]
        target = spec if metrics.get("kind") == "PodMonitor" else None
        if target is not None:
            pod_labels = workload(objs)["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= pod_labels.items()
        else:
            service = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"].endswith("-metrics"))
            assert selector.items() <= service["metadata"]["labels"].items()
    assert ("PrometheusRule" in kinds) == bool(metrics.get("rules", {}).get("enabled"))


def test_defaults_are_safe_and_optional_features_off() -> None:
    objs = objects(render({}))
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["Deployment", "PersistentVolumeClaim", "Pod", "Service"]  # the Pod is the `helm test` hook
    dep = workload(objs)
    assert dep["spec"]["progressDeadlineSeconds"] > 600
    spec = pod_spec(objs)
    for name in ("trtwarm-exporter", "trtwarm-init"):
        sc = container(spec, name)["securityContext"]
        assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert mounts(container(spec, name))["trtwarm-tmp"] == "/tmp"  # a writable HOME on a read-only root
    assert spec["securityContext"]["runAsNonRoot"] is True
    init = container(spec, "trtwarm-init")
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {e["name"] for e in init["env"]} >= {"POD_NAME", "POD_NAMESPACE", "NODE_NAME", "HOME"}
    pvc = next(o for o in objs if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert flag(init, "cache-dir") == "/models/cache" and flag(init, "builder") == "tensorrt"


def test_engine_values_become_init_flags() -> None:
    values = {"engine": {"builder": "tensorrt", "precision": "fp16", "shapes": {"input": "1x3x8x8:4x3x8x8:8x3x8x8"},
                         "keyExtra": {"calibration": "v3"}, "verify": "load", "readOnly": True,
                         "tensorrt": {"workspace": "4G", "optLevel": 5, "hardwareCompat": "same-cc",
                                      "versionCompatible": True, "plugins": ["/opt/p.so"]},
                         "triton": {"enabled": True, "model": "resnet"}}}
    args = container(pod_spec(objects(render(values))), "trtwarm-init")["args"]
    for expected in ("--precision=fp16", "--shape=input=1x3x8x8:4x3x8x8:8x3x8x8", "--key-extra=calibration=v3",
                     "--verify=load", "--read-only", "--workspace=4G", "--opt-level=5", "--hardware-compat=same-cc",
                     "--version-compatible", "--plugin=/opt/p.so", "--triton-repo=/trtwarm/triton",
                     "--triton-model=resnet"):
        assert expected in args


def test_stamped_hits_can_share_a_node_directory_of_stamps() -> None:
    """``engine.verify: stamp`` with ``engine.stamps.hostPath``: the init keeps its stamps (and the signatures it
    verified) in that node directory, which no other container mounts; without it they go to the hand-off emptyDir."""
    spec = pod_spec(objects(render({"engine": {"verify": "stamp", "stamps": {"hostPath": "/var/lib/trtwarm/stamps",
                                                                              "maxAge": "12h"}}})))
    init = container(spec, "trtwarm-init")
    assert flag(init, "verify") == "stamp" and flag(init, "stamp-max-age") == "12h"
    assert mounts(init)["trtwarm-stamps"] == flag(init, "stamp-dir")
    [volume] = [v for v in spec["volumes"] if v["name"] == "trtwarm-stamps"]
    assert volume["hostPath"] == {"path": "/var/lib/trtwarm/stamps", "type": "Directory"}  # made by the node's owner
    assert all("trtwarm-stamps" not in mounts(c) for c in spec["containers"])  # the server cannot write stamps
    default = container(pod_spec(objects(render({"engine": {"verify": "stamp"}}))), "trtwarm-init")
    assert flag(default, "stamp-dir") is None and "trtwarm-stamps" not in mounts(default)
    with pytest.raises(helm.HelmError, match="engine.stamps.hostPath needs engine.verify=stamp or a trust.mode"):
        render({"engine": {"stamps": {"hostPath": "/var/lib/trtwarm/stamps"}}})
    for inside in ("/var/lib/trtwarm/cache", "/var/lib/trtwarm/cache/stamps",  # a volume writer could forge them
                   "/var/lib/trtwarm//cache/stamps", "/var/lib/trtwarm/x/../cache/stamps"):  # however it is spelt
        with pytest.raises(helm.HelmError, match="inside cache.hostPath.path"):
            render({"cache": {"type": "hostPath", "hostPath": {"path": "/var/lib/trtwarm/cache/", "type": "Directory"}},
                    "engine": {"verify": "stamp", "stamps": {"hostPath": inside}}})
    with pytest.raises(helm.HelmError, match="hostPath"):
        render({"engine": {"verify": "stamp", "stamps": {"hostPath": "/"}}})


def test_several_profiles_become_profile_flags_and_do_not_mix_with_shapes() -> None:
    profiles = ["ids=1x1:1x128:1x512;mask=1x1:1x128:1x512", "ids=8x1:8x128:8x512;mask=8x1:8x128:8x512"]
    args = container(pod_spec(objects(render({"engine": {"profiles": profiles}}))), "trtwarm-init")["args"]
    assert [a for a in args if a.startswith("--profile=")] == [f"--profile={p}" for p in profiles]
    with pytest.raises(helm.HelmError, match="engine.shapes and engine.profiles do not mix"):
        render({"engine": {"profiles": profiles, "shapes": {"ids": "1x1"}}})


def test_the_init_container_requests_the_same_gpus_as_the_server_mig_included() -> None:
    mig = {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/gpu": None, "memory": "8Gi"}  # null drops the default GPU
    spec = pod_spec(objects(render({"workload": {"container": {"resources": {"limits": mig}}}})))
    init = container(spec, "trtwarm-init")
    assert "nvidia.com/gpu" not in container(spec, "inference")["resources"]["limits"]
    assert init["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert init["resources"]["requests"]["nvidia.com/mig-3g.40gb"] == "1"
    assert "nvidia.com/gpu" not in init["resources"]["limits"] and init["resources"]["limits"]["memory"] == "16Gi"


@pytest.mark.parametrize("bad", [
    {"cache": {"type": "nfs"}}, {"engine": {"builder": "tensorrtx"}}, {"engine": {"verify": "maybe"}},
    {"exporter": {"mode": "sidecar"}}, {"engine": {"shapes": {"input": "1x3:8"}}}, {"workload": {"replicas": -1}},
    {"gc": {"mode": "hourly"}}, {"typo": True},
])
def test_schema_rejects_bad_values_with_the_offending_key(bad: dict) -> None:
    with pytest.raises(helm.HelmError) as err:
        helm.Chart.load(str(CHART)).render(bad, name="rel", namespace="ml")
    assert "schema" in str(err.value)


def test_template_guards_explain_what_to_set() -> None:
    with pytest.raises(helm.HelmError, match="engine.command.template is required"):
        render({"engine": {"builder": "command"}})
    with pytest.raises(helm.HelmError, match="gc.mode=cronjob needs cache.type=pvc"):
        render({"gc": {"mode": "cronjob"}, "cache": {"type": "emptyDir"}})


def test_native_exporter_is_refused_below_kubernetes_1_29(capfd: pytest.CaptureFixture[str]) -> None:
    # The SDK renders for one fixed Kubernetes version; lint takes another. In lint mode Helm logs a template's
    # `fail` instead of raising it, so the message is read from Helm's log on stderr.
    helm.lint(str(CHART), {}, kube_version="v1.28.0")
    assert "exporter.mode=native needs Kubernetes 1.29 or newer" in capfd.readouterr().err
    legacy = helm.lint(str(CHART), {"exporter": {"mode": "legacy"}}, kube_version="v1.28.0")
    assert legacy["errors"] == [] and "needs Kubernetes 1.29" not in capfd.readouterr().err


def test_chart_readme_documents_every_value() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "helm" / "values_doc.py"), "--check"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout
    readme = (CHART / "README.md").read_text()
    assert "`engine.verify`" in readme and "`cache.pvc.storageClass`" in readme


def test_a_parent_chart_can_include_the_named_templates(tmp_path: Path) -> None:
    parent = tmp_path / "mychart"
    (parent / "templates").mkdir(parents=True)
    shutil.copytree(CHART, parent / "charts" / "trtwarm")
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: mychart\nversion: 1.0.0\n"
                                       "dependencies:\n  - name: trtwarm\n    version: 0.2.0\n")
    (parent / "values.yaml").write_text("trtwarm:\n  workload: {enabled: false}\n"
                                        "  engine: {model: {path: /models/src/m.onnx}}\n")
    readme = (CHART / "README.md").read_text()
    snippet = re.search(r"# templates/deployment.yaml of your chart\n(.*?)```", readme, re.S)[1]
    (parent / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: server}\nspec:\n  selector: {matchLabels: "
        "{app: s}}\n  template:\n    metadata: {labels: {app: s}}\n    spec:\n" + snippet.replace(
            "        - name: server\n", "        - name: server\n          image: example/server:1\n          "
            "resources: {limits: {nvidia.com/gpu: 1}}\n"))
    objs = objects(render({}, chart=parent))
    assert [o["kind"] for o in objs if o["kind"] == "Deployment"] == ["Deployment"]  # theirs only
    assert validate(objs, [29, 37]) == []
    spec = pod_spec(objs)
    assert [c["name"] for c in spec["initContainers"]] == ["trtwarm-exporter", "trtwarm-init"]
    assert flag(container(spec, "trtwarm-init"), "model") == "/models/src/m.onnx"


# --- day-one failures of the review in issue 17, each rendered and asserted like helm-unittest does -----------------

TRICKY = "sh -c 'echo step: build && trtexec --onnx={model} --saveEngine={output} # done' \"quoted\""


def test_args_stay_plain_strings_whatever_the_value_holds() -> None:
    values = {"engine": {"builder": "command", "command": {"template": TRICKY, "version": "10.16: cu12 #1"},
                         "keyExtra": {"note": "a #b", "colon": "x: y", "quote": "it's \"q\""},
                         "extraArgs": ["--events=true", "--key-extra=n=1 # c"]},
              "exporter": {"extraArgs": ["--lease-interval=30s"]}, "gc": {"mode": "sidecar", "maxAge": "30d"}}
    spec = pod_spec(objects(render(values)))
    init = container(spec, "trtwarm-init")
    assert all(isinstance(a, str) for a in init["args"]), init["args"]
    for expected in (f"--build-command={TRICKY}", "--builder-version=10.16: cu12 #1", "--key-extra=note=a #b",
                     "--key-extra=colon=x: y", "--key-extra=quote=it's \"q\"", "--key-extra=n=1 # c"):
        assert expected in init["args"]
    exporter = container(spec, "trtwarm-exporter")
    assert all(isinstance(a, str) for a in exporter["args"])
    assert "--lease-interval=30s" in exporter["args"] and "--gc-max-age=30d" in exporter["args"]


LONG = "r" * 53  # Helm's longest release name


@pytest.mark.parametrize("values", [
    {"gc": {"mode": "cronjob"}, "metrics": {"enabled": True, "kind": "ServiceMonitor", "rules": {"enabled": True}}},
    {"workload": {"kind": "StatefulSet"}, "rbac": {"events": True}, "workload_pdb": True},
], ids=["deployment", "statefulset"])
def test_the_longest_release_name_keeps_every_object_name_within_its_limit(values: dict) -> None:
    if values.pop("workload_pdb", False):
        values["workload"]["podDisruptionBudget"] = {"enabled": True}
    objs = objects(helm.Chart.load(str(CHART)).render(values, name=LONG, namespace="ml"))
    limits = {"CronJob": 52, "StatefulSet": 52}
    for obj in objs:
        name = obj["metadata"]["name"]
        assert len(name) <= limits.get(obj["kind"], 63), (obj["kind"], name, len(name))
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert validate(objs, [29, 37]) == []
    names = [o["metadata"]["name"] for o in objs]
    assert len(names) == len(set((o["kind"], n) for o, n in zip(objs, names)))


def test_an_empty_image_tag_is_refused_and_digests_and_a_mirror_registry_are_honoured() -> None:
    with pytest.raises(helm.HelmError, match="workload.container.image.tag is empty"):
        render({"workload": {"container": {"image": {"tag": ""}}}})
    digest = "sha256:" + "ab" * 32
    spec = pod_spec(objects(render({"workload": {"container": {"image": {"tag": "", "digest": digest}}},
                                    "init": {"image": {"digest": digest}},
                                    "global": {"imageRegistry": "mirror.example.com:5000"},
                                    "cache": {"fixPermissions": {"enabled": True}}})))
    images = {c["name"]: c["image"] for c in spec["initContainers"] + spec["containers"]}
    assert images["inference"] == f"mirror.example.com:5000/nvidia/tritonserver@{digest}"
    assert images["trtwarm-init"] == f"mirror.example.com:5000/trtwarm/trtwarm-init@{digest}"
    assert images["trtwarm-exporter"] == "mirror.example.com:5000/trtwarm/trtwarm-sidecar:0.1.0"
    assert images["trtwarm-fix-permissions"] == "mirror.example.com:5000/busybox:1.37"
    with pytest.raises(helm.HelmError, match="schema"):
        render({"init": {"image": {"digest": "latest"}}})


def test_env_overrides_replace_the_chart_variables_instead_of_repeating_them() -> None:
    values = {"workload": {"container": {"env": [{"name": "TRTWARM_ENGINE", "value": "/trtwarm/triton"},
                                                 {"name": "LOG", "value": "1"}]}},
              "init": {"env": [{"name": "HOME", "value": "/scratch"}, {"name": "TRTWARM_LOG_FORMAT", "value": "text"},
                               {"name": "EXTRA", "value": "a"}, {"name": "EXTRA", "value": "b"}]},
              "exporter": {"env": [{"name": "HOME", "value": "/home/x"}]}}
    spec = pod_spec(objects(render(values)))
    for name, expected in (("inference", {"TRTWARM_ENGINE": "/trtwarm/triton", "LOG": "1"}),
                           ("trtwarm-init", {"HOME": "/scratch", "TRTWARM_LOG_FORMAT": "text", "EXTRA": "b"}),
                           ("trtwarm-exporter", {"HOME": "/home/x"})):
        env = container(spec, name)["env"]
        names = [e["name"] for e in env]
        assert len(names) == len(set(names)), names
        assert {k: v for k, v in ((e["name"], e.get("value")) for e in env) if k in expected} == expected
    assert [e["name"] for e in container(spec, "trtwarm-init")["env"]][0] == "POD_NAME"  # replaced in place


def test_the_cpu_statefulset_example_requests_no_gpu_anywhere() -> None:
    objs = objects(render(values_of(CHART / "ci" / "statefulset-values.yaml")))
    spec = pod_spec(objs)
    for c in spec["initContainers"] + spec["containers"]:
        resources = c.get("resources") or {}
        assert not [k for part in resources.values() for k in part if k.startswith("nvidia.com/")], c["name"]
    assert "readinessProbe" not in container(spec, "inference")  # Triton's default probe is gone too
    assert workload(objs)["metadata"]["name"] == "rel-trtwarm"


def _workload_pods(objs: list[dict]) -> dict[str, dict]:
    """Every Pod spec the chart renders: the workload's, the gc Job's and the `helm test` Pod's."""
    out = {}
    for obj in objs:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            out[obj["kind"]] = obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            out["CronJob"] = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            out["Pod"] = obj["spec"]
    return out


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_every_rendered_workload_meets_its_pod_security_standard(path: Path | None) -> None:
    """`restricted` by default; `baseline` (plus the hostPath volume itself, which needs a `privileged` namespace)
    where a root init fixes the cache's ownership or the cache is a hostPath."""
    values = values_of(path)
    cache = values.get("cache") or {}
    relaxed = cache.get("type") == "hostPath" or (cache.get("fixPermissions") or {}).get("enabled")
    pods = _workload_pods(objects(render(values)))
    assert pods
    for kind, spec in pods.items():
        if relaxed:
            assert [v for v in baseline(spec) if "hostPath" not in v] == [], kind
        else:
            assert restricted(spec) == [], kind


def test_the_pss_checker_catches_what_the_old_defaults_did() -> None:
    spec = pod_spec(objects(render({"workload": {"container": {"securityContext": None}}})))
    assert restricted(spec) == ["inference: allowPrivilegeEscalation is not false",
                                "inference: capabilities.drop lacks ALL"]
    spec = pod_spec(objects(render({"cache": {"fixPermissions": {"enabled": True}}})))
    assert "trtwarm-fix-permissions: adds capability CHOWN" in restricted(spec) and baseline(spec) == []
    hostpath = pod_spec(objects(render(values_of(CHART / "ci" / "hostpath-values.yaml"))))
    assert baseline(hostpath) == ["volume trtwarm-cache: hostPath", "volume trtwarm-stamps: hostPath"]


def test_escape_hatches_reach_the_pod_and_validate() -> None:
    claim = {"name": "gpu", "resourceClaimName": "shared-gpu"}
    values = {"workload": {
        "podSpecExtra": {"resourceClaims": [claim], "dnsPolicy": "ClusterFirst"},
        "containerExtra": {"resources": {"claims": [{"name": "gpu"}]}, "stdin": False},
        "priorityClassName": "inference", "runtimeClassName": "nvidia",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway"}],
        "strategy": {"type": "Recreate"}, "podDisruptionBudget": {"enabled": True},
        "container": {"envFrom": [{"secretRef": {"name": "tokens"}}],
                      "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}},
        "serviceAccount": {"create": True, "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}}}
    objs = objects(render(values))
    assert validate(objs, [33, 37]) == []
    dep, spec = workload(objs), pod_spec(objs)
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert spec["resourceClaims"] == [claim] and spec["priorityClassName"] == "inference"
    assert spec["runtimeClassName"] == "nvidia" and spec["automountServiceAccountToken"] is False
    assert spec["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"] == \
        dep["spec"]["selector"]["matchLabels"]
    main = container(spec, "inference")
    assert main["resources"] == {"claims": [{"name": "gpu"}], "limits": {"nvidia.com/gpu": 1}}
    assert main["envFrom"] == [{"secretRef": {"name": "tokens"}}] and main["lifecycle"]["preStop"]
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")
    assert spec["serviceAccountName"] == sa["metadata"]["name"] == "rel-trtwarm"
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}
    pdb = next(o for o in objs if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]


def test_events_get_a_token_in_trtwarm_init_only() -> None:
    spec = pod_spec(objects(render({"rbac": {"events": True}})))
    assert spec["automountServiceAccountToken"] is False
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    holders = [c["name"] for c in spec["initContainers"] + spec["containers"] if token in mounts(c).values()]
    assert holders == ["trtwarm-init"]


def test_valid_looking_combinations_that_would_break_are_refused() -> None:
    with pytest.raises(helm.HelmError, match="needs cache.pvc.existingClaim"):
        render({"cache": {"pvc": {"create": False}}})
    with pytest.raises(helm.HelmError, match="gc.mode=sidecar needs exporter.enabled"):
        render({"gc": {"mode": "sidecar"}, "exporter": {"enabled": False}})
    with pytest.raises(helm.HelmError, match="gc.mode=cronjob needs exporter.enabled"):
        render({"gc": {"mode": "cronjob"}, "exporter": {"enabled": False}})
    with pytest.raises(helm.HelmError, match="DirectoryOrCreate makes a root-owned"):
        render({"cache": {"type": "hostPath"}})
    with pytest.raises(helm.HelmError, match="metrics.enabled needs exporter.enabled"):
        render({"metrics": {"enabled": True, "kind": "ServiceMonitor"}, "exporter": {"enabled": False}})


def test_the_cache_claim_outlives_the_release_and_the_model_volume_is_not_re_owned() -> None:
    objs = objects(render({"engine": {"model": {"volume": {"persistentVolumeClaim": {"claimName": "models"}}}}}))
    pvc = next(o for o in objs if o["kind"] == "PersistentVolumeClaim")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    model = next(v for v in pod_spec(objs)["volumes"] if v["name"] == "trtwarm-model")
    assert model["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}


def test_fix_permissions_runs_before_the_exporter_and_survives_root_squash() -> None:
    spec = pod_spec(objects(render({"cache": {"fixPermissions": {"enabled": True}}})))
    assert [c["name"] for c in spec["initContainers"]][:2] == ["trtwarm-fix-permissions", "trtwarm-exporter"]
    script = container(spec, "trtwarm-fix-permissions")["args"][0]
    proc = subprocess.run(["sh", "-c", script.replace("/models/cache", "/nonexistent/cache")], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and "root_squash" in proc.stderr


def test_monitoring_objects_carry_the_release_label_guards_and_per_pod_alerts() -> None:
    values = values_of(CHART / "ci" / "legacy-exporter-values.yaml")
    objs = objects(render(values))
    rule = next(o for o in objs if o["kind"] == "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    failed = alerts["TrtwarmInitFailed"]["expr"]
    assert "sum by (namespace, pod)" in failed and "kube_pod_init_container_status_restarts_total" in failed
    assert "max by (namespace, cache_volume)" in alerts["TrtwarmEngineQuarantined"]["expr"]
    monitor = next(o for o in objs if o["kind"] == "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["relabelings"] == [
        {"targetLabel": "cache_volume", "replacement": "pvc/rel-trtwarm-cache"}]


def test_notes_read_the_crash_loop_message_and_skip_a_disabled_exporter() -> None:
    notes = next(t for p, t in render({"exporter": {"enabled": False}}).items() if p.endswith("NOTES.txt"))
    assert "lastState.terminated.message" in notes and "-c trtwarm-exporter" not in notes
    assert "ReadWriteOnce only" in notes
