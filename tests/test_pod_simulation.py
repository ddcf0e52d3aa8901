"""Pod simulation: the chart's rendered Pod spec, run as local processes in Pod order.

Each volume becomes a directory (the cache one shared by the simulated Pods), each container's command, args and
env are taken from the rendered spec with mount paths mapped onto those directories and the downward API filled
in, and the native sidecar runs in the background like the kubelet runs it. This proves the chart's wiring (flags,
paths, env, probes, the hand-off), not just its syntax.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import cmd_init_args, env_for, run_trtwarm, wait_until
from k8s import ROOT, container, objects, pod_spec, render, validate
from test_sidecar import free_port, get

from trtwarm.cli.demo import make_model
from trtwarm.volume.entry import check_entry

pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
pytestmark = pytest.mark.concurrency

VALUES = {
    "workload": {"container": {"name": "server", "resources": {"limits": {"nvidia.com/gpu": 1}}}},
    "engine": {"builder": "onnxruntime", "model": {"path": "/models/src/mlp.onnx",
                                                   "volume": {"persistentVolumeClaim": {"claimName": "models"}}},
               "shapes": {"input": "1x16:8x16:32x16"}, "verify": "load", "triton": {"enabled": True, "model": "mlp"}},
    "exporter": {"scanInterval": "1s"},
    "gc": {"mode": "sidecar", "interval": "1h"},
}
ENTRYPOINTS = {"trtwarm-init": ROOT / "cmd" / "trtwarm-init", "trtwarm-sidecar": ROOT / "cmd" / "trtwarm-sidecar"}


class SimulatedPod:
    """One Pod of the rendered workload, its volumes as directories."""

    def __init__(self, spec: dict[str, Any], name: str, root: Path, shared: dict[str, Path]) -> None:
        self.spec, self.name = spec, name
        self.volumes = {v["name"]: shared.get(v["name"]) or root / name / v["name"] for v in spec["volumes"]}
        for path in self.volumes.values():
            path.mkdir(parents=True, exist_ok=True)
        self.sidecars: dict[str, tuple[subprocess.Popen[str], int]] = {}

    def host_path(self, c: dict[str, Any], path: str) -> str:
        """Map a path inside container *c* onto this machine through its volume mounts."""
        for mount in sorted(c.get("volumeMounts", []), key=lambda m: -len(m["mountPath"])):
            root = mount["mountPath"].rstrip("/")
            if path == root or path.startswith(root + "/"):
                return str(self.volumes[mount["name"]]) + path[len(root):]
        return path

    def _arg(self, c: dict[str, Any], arg: str, port: int | None) -> str:
        flag, sep, value = arg.partition("=")
        if flag == "--port" and port is not None:
            return f"--port={port}"
        return flag + sep + self.host_path(c, value) if sep and value.startswith("/") else arg

    def env(self, c: dict[str, Any]) -> dict[str, str]:
        fields = {"metadata.name": self.name, "metadata.namespace": "ml", "metadata.uid": f"uid-{self.name}",
                  "spec.nodeName": "gpu-node-1"}
        out = {}
        for item in c.get("env", []):
            if "valueFrom" in item:
                out[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                value = str(item["value"])
                out[item["name"]] = self.host_path(c, value) if value.startswith("/") else value
        return env_for(out)

    def argv(self, c: dict[str, Any], port: int | None = None) -> list[str]:
        command = c["command"]
        assert command[0] in ENTRYPOINTS, f"{c['name']} runs {command[0]}, not a trtwarm entrypoint"
        args = [self._arg(c, str(a), port) for a in c.get("args", [])]
        return [sys.executable, str(ENTRYPOINTS[command[0]]), *args, *(["--bind=127.0.0.1"] if port else [])]

    def start_sidecar(self, c: dict[str, Any]) -> None:
        port = free_port()
        proc = subprocess.Popen(self.argv(c, port), env=self.env(c), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.sidecars[c["name"]] = (proc, port)
        wait_until(lambda: _up(port, proc), what=f"{self.name}/{c['name']} started")

    def run_inits(self) -> list[subprocess.CompletedProcess[str]]:
        """Init containers in order: native sidecars start and keep running, the others must succeed."""
        done = []
        for c in self.spec.get("initContainers", []):
            if c.get("restartPolicy") == "Always":
                if c["name"] not in self.sidecars:  # a test may have started it already, to probe it early
                    self.start_sidecar(c)
                continue
            proc = subprocess.run(self.argv(c), env=self.env(c), capture_output=True, text=True, timeout=180,
                                  check=False)
            assert proc.returncode == 0, f"{self.name}/{c['name']} failed: {proc.stderr[-2000:]}"
            done.append(proc)
        return done

    def probe(self, name: str, kind: str = "readinessProbe") -> int:
        """The rendered probe of container *name* as the kubelet runs it: an HTTP GET against its simulated port
        (its status code), or a command with the container's paths mapped (200 when it exits 0, else 503)."""
        c = container(self.spec, name)
        probe = c[kind]
        if "exec" in probe:
            argv = [self.host_path(c, a) if a.startswith("/") else a for a in probe["exec"]["command"]]
            return 200 if subprocess.run(argv, check=False).returncode == 0 else 503
        proc, port = self.sidecars[name]
        assert proc.poll() is None
        return get(f"http://127.0.0.1:{port}{probe['httpGet']['path']}")[0]

    def metrics(self, name: str = "trtwarm-exporter") -> str:
        return get(f"http://127.0.0.1:{self.sidecars[name][1]}/metrics")[1]

    def stop(self) -> list[int]:
        codes = []
        for proc, _port in self.sidecars.values():
            proc.send_signal(signal.SIGTERM)
            codes.append(proc.wait(timeout=10))
            proc.communicate()
        return codes


def _up(port: int, proc: subprocess.Popen[str]) -> bool:
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    try:
        return get(f"http://127.0.0.1:{port}/healthz", timeout=1)[0] == 200
    except (OSError, urllib.error.URLError):
        return False


def run_server_container(pod: SimulatedPod) -> Path:
    """What the inference container does: open $TRTWARM_ENGINE and run it."""
    import numpy as np
    import onnxruntime as ort

    server = container(pod.spec, "server")
    engine = Path(pod.env(server)["TRTWARM_ENGINE"])
    target = engine.resolve()
    check_entry(target.parent, None, digest=True)
    out = ort.InferenceSession(str(engine)).run(None, {"input": np.ones((4, 16), "float32")})
    assert out[0].shape == (4, 4)
    return target


def test_two_simulated_pods_build_once_turn_ready_and_serve_the_engine(tmp_path: Path) -> None:
    spec = pod_spec(objects(render(VALUES)))
    models = tmp_path / "volumes" / "models"
    make_model(models / "mlp.onnx")
    time.sleep(2.1)  # past the stat cache's racy window
    shared = {"trtwarm-cache": tmp_path / "volumes" / "cache", "trtwarm-model": models}
    pods = [SimulatedPod(spec, f"server-{i}", tmp_path / "pods", shared) for i in range(2)]
    try:
        for pod in pods:  # sidecars first, as the kubelet starts them
            pod.start_sidecar(container(spec, "trtwarm-exporter"))
            assert pod.probe("trtwarm-exporter") == 503  # not Ready before the engine
        errors: list[BaseException] = []
        threads = [threading.Thread(target=_catching(pod.run_inits, errors)) for pod in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert not errors, errors
        results = [json.loads((pod.volumes["trtwarm-handoff"] / "engine.json").read_text())["result"]
                   for pod in pods]
        assert sorted(results)[0] == "built" and results.count("built") == 1, results
        assert len(list((shared["trtwarm-cache"] / "entries").iterdir())) == 1
        for pod, result in zip(pods, results):
            wait_until(lambda p=pod: p.probe("trtwarm-exporter") == 200, what="readyz 200")
            assert f'trtwarm_init_total{{result="{result}"}} 1.0' in pod.metrics()
            engine = run_server_container(pod)
            triton = pod.volumes["trtwarm-handoff"] / "triton" / "mlp"
            assert 'platform: "onnxruntime_onnx"' in (triton / "config.pbtxt").read_text()
            assert (triton / "1" / "model.onnx").resolve() == engine
            lease = next((shared["trtwarm-cache"] / ".leases").rglob(f"ml.{pod.name}.json"))
            sidecar_pid = pod.sidecars["trtwarm-exporter"][0].pid
            wait_until(lambda f=lease, p=sidecar_pid: json.loads(f.read_text())["pid"] == p,
                       what="the exporter holds the Pod's lease")
    finally:
        codes = [pod.stop() for pod in pods]
    assert codes == [[0], [0]]
    left = list((shared["trtwarm-cache"] / ".leases").rglob("ml.server-*.json"))
    assert not left, [(p.name, p.read_text(), p.stat().st_mtime) for p in left]  # released on SIGTERM


def _catching(fn, errors: list[BaseException]):  # noqa: ANN001, ANN202
    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread's assertion
            errors.append(exc)

    return run


def test_readiness_survives_a_restart_of_the_exporter_and_liveness_watches_it(tmp_path: Path) -> None:
    """Issue 28 F4: the Pod is Ready once the init handed the engine over, by a check the kubelet runs on the
    hand-off; a restarted exporter (its memory of the hand-off gone) does not make it NotReady."""
    spec = pod_spec(objects(render(VALUES)))
    models = tmp_path / "volumes" / "models"
    make_model(models / "mlp.onnx")
    pod = SimulatedPod(spec, "server-0", tmp_path / "pods", {"trtwarm-model": models})
    exporter = container(spec, "trtwarm-exporter")
    try:
        pod.start_sidecar(exporter)
        assert pod.probe("trtwarm-exporter") == 503 and pod.probe("trtwarm-exporter", "livenessProbe") == 200
        pod.run_inits()
        assert pod.probe("trtwarm-exporter") == 200
        proc, _port = pod.sidecars.pop("trtwarm-exporter")
        proc.kill()  # the kubelet restarts a crashed native sidecar
        proc.communicate()
        pod.start_sidecar(exporter)
        assert pod.probe("trtwarm-exporter") == 200 and pod.probe("trtwarm-exporter", "livenessProbe") == 200
        run_server_container(pod)
        cache = pod.volumes["trtwarm-cache"]
        cache.rename(cache.with_name("cache-gone"))  # the cache volume unreachable: the probe never looks there
        try:
            assert pod.probe("trtwarm-exporter") == 200
        finally:
            cache.with_name("cache-gone").rename(cache)
    finally:
        assert pod.stop() == [0]


def test_the_legacy_exporter_runs_beside_the_server_and_gates_readiness(tmp_path: Path) -> None:
    spec = pod_spec(objects(render({**VALUES, "exporter": {"mode": "legacy", "scanInterval": "1s"}})))
    models = tmp_path / "volumes" / "models"
    make_model(models / "mlp.onnx")
    pod = SimulatedPod(spec, "server-0", tmp_path / "pods", {"trtwarm-model": models})
    try:
        pod.run_inits()
        pod.start_sidecar(container(spec, "trtwarm-exporter"))  # a regular container, started after the inits
        assert pod.probe("trtwarm-exporter") == 200
        run_server_container(pod)
    finally:
        assert pod.stop() == [0]


def _job_pod(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    obj = next(o for o in objs if o["kind"] == kind)
    return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"] if kind == "CronJob" else obj["spec"]


def _run_rendered(pod: SimulatedPod, c: dict[str, Any], bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run a container whose command is `trtwarm ...` or `sh -c '... trtwarm ...'`, paths mapped onto the volumes."""
    bin_dir.mkdir()
    shim = bin_dir / "trtwarm"  # what the image's console script does
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m trtwarm \"$@\"\n")
    shim.chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    env = pod.env(c)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    if c["command"][:2] == ["sh", "-c"]:  # map every absolute path that starts a word or follows '='
        script = re.sub(r"(?<=[=\s])(/[^\s'\"]*)", lambda m: pod.host_path(c, m[1]), " " + c["args"][0])
        argv = ["sh", "-c", script]
    else:
        argv = [*c["command"], *[pod._arg(c, str(a), None) for a in c.get("args", [])]]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_rendered_gc_cronjob_and_helm_test_pod_run_against_a_real_cache(tmp_path: Path) -> None:
    values = {**VALUES, "gc": {"mode": "cronjob", "maxAge": "30d", "keepPerModel": 1}}
    objs = objects(render(values))
    models = tmp_path / "volumes" / "models"
    make_model(models / "mlp.onnx")
    shared = {"trtwarm-cache": tmp_path / "volumes" / "cache", "trtwarm-model": models}
    server = SimulatedPod(pod_spec(objs), "server-0", tmp_path / "pods", shared)
    try:
        server.run_inits()  # the exporter starts too (a native sidecar), and must be stopped: it outlived the test
        for kind, name in (("CronJob", "gc"), ("Pod", "verify")):
            spec = _job_pod(objs, kind)
            pod = SimulatedPod(spec, f"{name}-0", tmp_path / "pods", shared)
            proc = _run_rendered(pod, container(spec, name), tmp_path / f"bin-{name}")
            assert proc.returncode == 0, f"{kind}: {proc.stdout}{proc.stderr}"
        assert len(list((shared["trtwarm-cache"] / "entries").iterdir())) == 1  # in use: kept
    finally:
        assert server.stop() == [0]


def quick_start_values() -> dict[str, Any]:
    """The values block of the chart README's quick start."""
    import yaml

    text = (ROOT / "helm" / "trtwarm" / "README.md").read_text()
    block = re.search(r"```yaml\n(# quick-start values.*?)```", text, re.S)
    assert block, "the chart README has no quick-start values block"
    return yaml.safe_load(block[1])


TRICKY_BUILD = "sh -c 'echo \"step: build #1\" >&2; cp \"$0\" \"$1\"' {model} {output}"


def test_the_quick_start_pod_starts_with_a_build_command_holding_colons_and_hashes(tmp_path: Path) -> None:
    values = quick_start_values()
    assert validate(objects(render(values)), [29, 37]) == []  # as written in the README
    values["engine"].update({"builder": "command", "command": {"template": TRICKY_BUILD, "version": "cp: 1 #a"},
                             "model": {**values["engine"]["model"], "path": "/models/src/mlp.onnx"},
                             "shapes": {"input": "1x16:8x16:32x16"}, "keyExtra": {"note": "a #b"}})
    spec = pod_spec(objects(render(values)))
    init = container(spec, "trtwarm-init")
    assert f"--build-command={TRICKY_BUILD}" in init["args"] and "--key-extra=note=a #b" in init["args"]
    models = tmp_path / "volumes" / "models"
    make_model(models / "mlp.onnx")
    pod = SimulatedPod(spec, "quick-0", tmp_path / "pods", {"trtwarm-cache": tmp_path / "volumes" / "cache",
                                                             "trtwarm-model": models})
    try:
        [proc] = pod.run_inits()
        assert "step: build #1" in proc.stderr  # the whole command reached the shell
        wait_until(lambda: pod.probe("trtwarm-exporter") == 200, what="readyz 200")
        report = json.loads((pod.volumes["trtwarm-handoff"] / "engine.json").read_text())
        assert report["result"] == "built"
        engine = Path(pod.env(container(spec, "inference"))["TRTWARM_ENGINE"]).resolve()
        assert engine.read_bytes() == (models / "mlp.onnx").read_bytes()  # what the server container opens
        assert (pod.volumes["trtwarm-handoff"] / "triton" / "resnet50" / "config.pbtxt").is_file()
        assert container(spec, "inference")["command"] == ["tritonserver"]
    finally:
        assert pod.stop() == [0]


def test_with_gc_cronjob_the_exporter_keeps_the_lease_fresh_and_gc_keeps_the_engine(tmp_path: Path) -> None:
    values = {**VALUES, "gc": {"mode": "cronjob", "maxAge": "1d"},
              "exporter": {"scanInterval": "1s", "extraArgs": ["--lease-interval=1s"]}}
    objs = objects(render(values))
    spec = pod_spec(objs)
    models = tmp_path / "volumes" / "models"
    make_model(models / "mlp.onnx")
    shared = {"trtwarm-cache": tmp_path / "volumes" / "cache", "trtwarm-model": models}
    pod = SimulatedPod(spec, "server-0", tmp_path / "pods", shared)
    try:
        pod.run_inits()
        lease = next((shared["trtwarm-cache"] / ".leases").rglob("ml.server-0.json"))
        sidecar_pid = pod.sidecars["trtwarm-exporter"][0].pid
        wait_until(lambda: json.loads(lease.read_text())["pid"] == sidecar_pid, what="the exporter took the lease")
        stale = time.time() - 3600  # past the lease TTL and past gc.maxAge: only a refresh keeps the engine
        for path in [lease, *(shared["trtwarm-cache"] / "entries").rglob("*")]:
            os.utime(path, (stale, stale))
        wait_until(lambda: lease.stat().st_mtime > stale + 3000, what="the exporter refreshed the lease")
        gc_spec = _job_pod(objs, "CronJob")
        gc_pod = SimulatedPod(gc_spec, "gc-0", tmp_path / "pods", shared)
        proc = _run_rendered(gc_pod, container(gc_spec, "gc"), tmp_path / "bin-gc")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(list((shared["trtwarm-cache"] / "entries").iterdir())) == 1
        run_server_container(pod)  # the engine a running Pod uses is still there
    finally:
        assert pod.stop() == [0]


def test_a_gc_cronjob_that_finds_another_collector_at_work_succeeds(tmp_path: Path) -> None:
    from trtwarm.lifecycle.gc import VolumeGcLock
    from trtwarm.volume.layout import Layout

    objs = objects(render({**VALUES, "gc": {"mode": "cronjob", "maxBytes": "0"}}))
    cache = tmp_path / "volumes" / "cache"
    make_model(tmp_path / "m.onnx")
    assert run_trtwarm(*cmd_init_args(tmp_path / "m.onnx", cache, tmp_path / "h")).returncode == 0
    shutil.rmtree(cache / ".leases")  # its Pod is gone: the entry is garbage for the gc below
    gc_spec = _job_pod(objs, "CronJob")
    gc_pod = SimulatedPod(gc_spec, "gc-0", tmp_path / "pods", {"trtwarm-cache": cache})
    with VolumeGcLock(Layout(cache), "flock"):  # another release's CronJob on the same claim
        proc = _run_rendered(gc_pod, container(gc_spec, "gc"), tmp_path / "bin-gc")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "another gc holds the volume lock; skipping this run" in proc.stdout
    assert len(list((cache / "entries").iterdir())) == 1  # the other collector's job


@pytest.mark.mount
def test_helm_test_passes_on_a_read_only_cache_and_fails_on_an_unsigned_entry_under_trust(tmp_path: Path) -> None:
    """Issue 28 F14: the rendered `helm test` Pod mounts the cache read-only (here: a tmpfs remounted read-only) and,
    under a trust policy, fails on an entry no trusted key signed."""
    cache = tmp_path / "volumes" / "cache"
    cache.mkdir(parents=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(cache)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount tmpfs here (needs root / CAP_SYS_ADMIN): {exc}")
    try:
        make_model(tmp_path / "m.onnx")
        assert run_trtwarm(*cmd_init_args(tmp_path / "m.onnx", cache, tmp_path / "h")).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True, capture_output=True)
        keys = tmp_path / "keys"
        keys.mkdir()
        assert run_trtwarm("keys", "generate", "--out", str(keys / "ci")).returncode == 0
        trust = {"mode": "warn", "keys": [{"name": "ci", "public_key_file": "ci.pub"}],
                 "publicKeys": {"ci.pub": (keys / "ci.pub").read_text()}}
        for values, ok in (({}, True), ({"trust": trust}, False)):
            objs = objects(render({**VALUES, **values}))
            spec = _job_pod(objs, "Pod")
            verify = container(spec, "verify")
            assert {m["name"]: m.get("readOnly") for m in verify["volumeMounts"]}["trtwarm-cache"] is True
            pod = SimulatedPod(spec, f"test-{ok}", tmp_path / "pods", {"trtwarm-cache": cache})
            for config in (o for o in objs if o["kind"] == "ConfigMap"):  # what the kubelet projects
                for name, text in config["data"].items():
                    (pod.volumes["trtwarm-trust"] / name).write_text(text)
            proc = _run_rendered(pod, verify, tmp_path / f"bin-{ok}")
            assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
            if not ok:
                assert "untrusted" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    finally:
        subprocess.run(["umount", "-l", str(cache)], check=False, capture_output=True)
