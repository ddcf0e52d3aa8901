"""Kubernetes Events from ``trtwarm init``, through the real ``kubernetes`` client, to a local HTTP endpoint that
speaks the core/v1 events API (there is no cluster on these machines)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import cmd_init_args, env_for, run_trtwarm, trtwarm_argv, wait_until

pytest.importorskip("kubernetes", reason="the optional kubernetes client is not installed (pip install '.[test]')")


class FakeApi:
    """POST /api/v1/namespaces/<ns>/events -> 201, recording each body and its Authorization header."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.auth: list[str | None] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path.startswith("/api/v1/namespaces/") and self.path.endswith("/events")
                if ok:
                    api.events.append(json.loads(body))
                    api.auth.append(self.headers.get("Authorization"))
                self.send_response(201 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body if ok else b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "local", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "test-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "local", "user": "u", "namespace": "ml"}}]}))
    return path


@pytest.fixture
def api(tmp_path: Path):  # noqa: ANN201
    fake = FakeApi()
    # A loaded CI machine can take longer than the default 2 s to import the client and send; these tests are about
    # what is sent, so they allow more. The default budget is exercised by the unreachable-server test below.
    yield fake, {"POD_NAME": "web-0", "POD_NAMESPACE": "ml", "NODE_NAME": "gpu-node-1", "POD_UID": "uid-123",
                 "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", fake.url)), "TRTWARM_EVENTS_TIMEOUT": "30s"}
    fake.server.shutdown()


def test_build_then_hit_record_engine_built_and_cache_hit_on_the_pod(api, model: Path, cache: Path,
                                                                     tmp_path: Path) -> None:
    fake, env = api
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"), env=env).returncode == 0
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2"), env=env).returncode == 0
    assert fake.reasons() == ["EngineBuilt", "EngineCacheHit"]
    built = fake.events[0]
    assert built["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "ml",
                                       "uid": "uid-123"}
    assert built["type"] == "Normal" and built["metadata"]["namespace"] == "ml"
    assert built["message"].startswith("built mlp_") and built["message"].endswith(" s")
    assert built["source"]["component"] == "trtwarm" and built["source"]["host"] == "gpu-node-1"
    assert fake.auth == ["Bearer test-token"] * 2


def test_waiter_quarantine_and_failure_events(api, model: Path, cache: Path, tmp_path: Path) -> None:
    fake, env = api
    gate = tmp_path / "gate"
    gate.touch()
    started = tmp_path / "started"
    gated = f"sh -c 'touch {started}; while [ -e {gate} ]; do sleep 0.05; done; cp {{model}} {{output}}'"
    builder_args = cmd_init_args(model, cache, tmp_path / "hb")
    builder_args[builder_args.index("--build-command") + 1] = gated
    builder = subprocess.Popen(trtwarm_argv(*builder_args), env=env_for({**env, "POD_NAME": "builder-0"}),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: started.exists() or builder.poll() is not None, timeout=60)
    assert started.exists(), "the builder exited before building"  # it holds the key's lock before the waiter starts
    waiter_args = [*builder_args, "--handoff-dir", str(tmp_path / "hw"), "--progress-interval", "1s"]  # same key
    waiter = subprocess.Popen(trtwarm_argv(*waiter_args), env=env_for(env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    wait_until(lambda: "WaitingForEngineBuild" in fake.reasons(), what="WaitingForEngineBuild")
    gate.unlink()
    assert builder.wait(60) == 0 and waiter.wait(60) == 0
    waiting = next(e for e in fake.events if e["reason"] == "WaitingForEngineBuild")
    assert "builder-0" in waiting["message"] and "gpu-node-1" in waiting["message"]
    engine = json.loads((tmp_path / "hw" / "engine.json").read_text())["path"]
    Path(engine).write_bytes(b"flipped " + Path(engine).read_bytes()[8:])
    assert run_trtwarm(*builder_args, "--handoff-dir", str(tmp_path / "hq"), env=env).returncode == 0
    quarantined = next(e for e in fake.events if e["reason"] == "EngineQuarantined")
    assert quarantined["type"] == "Warning" and "SHA-256" in quarantined["message"]
    failing = cmd_init_args(model, cache, tmp_path / "hf", "--key-extra", "x=1")
    failing[failing.index("--build-command") + 1] = "sh -c 'exit 3' {output}"
    assert run_trtwarm(*failing, env=env).returncode == 4
    failed = fake.events[-1]
    assert failed["reason"] == "EngineBuildFailed" and failed["type"] == "Warning" and "status 3" in failed["message"]


def test_an_unreachable_api_server_never_fails_or_stalls_the_init(model: Path, cache: Path, tmp_path: Path) -> None:
    env = {"POD_NAME": "web-0", "POD_NAMESPACE": "ml",
           "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9"))}  # discard port: refused
    start = time.monotonic()
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"), env=env)
    took = time.monotonic() - start
    assert run.returncode == 0 and run.summary["result"] == "built"
    # One warning: the refused connection, or (on a CPU-starved machine) the 2 s budget running out first.
    warnings = run.stderr.count("cannot record Kubernetes events") + run.stderr.count("Kubernetes events not sent")
    assert warnings == 1, run.stderr
    assert "Traceback" not in run.stderr and took < 10


def test_in_a_pod_without_a_token_events_are_off_and_nothing_is_said(model: Path, cache: Path,
                                                                     tmp_path: Path) -> None:
    from trtwarm.node.podenv import TOKEN_PATH

    if Path(TOKEN_PATH).exists():
        pytest.skip(f"this machine has a service-account token at {TOKEN_PATH}")
    # the chart's default: the downward API's identity, in a cluster, rbac.events off (no token mounted)
    env = {"POD_NAME": "web-0", "POD_NAMESPACE": "ml", "KUBERNETES_SERVICE_HOST": "127.0.0.1",
           "KUBERNETES_SERVICE_PORT": "9"}
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"), env=env)
    assert run.returncode == 0 and run.summary["result"] == "built"
    assert "Kubernetes events" not in run.stderr, run.stderr
