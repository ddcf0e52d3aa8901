"""``trtwarm prewarm`` against a real SeaweedFS and a real registry: a node's cache filled from the repository before
any Pod lands, so the Pod's init is a hit with no build and no pull. The chart's pre-warm, keyed from declared GPU
facts with no GPU library, is in ``tests/test_prewarm_chart.py``."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from conftest import debris, entries, ort_init_args, run_trtwarm
from registry import Registry, registry_binary
from s3server import SeaweedServer


def _matrix(tmp_path: Path, model: Path, *extra: dict[str, Any]) -> Path:
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({
        "models": [{"model": model.name, "shape": ["input=1x16:8x16:32x16"]}, *extra],
        "options": {"builder": "onnxruntime"}}))
    (tmp_path / model.name).write_bytes(model.read_bytes())
    return matrix


def test_prewarm_pulls_what_ci_prebuilt_and_the_pod_then_hits(s3: SeaweedServer, model: Path,
                                                               tmp_path: Path) -> None:
    url = "s3://engines/prewarm-pulls"
    env = {**s3.env(), "TRTWARM_REMOTE": url}
    matrix = _matrix(tmp_path, model, {"model": model.name, "name": "never-prebuilt",
                                       "shape": ["input=2x16:8x16:16x16"]})
    (tmp_path / "ci").mkdir()
    ci = _matrix(tmp_path / "ci", model)  # what CI prebuilds: the first row only
    assert run_trtwarm("prebuild", "--matrix", str(ci), env=env).returncode == 0

    node = tmp_path / "node-cache"
    dry = run_trtwarm("prewarm", "--matrix", str(matrix), "--cache-dir", str(node), "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    assert [json.loads(line)["result"] for line in dry.stdout.splitlines()] == ["would pull", "absent"]
    assert not node.exists() or entries(node) == []  # --dry-run changes nothing

    first = run_trtwarm("prewarm", "--matrix", str(matrix), "--cache-dir", str(node), "--json", env=env)
    assert first.returncode == 0, first.stderr  # a row the repository lacks is reported, not a failure
    rows = [json.loads(line) for line in first.stdout.splitlines()]
    assert [r["result"] for r in rows] == ["pulled", "absent"], rows
    assert rows[0]["bytes"] > 0 and len(entries(node)) == 1 and debris(node) == []
    again = run_trtwarm("prewarm", "--matrix", str(matrix), "--cache-dir", str(node), env=env)
    assert again.returncode == 0 and "present" in again.stdout and "1 present, 1 absent" in again.stdout

    # the Pod that lands on the node afterwards: a hit, no build, no pull (the store is not even asked)
    pod = run_trtwarm(*ort_init_args(tmp_path / model.name, node, tmp_path / "handoff"))
    assert pod.returncode == 0, pod.stderr
    assert pod.summary["result"] == "hit"
    assert rows[0]["key"].startswith(pod.summary["key"])


def test_prewarm_says_what_failed_and_exits_with_its_code(s3: SeaweedServer, model: Path, tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, model)
    node = tmp_path / "node-cache"
    with socket.socket() as sock:  # a port nobody listens on: the store is unreachable
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = {**s3.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "TRTWARM_REMOTE": "s3://engines/x"}
    down = run_trtwarm("prewarm", "--matrix", str(matrix), "--cache-dir", str(node), env=dead, timeout=300)
    assert down.returncode in (10, 13), down.stderr  # the kubelet retries the init container with its back-off
    assert "failed" in down.stdout and "Traceback" not in down.stderr
    assert not node.exists() or entries(node) == []

    missing = run_trtwarm("prewarm", "--matrix", str(matrix), "--cache-dir", str(node), env=s3.env())
    assert missing.returncode == 2 and "--remote" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    broken = run_trtwarm("prewarm", "--matrix", str(bad), "--remote", "s3://engines/x", "--cache-dir", str(node),
                         env=s3.env())
    assert broken.returncode == 2 and "--matrix" in broken.stderr and "Traceback" not in broken.stderr


@pytest.mark.skipif(registry_binary() is None, reason="docker-registry is missing (apt-get install docker-registry)")
def test_prewarm_pulls_from_an_oci_registry_with_the_inits_credentials(model: Path, tmp_path: Path) -> None:
    """`oci://` as `init` takes it: the registry's credentials from the auth file (`REGISTRY_AUTH_FILE`, which the
    chart points at the mounted `remote.oci.authSecret`); none, or wrong ones, fail with exit 11 and no pull."""
    server = Registry(tmp_path / "registry", user=("ci", "pull-secret-1618")).start()
    try:
        home = tmp_path / "home"
        home.mkdir()
        anonymous = {"HOME": str(home), "DOCKER_CONFIG": str(home / ".docker"), "REGISTRY_AUTH_FILE": ""}
        auth = {**anonymous, "REGISTRY_AUTH_FILE": str(server.auth_file(tmp_path / "auth.json"))}
        url = f"oci://{server.addr}/engines/prewarm"
        matrix = _matrix(tmp_path, model)
        assert run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", url, env=auth).returncode == 0
        node = tmp_path / "node-cache"
        dry = run_trtwarm("prewarm", "--matrix", str(matrix), "--remote", url, "--cache-dir", str(node), "--dry-run",
                          "--json", env=auth)
        assert dry.returncode == 0 and json.loads(dry.stdout)["result"] == "would pull", dry.stderr
        for env in (anonymous, {**anonymous, "REGISTRY_AUTH_FILE": str(server.auth_file(tmp_path / "w.json",
                                                                                        ("ci", "wrong-1234")))}):
            refused = run_trtwarm("prewarm", "--matrix", str(matrix), "--remote", url, "--cache-dir", str(node),
                                  env=env)
            assert refused.returncode == 11 and "Traceback" not in refused.stderr, refused.stderr
            assert "wrong-1234" not in refused.stderr + refused.stdout
            assert not node.exists() or entries(node) == []
        pulled = run_trtwarm("prewarm", "--matrix", str(matrix), "--remote", url, "--cache-dir", str(node), "--json",
                             env=auth)
        assert pulled.returncode == 0 and json.loads(pulled.stdout)["result"] == "pulled", pulled.stderr
        assert len(entries(node)) == 1 and debris(node) == []
        pod = run_trtwarm(*ort_init_args(tmp_path / model.name, node, tmp_path / "handoff"))
        assert pod.returncode == 0 and pod.summary["result"] == "hit", pod.stderr
    finally:
        server.stop()


@pytest.mark.parametrize(("facts", "message"), [
    (["--gpu-product", "NVIDIA H100 80GB HBM3"], "go together"),
    (["--gpu-product", "NVIDIA H100 80GB HBM3", "--gpu-compute-capability", "9",
      "--gpu-memory-gib", "80"], "--gpu-compute-capability '9' is not MAJOR.MINOR"),
    (["--gpu-product", "NVIDIA H100 80GB HBM3", "--gpu-compute-capability", "9.0",
      "--gpu-memory-gib", "80GiB"], "--gpu-memory-gib '80GiB'"),
    (["--gpu-product", " ", "--gpu-compute-capability", "9.0", "--gpu-memory-gib", "80"], "is not a GPU name"),
    (["--gpu-product", "NVIDIA\x1bH100", "--gpu-compute-capability", "9.0", "--gpu-memory-gib", "80"],
     "is not a GPU name"),
])
def test_declared_gpu_facts_that_cannot_be_a_gpus_are_refused_before_any_row(
        facts: list[str], message: str, model: Path, tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, model)
    run = run_trtwarm("prewarm", "--matrix", str(matrix), "--remote", "s3://engines/x", "--cache-dir",
                      str(tmp_path / "c"), *facts, env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ALLOW_HTTP":
                                                        "true", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"})
    assert run.returncode == 2 and message in run.stderr and "hint:" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "c").exists()
