"""The chart's remote-repository values (``remote.*``), rendered by the real Helm engine: the init's environment and
flags, credentials by Secret or workload identity, pull-only mode, and one prebuild Job per GPU product that runs a
matrix the real ``trtwarm`` parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k8s import CHART, ROOT, container, objects, pod_spec, render

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")


def values(name: str) -> dict:
    return yaml.safe_load((CHART / "ci" / name).read_text())


def test_remote_values_reach_the_init_container_and_never_a_secret_value() -> None:
    objs = objects(render(values("remote-values.yaml")))
    init = container(pod_spec(objs), "trtwarm-init")
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["TRTWARM_REMOTE"] == "s3://engines/prod" and env["TRTWARM_REMOTE_PUSH"] == "best-effort"
    assert env["AWS_ENDPOINT_URL"] == "http://minio.storage.svc:9000" and env["AWS_ALLOW_HTTP"] == "true"
    assert init["envFrom"] == [{"secretRef": {"name": "trtwarm-s3"}}]
    assert "--read-only" not in init["args"]
    assert not any(o["kind"] == "Secret" for o in objs)


def test_pull_only_mode_uses_the_slim_image_read_only_and_the_workload_identity() -> None:
    objs = objects(render(values("remote-pull-only-values.yaml")))
    spec = pod_spec(objs)
    init = container(spec, "trtwarm-init")
    assert "trtwarm-init-pull:" in init["image"] and "--read-only" in init["args"]
    assert {e["name"]: e.get("value") for e in init["env"]}["TRTWARM_TENSORRT_VERSION"] == "10.16.1.11+cu12"
    assert "envFrom" not in init
    [account] = [o for o in objs if o["kind"] == "ServiceAccount"]
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith(":role/trtwarm-engines-read")


def test_one_prebuild_job_per_gpu_product_with_a_matrix_trtwarm_accepts(tmp_path: Path) -> None:
    objs = objects(render(values("remote-values.yaml")))
    jobs = [o for o in objs if o["kind"] == "Job"]
    products = [j["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for j in jobs]
    assert products == ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]
    job = jobs[0]["spec"]["template"]["spec"]
    [main] = job["containers"]
    assert main["command"][:2] == ["trtwarm", "prebuild"] and main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    [config] = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-prebuild")]
    matrix = json.loads(config["data"]["matrix.json"])
    assert matrix["base"] == "/models/src"
    (tmp_path / "matrix.json").write_text(json.dumps(matrix))
    sys.path.insert(0, str(ROOT))
    from trtwarm.cli.matrix import matrix_rows

    [(label, flags)] = matrix_rows(tmp_path / "matrix.json")
    assert label == "resnet50/fp16" and "/models/src/resnet50.onnx" in flags and "--builder" in flags


def test_prebuild_without_a_url_fails_to_render_with_the_reason() -> None:
    with pytest.raises((subprocess.CalledProcessError, Exception)) as err:
        render({"remote": {"prebuild": {"enabled": True, "gpuProducts": ["X"]}}})
    assert "remote.prebuild.enabled needs remote.url" in str(getattr(err.value, "stderr", "") or err.value)


def test_deploy_remote_prebuild_jobs_validate_and_select_one_gpu_product_each() -> None:
    from k8s import manifests, validate

    objs = manifests(ROOT / "deploy" / "remote" / "prebuild-jobs.yaml")
    assert validate(objs, range(29, 38)) == []
    jobs = [o for o in objs if o["kind"] == "Job"]
    assert [j["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for j in jobs] == [
        "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]
    [config] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert json.loads(config["data"]["matrix.json"])["models"][0]["model"] == "resnet50.onnx"


def test_the_ci_workflow_example_runs_prebuild_per_gpu_runner_and_a_matrix_trtwarm_accepts() -> None:
    from trtwarm.cli.matrix import matrix_rows

    flow = yaml.safe_load((ROOT / "deploy" / "remote" / "github-actions-prebuild.yml").read_text())
    steps = flow["jobs"]["prebuild"]["steps"]
    assert any("trtwarm prebuild --matrix deploy/remote/matrix.json" in s.get("run", "") for s in steps)
    assert flow["jobs"]["prebuild"]["strategy"]["matrix"]["runner"] == ["gpu-h100", "gpu-a100"]
    assert "models/**" in flow[True]["push"]["paths"]  # YAML 1.1 reads the key `on` as True
    rows = matrix_rows(ROOT / "deploy" / "remote" / "matrix.json")
    assert [label for label, _ in rows] == ["resnet50/fp16", "bert-base/fp16"]
    assert "/models/src/bert-base.onnx" in rows[1][1]


def test_a_pull_only_consumer_under_enforce_writes_what_it_pulls_and_checks_signatures() -> None:
    vals = values("remote-pull-only-values.yaml")
    vals["trust"] = {"mode": "enforce", "role": "consumer", "keys": [{"name": "ci", "public_key_file": "ci.pub"}],
                     "publicKeys": {"ci.pub": "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n"
                                              "-----END PUBLIC KEY-----\n"}}
    init = container(pod_spec(objects(render(vals))), "trtwarm-init")
    assert "--trust-mode=enforce" in init["args"] and "--read-only" in init["args"]
    cache = next(m for m in init["volumeMounts"] if m["name"] == "trtwarm-cache")
    assert not cache.get("readOnly")  # the pulled engine is published on the volume
