"""The chart's node pre-warm, run as the kubelet would run it: the rendered ``trtwarm prewarm`` command with the
rendered environment, in a process with no GPU library, against a real repository (SeaweedFS, a registry). The keys
it pulls are the keys an init resolves on that node (the rendered ``trtwarm-init`` flags, in a process whose NVML
answers as that node's GPUs do: ``tests/nvml_stub``), for a plain GPU, a MIG slice and two products in one cluster.
No TensorRT: a TensorRT row's key needs only the declared version; the pull test builds with the command builder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Run
from k8s import container, objects, pod_spec, render, validate
from registry import Registry
from s3server import SeaweedServer

from trtwarm.cli.demo import make_model

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
STUB = ROOT / "tests" / "nvml_stub"
TENSORRT = "10.16.1.11+cu12"
SHAPE = "input=1x16:8x16:32x16"
#: the GPU classes of one cluster: the chart's prewarm.gpus entry, the node's NVML as the init sees it, and what the
#: device plugin hands a Pod that asks for the class's resource (NVIDIA_VISIBLE_DEVICES)
CLASSES: dict[str, dict[str, Any]] = {
    "h100": {"gpu": {"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0", "memoryGiB": 80},
             "resource": "nvidia.com/gpu", "visible": "GPU-h100-0001",
             "nvml": {"top": ["g0", "g1"], "devices": {
                 "g0": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100-0000", "cc": [9, 0], "memory": 85520809984,
                        "pci": "00000000:19:00.0"},
                 "g1": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100-0001", "cc": [9, 0], "memory": 85520809984,
                        "pci": "00000000:3B:00.0"}}}},
    "h100-mig": {"gpu": {"product": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "computeCapability": 9.0, "memoryGiB": 10},
                 "resource": "nvidia.com/mig-1g.10gb", "visible": "MIG-h100-m1",
                 "nvml": {"top": ["g0"], "devices": {
                     "g0": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-h100-0000", "cc": [9, 0],
                            "memory": 85520809984, "children": ["m0", "m1"]},
                     "m0": {"name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "uuid": "MIG-h100-m0", "parent": "g0",
                            "memory": 42949672960},
                     "m1": {"name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "uuid": "MIG-h100-m1", "parent": "g0",
                            "memory": 10468982784}}}},
    "a100": {"gpu": {"product": "NVIDIA A100-SXM4-80GB", "computeCapability": "8.0", "memoryGiB": 80},
             "resource": "nvidia.com/gpu", "visible": "GPU-a100-0000",
             "nvml": {"top": ["g0"], "devices": {
                 "g0": {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100-0000", "cc": [8, 0], "memory": 85899345920,
                        "pci": "00000000:07:00.0"}}}},
}


def _values(remote: dict[str, Any], engine: dict[str, Any], matrix_options: dict[str, Any], resource: str) -> dict:
    return {"cache": {"type": "hostPath", "hostPath": {"path": "/var/lib/trtwarm/cache", "type": "Directory"}},
            "remote": remote,
            "engine": {"model": {"path": "/models/src/mlp.onnx",
                                 "volume": {"persistentVolumeClaim": {"claimName": "models"}}}, **engine},
            "workload": {"container": {"resources": {"limits": {"nvidia.com/gpu": None, resource: 1}}}},
            "prewarm": {"enabled": True, "gpus": [c["gpu"] for c in CLASSES.values()],
                        "matrix": {"models": [{"model": "mlp.onnx", "shape": [SHAPE]}], "options": matrix_options}}}


class Node:
    """One GPU node's paths and processes: a cache, the model mount, the matrix ConfigMap, the rendered commands."""

    def __init__(self, tmp: Path, kind: str, model: Path, env: dict[str, str]) -> None:
        self.tmp, self.kind, self.env = tmp / kind, kind, env
        self.tmp.mkdir(parents=True)
        self.paths = {"/models/cache": str(self.tmp / "cache"), "/models/src": str(model.parent),
                      "/etc/trtwarm/matrix": str(self.tmp / "matrix"), "/trtwarm": str(self.tmp / "handoff")}

    def map(self, text: str) -> str:
        """A rendered path (in an argument or a variable) where this test keeps it."""
        for pod, here in self.paths.items():
            text = re.sub(rf"(?<![\w/-]){re.escape(pod)}(?=/|$|\s)", here, text)
        return text

    def _run(self, argv: list[str], env: dict[str, str], pythonpath: str) -> Run:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("TRTWARM_", "AWS_", "NVIDIA_", "CUDA_"))}
        full.update({**self.env, **env, "PYTHONPATH": f"{pythonpath}{os.pathsep}{ROOT}", "HOME": str(self.tmp)})
        proc = subprocess.run([sys.executable, "-m", "trtwarm", *argv], capture_output=True, text=True, env=full,
                              timeout=300, check=False)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def prewarm(self, daemonset: dict[str, Any], config: dict[str, Any], *extra: str) -> Run:
        """The DaemonSet's pre-warm init container, in a process where no GPU library can be imported."""
        (self.tmp / "matrix").mkdir(exist_ok=True)
        matrix = json.loads(config["data"]["matrix.json"])
        matrix["base"] = self.map(matrix["base"])
        (self.tmp / "matrix" / "matrix.json").write_text(json.dumps(matrix))
        spec = daemonset["spec"]["template"]["spec"]
        pull = container(spec, "trtwarm-prewarm")
        assert pull["command"][:2] == ["trtwarm", "prewarm"] and "args" not in pull
        blocked = self.tmp / "no-gpu-library"
        blocked.mkdir(exist_ok=True)
        (blocked / "pynvml.py").write_text("raise ImportError('this node has no GPU library for the pre-warm')\n")
        return self._run([self.map(a) for a in pull["command"][1:]] + list(extra), _env(pull, self), str(blocked))

    def init(self, deployment: dict[str, Any], command: str = "init", *extra: str) -> Run:
        """The workload's trtwarm-init on this node: its rendered flags and variables; NVML as the node's GPUs answer
        it, with the GPU the device plugin allocated to the Pod."""
        init = container(pod_spec([deployment]), "trtwarm-init")
        (self.tmp / "nvml.json").write_text(json.dumps(CLASSES[self.kind]["nvml"]))
        env = {**_env(init, self), "NVML_STUB_DEVICES": str(self.tmp / "nvml.json"),
               "NVIDIA_VISIBLE_DEVICES": CLASSES[self.kind]["visible"]}
        return self._run([command, *(self.map(a) for a in init["args"]), *extra], env, str(STUB))


def _env(c: dict[str, Any], node: Node) -> dict[str, str]:
    """A container's rendered variables with their values (downward-API ones as the kubelet would fill them)."""
    out = {"POD_NAME": f"{node.kind}-pod", "POD_NAMESPACE": "ml", "POD_UID": "uid", "NODE_NAME": node.kind}
    out.update({e["name"]: node.map(str(e["value"])) for e in c.get("env", []) if "value" in e})
    out.pop("HOME", None)
    return out


def _rendered(values: dict[str, Any]) -> tuple[dict[str, dict], dict, dict]:
    """(pre-warm DaemonSets by product, the matrix ConfigMap, the Deployment), validated."""
    objs = objects(render(values))
    assert validate(objs, [29, 33, 37]) == []
    daemonsets = {d["metadata"]["annotations"]["trtwarm.io/gpu-product"]: d for d in objs if d["kind"] == "DaemonSet"}
    [config] = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-prewarm")]
    [deployment] = [o for o in objs if o["kind"] == "Deployment"]
    return daemonsets, config, deployment


def test_the_prewarm_keys_each_gpu_class_exactly_as_an_init_on_that_node_without_a_gpu(
        s3: SeaweedServer, tmp_path: Path) -> None:
    """TensorRT rows (the chart's default builder) against S3: the DaemonSet of each class computes, with no GPU and
    no GPU library, the key `trtwarm key` resolves with the rendered init flags on a node of that class."""
    model = make_model(tmp_path / "models" / "mlp.onnx")
    remote = {"url": "s3://engines/prewarm-keys", "endpoint": s3.endpoint, "allowHttp": True,
              "tensorrtVersion": TENSORRT, "credentials": {"secretName": "s3-creds"}}
    secret = {k: v for k, v in s3.env().items() if k.startswith("AWS_ACCESS") or k.startswith("AWS_SECRET")}
    engine = {"shapes": {"input": SHAPE.split("=", 1)[1]}}
    products = set()
    for kind, cls in CLASSES.items():
        daemonsets, config, deployment = _rendered(_values(remote, engine, {"builder": "tensorrt"}, cls["resource"]))
        node = Node(tmp_path, kind, model, secret)
        run = node.prewarm(daemonsets[cls["gpu"]["product"]], config, "--dry-run", "--json")
        assert run.returncode == 0, run.stderr
        [row] = [json.loads(line) for line in run.stdout.splitlines()]
        assert row["result"] == "absent"  # nothing prebuilt: asked for, not found
        key = node.init(deployment, "key", "--json")
        assert key.returncode == 0, key.stderr
        document = json.loads(key.stdout)
        assert row["key"] == document["key"], (kind, document["document"]["device"])
        device = document["document"]["device"]
        assert device["product"] == cls["gpu"]["product"] and device["memory_gib"] == cls["gpu"]["memoryGiB"]
        assert device["mig_profile"] == ("1g.10gb" if kind == "h100-mig" else None)
        products.add(row["key"])
    assert len(products) == len(CLASSES)  # three GPUs, three keys: nothing keyed for the wrong GPU


def test_the_prewarm_pulls_from_oci_what_an_init_on_that_gpu_pushed_and_the_pod_then_hits(
        registry: Registry, tmp_path: Path) -> None:
    """An init on an H100 MIG slice builds and pushes to the registry; the MIG class's pre-warm DaemonSet, run on
    a fresh node with no GPU library, pulls exactly that engine; the Pod that lands there next is a hit. The other
    classes find nothing for their GPU (absent, not an error, and a warning naming the facts)."""
    model = make_model(tmp_path / "models" / "mlp.onnx")
    build = {"builder": "command", "command": {"template": "cp {model} {output}", "version": "cp-1"},
             "shapes": {"input": SHAPE.split("=", 1)[1]}}
    options = {"builder": "command", "build_command": "cp {model} {output}", "builder_version": "cp-1"}
    remote = {"url": f"oci://{registry.addr}/engines/prewarm-pull", "push": "required"}
    daemonsets, config, deployment = _rendered(_values(remote, build, options, "nvidia.com/mig-1g.10gb"))
    builder = Node(tmp_path, "h100-mig", model, {})
    built = builder.init(deployment)
    assert built.returncode == 0 and built.summary["result"] == "built", built.stderr
    for kind, cls in CLASSES.items():
        node = Node(tmp_path / "fresh", kind, model, {})
        run = node.prewarm(daemonsets[cls["gpu"]["product"]], config, "--json")
        assert run.returncode == 0, run.stderr
        [row] = [json.loads(line) for line in run.stdout.splitlines()]
        if kind != "h100-mig":
            assert row["result"] == "absent" and "declared facts" in run.stderr, (kind, row)
            continue
        assert row["result"] == "pulled" and row["key"].startswith(built.summary["key"]), row
        pod = node.init(deployment)
        assert pod.returncode == 0 and pod.summary["result"] == "hit", pod.stderr
        assert pod.summary["key"] == built.summary["key"]


def test_the_prewarm_pulls_from_a_registry_with_the_rendered_auth_file_and_refuses_without_it(tmp_path: Path) -> None:
    """`remote.oci.authSecret`: the DaemonSet mounts the dockerconfigjson Secret where its REGISTRY_AUTH_FILE points.
    With the Secret's file there the pre-warm pulls what an init pushed; without credentials the registry's 401 is a
    credentials failure (exit 11, the kubelet retries), never an `absent` that would hide a wrong Secret."""
    from registry import Registry, registry_binary

    if registry_binary() is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    server = Registry(tmp_path / "registry", user=("puller", "s3cret-pass")).start()
    try:
        model = make_model(tmp_path / "models" / "mlp.onnx")
        build = {"builder": "command", "command": {"template": "cp {model} {output}", "version": "cp-1"},
                 "shapes": {"input": SHAPE.split("=", 1)[1]}}
        options = {"builder": "command", "build_command": "cp {model} {output}", "builder_version": "cp-1"}
        remote = {"url": f"oci://{server.addr}/engines/auth", "push": "required", "oci": {"authSecret": "regcred"}}
        daemonsets, config, deployment = _rendered(_values(remote, build, options, "nvidia.com/gpu"))
        ds = daemonsets[CLASSES["a100"]["gpu"]["product"]]
        spec = ds["spec"]["template"]["spec"]
        pull = container(spec, "trtwarm-prewarm")
        env = {e["name"]: e.get("value") for e in pull["env"]}
        mount = next(m for m in pull["volumeMounts"] if m["name"] == "trtwarm-registry-auth")
        volume = next(v for v in spec["volumes"] if v["name"] == "trtwarm-registry-auth")
        assert volume["secret"]["secretName"] == "regcred" and mount["readOnly"] is True
        assert env["REGISTRY_AUTH_FILE"] == f"{mount['mountPath']}/.dockerconfigjson"
        secret = tmp_path / "secret"  # the Secret's projection: key .dockerconfigjson
        secret.mkdir()
        server.auth_file(secret / ".dockerconfigjson")
        builder = Node(tmp_path, "a100", model, {})
        builder.paths[mount["mountPath"]] = str(secret)
        built = builder.init(deployment)
        assert built.returncode == 0 and built.summary["result"] == "built", built.stderr
        node = Node(tmp_path / "fresh", "a100", model, {})
        node.paths[mount["mountPath"]] = str(secret)
        run = node.prewarm(ds, config, "--json")
        assert run.returncode == 0, run.stderr
        [row] = [json.loads(line) for line in run.stdout.splitlines()]
        assert row["result"] == "pulled" and row["key"].startswith(built.summary["key"]), row
        (secret / ".dockerconfigjson").write_text(json.dumps({"auths": {}}))  # the Secret names no credentials
        denied = Node(tmp_path / "denied", "a100", model, {})
        denied.paths[mount["mountPath"]] = str(secret)
        run = denied.prewarm(ds, config, "--json")
        [row] = [json.loads(line) for line in run.stdout.splitlines()]
        assert run.returncode == 11 and row["result"] == "failed", (run.returncode, row, run.stderr[-800:])
    finally:
        server.stop()
