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
    assert kinds == ["Deployment", "PersistentVolumeClaim", "Pod"]  # the Pod is the `helm test` hook
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
                                       "dependencies:\n  - name: trtwarm\n    version: 0.1.0\n")
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
