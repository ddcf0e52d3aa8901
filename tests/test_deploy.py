"""deploy/ manifests, the Dockerfile and the images' entrypoints: validated, built with kustomize, wired like the
chart; PromQL checked by promtool (from the Debian prometheus package)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import env_for
from k8s import ROOT, CHART, assert_wired, container, flag, manifests, objects, pod_spec, render, validate
from pss import restricted
from trtwarm.volume.layout import Layout

DEPLOY = ROOT / "deploy"
NATIVE = range(29, 38)  # native sidecars
KUSTOMIZE = shutil.which("kustomize") or shutil.which("kubectl")
needs_kustomize = pytest.mark.skipif(KUSTOMIZE is None, reason="neither kustomize nor kubectl is on PATH")
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (bash .ci/run installs the prometheus package)")


def kustomize(path: Path) -> list[dict]:
    argv = [KUSTOMIZE, "build", str(path)] if KUSTOMIZE.endswith("kustomize") else [KUSTOMIZE, "kustomize", str(path)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("path", ["kustomize/base/deployment.yaml", "triton/deployment.yaml", "prebuild-job.yaml",
                                  "kustomize/overlays/rwx-pvc/pvc.yaml"])
def test_plain_manifests_validate(path: str) -> None:
    assert validate(manifests(DEPLOY / path), NATIVE) == []


@pytest.mark.parametrize("path", ["monitoring/podmonitor.yaml", "monitoring/prometheusrule.yaml"])
def test_monitoring_objects_have_their_required_fields(path: str) -> None:
    assert validate(manifests(DEPLOY / path)) == []


def test_base_and_triton_are_wired_like_the_chart() -> None:
    assert_wired(pod_spec(manifests(DEPLOY / "kustomize/base/deployment.yaml")), "inference")
    triton = pod_spec(manifests(DEPLOY / "triton/deployment.yaml"))
    assert_wired(triton, "triton")
    args = next(c for c in triton["containers"] if c["name"] == "triton")["args"]
    assert "--model-repository=/trtwarm/triton" in args


@needs_kustomize
@pytest.mark.parametrize("overlay,volume", [("rwx-pvc", "persistentVolumeClaim"), ("hostpath", "hostPath")])
def test_overlays_build_validate_and_pick_the_cache_volume(overlay: str, volume: str) -> None:
    objs = kustomize(DEPLOY / "kustomize" / "overlays" / overlay)
    assert validate(objs, NATIVE) == []
    spec = pod_spec(objs)
    assert_wired(spec, "inference")
    cache = next(v for v in spec["volumes"] if v["name"] == "trtwarm-cache")
    assert set(cache) == {"name", volume}
    if overlay == "rwx-pvc":
        assert next(o for o in objs if o["kind"] == "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]


POST_RENDERER = DEPLOY / "post-renderer" / "trtwarm"


def _third_party(name: str, containers: list[dict], inits: list[dict] | None = None) -> dict:
    spec: dict = {"containers": containers}
    if inits:
        spec["initContainers"] = inits
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}}, "spec": spec}}}


def _post_render(docs: list[dict], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return _post_render_text(yaml.safe_dump_all(docs), env, *args)


def _post_render_text(text: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the post-renderer as Helm does (this interpreter: it has ruamel.yaml, as `pip install` gives the user)."""
    return subprocess.run([sys.executable, str(POST_RENDERER / "post-render.py"), *args], input=text,
                          capture_output=True, text=True, env=env_for(env), check=False)


def test_the_post_renderer_patches_only_its_target_after_the_charts_own_init_containers() -> None:
    mig = {"nvidia.com/mig-3g.40gb": "1", "memory": "8Gi"}
    download = {"name": "download-model", "image": "example/fetch:1", "args": ["s3://models/m.onnx"]}
    server = {"name": "server", "image": "example/server:1", "resources": {"limits": mig, "requests": mig},
              "env": [{"name": "TRTWARM_ENGINE", "value": "/old"}]}
    gpu_app = _third_party("web", [server], [download])
    frontend = _third_party("web-frontend", [{"name": "server", "image": "example/ui:1"}])
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
    env = {"TRTWARM_TARGET": "Deployment/web", "TRTWARM_CONTAINER": "server", "TRTWARM_MODEL": "/models/src/m.onnx",
           "TRTWARM_ARGS": "--builder=tensorrt --verify=load --key-extra='note=a #b'"}
    proc = _post_render([gpu_app, frontend, service], env)
    assert proc.returncode == 0, proc.stderr
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert validate(objs, NATIVE) == []
    patched, untouched = (next(o for o in objs if o["metadata"]["name"] == n) for n in ("web", "web-frontend"))
    assert untouched == frontend and next(o for o in objs if o["kind"] == "Service") == service
    spec = patched["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["download-model", "trtwarm-exporter", "trtwarm-init"]
    init = next(c for c in spec["initContainers"] if c["name"] == "trtwarm-init")
    assert init["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert init["resources"]["requests"]["nvidia.com/mig-3g.40gb"] == "1"
    assert "nvidia.com/gpu" not in init["resources"]["limits"] and init["resources"]["limits"]["memory"] == "16Gi"
    assert "--verify=load" in init["args"] and "--key-extra=note=a #b" in init["args"]
    env_names = [e["name"] for e in spec["containers"][0]["env"]]
    assert env_names.count("TRTWARM_ENGINE") == 1 and spec["containers"][0]["env"][0]["value"] == "/trtwarm/engine"
    assert spec["securityContext"] == {"fsGroup": 1000, "fsGroupChangePolicy": "OnRootMismatch"}
    chart = pod_spec(objects(render({})))
    for name in ("trtwarm-exporter", "trtwarm-init"):
        mine = next(c for c in spec["initContainers"] if c["name"] == name)["securityContext"]
        charts = next(c for c in chart["initContainers"] if c["name"] == name)["securityContext"]
        assert {k: v for k, v in mine.items() if k != "seccompProfile"} == charts  # the chart sets seccomp per Pod
    assert [v for v in restricted(spec) if v.startswith("trtwarm-")] == []
    assert patched["spec"]["progressDeadlineSeconds"] == 3600


def test_the_post_renderer_wires_a_gpu_pod_like_the_chart() -> None:
    server = {"name": "server", "image": "example/server:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    proc = _post_render([_third_party("web", [server])], {}, "--target=web", "--container=server",
                        "--model=/models/src/m.onnx", "--model-claim=models")
    assert proc.returncode == 0, proc.stderr
    spec = pod_spec([d for d in yaml.safe_load_all(proc.stdout) if d])
    assert_wired(spec, "server")
    assert {"name": "trtwarm-models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in \
        spec["volumes"]


def test_the_post_renderer_gives_trtwarm_init_the_servers_dra_claims_like_the_chart() -> None:
    """On a DRA cluster the GPU comes by resource claim, not by `nvidia.com/gpu`: containers of one Pod share a claim,
    so trtwarm-init must name the server's claims (the chart copies them; so must the post-renderer) or it builds on
    no GPU at all."""
    claims = [{"name": "gpu"}, {"name": "shared", "request": "mig-1g"}]
    server = {"name": "server", "image": "example/server:1", "resources": {"claims": claims}}
    third = _third_party("web", [server])
    third["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "h100"}, {"name": "shared", "resourceClaimName": "mig"}]
    proc = _post_render([third], {}, "--target=web", "--container=server", "--model=/m.onnx")
    assert proc.returncode == 0, proc.stderr
    assert "&" not in proc.stdout and "*id" not in proc.stdout  # copied, not a YAML alias of the server's node
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert validate(objs, [33, 37]) == []
    spec = pod_spec(objs)
    init = container(spec, "trtwarm-init")
    assert init["resources"]["claims"] == claims == container(spec, "server")["resources"]["claims"]
    assert "claims" not in container(spec, "trtwarm-exporter")["resources"]  # the sidecar needs no GPU
    chart = pod_spec(objects(render({"workload": {"containerExtra": {"resources": {"claims": claims}},
                                                  "container": {"resources": {"limits": {"nvidia.com/gpu": None}}}}})))
    assert container(chart, "trtwarm-init")["resources"]["claims"] == init["resources"]["claims"]
    again = _post_render_text(proc.stdout, {}, "--target=web", "--container=server", "--model=/m.onnx")
    assert again.returncode == 0 and again.stdout == proc.stdout  # idempotent


@pytest.mark.parametrize("env,message", [
    ({"TRTWARM_CONTAINER": "server", "TRTWARM_MODEL": "/m.onnx"}, "missing --target"),
    ({"TRTWARM_TARGET": "api", "TRTWARM_CONTAINER": "server", "TRTWARM_MODEL": "/m.onnx"}, "matches ['api']"),
    ({"TRTWARM_TARGET": "web", "TRTWARM_CONTAINER": "srv", "TRTWARM_MODEL": "/m.onnx"}, "has no container 'srv'"),
])
def test_the_post_renderer_refuses_to_guess(env: dict[str, str], message: str) -> None:
    proc = _post_render([_third_party("web", [{"name": "server", "image": "example/server:1"}])], env)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_the_post_renderer_is_a_helm_4_plugin_and_a_helm_3_executable() -> None:
    plugin = yaml.safe_load((POST_RENDERER / "plugin.yaml").read_text())
    assert plugin["apiVersion"] == "v1" and plugin["type"] == "postrenderer/v1" and plugin["runtime"] == "subprocess"
    [command] = plugin["runtimeConfig"]["platformCommand"]
    script = Path(command["command"].replace("${HELM_PLUGIN_DIR}", str(POST_RENDERER)))
    assert script.is_file() and os.access(script, os.X_OK)
    assert script.read_text().startswith("#!/usr/bin/env python3")


@needs_kustomize
def test_post_rendered_manifests_feed_kustomize(tmp_path: Path) -> None:
    """Users who kustomize the post-rendered output (e.g. Argo CD's helm + kustomize) get the same Pod back."""
    server = {"name": "server", "image": "example/server:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    proc = _post_render([_third_party("web", [server])], {}, "--target=web", "--container=server", "--model=/m.onnx")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "all.yaml").write_text(proc.stdout)
    (tmp_path / "kustomization.yaml").write_text("resources: [all.yaml]\nnamespace: ml\n")
    objs = kustomize(tmp_path)
    assert validate(objs, NATIVE) == []
    assert_wired(pod_spec(objs), "server")


def _rule_files(tmp_path: Path) -> list[Path]:
    """Rule groups of deploy/monitoring and of the chart's PrometheusRule, as plain Prometheus rule files."""
    out = []
    chart_rule = next(o for o in objects(render({"metrics": {"enabled": True, "rules": {
        "enabled": True, "budgetBytes": 1 << 40}}})) if o["kind"] == "PrometheusRule")
    for i, rule in enumerate([*manifests(DEPLOY / "monitoring/prometheusrule.yaml"), chart_rule]):
        path = tmp_path / f"rules-{i}.yml"
        path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        out.append(path)
    return out


@needs_promtool
def test_alert_rules_and_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    dashboard = json.loads((DEPLOY / "grafana/trtwarm-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10 and all("trtwarm_" in e for e in exprs)
    grafana_vars = {"$namespace": ".*", "$__rate_interval": "5m"}
    rules = [{"record": f"dashboard:panel{i}", "expr": re.sub(r"\$\w+", lambda m: grafana_vars[m[0]], e)}
             for i, e in enumerate(exprs)]
    dash = tmp_path / "dashboard-rules.yml"
    dash.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run(["promtool", "check", "rules", str(dash), *map(str, _rule_files(tmp_path))],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_pins_the_tensorrt_of_the_extra() -> None:
    # the extra's first item is TensorRT itself (cuda-bindings, for selftest, follows it)
    package, version = re.search(r'^tensorrt = \["([\w-]+)==([\w.]+)"', (ROOT / "pyproject.toml").read_text(),
                                 re.M).groups()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG TENSORRT_PACKAGE={package}" in dockerfile
    assert f"ARG TENSORRT_VERSION={version}" in dockerfile
    assert re.search(r"FROM \S+ AS init", dockerfile) and re.search(r"FROM \S+ AS sidecar", dockerfile)
    targets = len(re.findall(r"^FROM \S+ AS (?!dist)", dockerfile, re.M))  # init, sidecar, init-pull
    assert dockerfile.count("ARG TRTWARM_UID=1000") == targets == dockerfile.count("ARG TRTWARM_GID=1000")  # chart's
    assert dockerfile.count("USER ${TRTWARM_UID}:${TRTWARM_GID}") == targets
    assert "cmd/trtwarm-init cmd/trtwarm-sidecar" in dockerfile
    for path in (ROOT / "cmd").iterdir():
        assert os.access(path, os.X_OK) and "from trtwarm.cli.entry import run" in path.read_text()
    assert not (ROOT / "cmd" / "__init__.py").exists()


BLOCK_HEAVY = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('onnx', 'onnxruntime', 'numpy', 'tensorrt', 'pynvml'):
            raise ImportError('not in the sidecar image: ' + name)
sys.meta_path.insert(0, _Block())
"""


@pytest.mark.parametrize("args", [["sidecar", "--help"], ["ls"], ["stats", "--json"], ["verify"],
                                  ["gc", "--max-age", "1d", "--dry-run"]])
def test_the_sidecar_image_commands_need_no_onnx_numpy_or_tensorrt(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCK_HEAVY)
    env = env_for({"PYTHONPATH": f"{tmp_path / 'block'}{os.pathsep}{ROOT}"})
    Layout(tmp_path / "cache").ensure()  # an empty trtwarm cache (a missing one is exit 6)
    argv = [*args, "--cache-dir", str(tmp_path / "cache")] if args[0] != "sidecar" else args
    proc = subprocess.run([sys.executable, "-m", "trtwarm", *argv], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "not in the sidecar image" not in proc.stderr


def test_chart_app_version_matches_the_package() -> None:
    from trtwarm import __version__

    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == __version__


@pytest.mark.parametrize("path", ["kustomize/base/deployment.yaml", "triton/deployment.yaml", "prebuild-job.yaml"])
def test_plain_manifests_meet_the_restricted_pod_security_standard(path: str) -> None:
    [obj] = [o for o in manifests(DEPLOY / path) if o["kind"] in ("Deployment", "Job")]
    assert restricted(obj["spec"]["template"]["spec"]) == []


def test_the_prebuild_job_signs_with_a_key_from_its_secret_and_checks_the_policy() -> None:
    [job] = [o for o in manifests(DEPLOY / "prebuild-job.yaml") if o["kind"] == "Job"]
    spec = job["spec"]["template"]["spec"]
    init, volumes = container(spec, "trtwarm-init"), {v["name"]: v for v in spec["volumes"]}
    where = {m["mountPath"]: m for m in init["volumeMounts"]}

    def source(path: str) -> dict:
        """The volume (read-only mount) that *path* lies in."""
        mount = where[str(Path(path).parent)]
        assert mount.get("readOnly") is True
        return volumes[mount["name"]]

    assert source(flag(init, "signing-key"))["secret"]["secretName"] == "trtwarm-signing-key"
    assert source(flag(init, "trust-policy"))["configMap"]["name"] == "trtwarm-trust-policy"
    assert flag(init, "trust-mode") == "enforce" and "--read-only" not in init["args"]
    # the names the chart's builder example and deploy/README.md use, so one Secret and one ConfigMap serve both
    builder = yaml.safe_load((CHART / "ci/trust-builder-values.yaml").read_text())["trust"]
    assert (builder["signingKey"]["existingSecret"], builder["existingConfigMap"]) == ("trtwarm-signing-key",
                                                                                         "trtwarm-trust-policy")
    assert "trtwarm-signing-key" in (DEPLOY / "README.md").read_text()


# --- the post-renderer, issue 28 F1/F9/F10: byte-identical pass-through, idempotent, never over a wired Pod -------

TRICKY_DOCS = '''---
# Source: web/templates/config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  labels: {enabled: "y", "n": "n", version: "1.10"}
  annotations:
    limit:   "1e3"    # spacing and comments kept
data:
  "on": "off"
  mode: '0o17'
  script: |
    ---
    not a separator: it is indented
---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {tier: "0x1F"}
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web, canary: "no"}
    spec:
      containers:
        - name: server
          image: example/server:1
          args: ["--model-repository=/models", "--verbose", "1e3", "y"]
          env:
            - {name: FLAG, value: "yes"}
            - {name: MODE, value: "0o17"}
          resources:
            limits: {nvidia.com/gpu: "1"}
          volumeMounts:
            - {name: models, mountPath: /models}
      volumes:
        - {name: models, persistentVolumeClaim: {claimName: repo}}
'''
TRITON_ENV = {"TRTWARM_TARGET": "Deployment/web", "TRTWARM_CONTAINER": "server",
              "TRTWARM_MODEL": "/models/src/m.onnx", "TRTWARM_ARGS": "--key-extra=flag=y --verify=load"}


def test_the_post_renderer_passes_untargeted_documents_byte_for_byte_and_keeps_the_targets_strings() -> None:
    proc = _post_render_text(TRICKY_DOCS, TRITON_ENV)
    assert proc.returncode == 0, proc.stderr
    config = TRICKY_DOCS.split("---\n# Source: web/templates/deployment.yaml")[0]
    assert proc.stdout.startswith(config)  # not re-serialized: quotes, spacing, comments as they were
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]  # PyYAML reads YAML 1.1, as the API server does
    assert validate(objs, NATIVE) == []
    assert objs[0]["data"] == {"on": "off", "mode": "0o17", "script": "---\nnot a separator: it is indented\n"}
    spec = pod_spec(objs)
    server = container(spec, "server")
    assert server["args"] == ["--model-repository=/models", "--verbose", "1e3", "y"]
    assert {e["name"]: e["value"] for e in server["env"]} == {"FLAG": "yes", "MODE": "0o17",
                                                              "TRTWARM_ENGINE": "/trtwarm/engine"}
    assert pod_spec(objs) and objs[1]["metadata"]["labels"] == {"tier": "0x1F"}
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "--key-extra=flag=y" in container(spec, "trtwarm-init")["args"]
    assert_wired(spec, "server")


def test_the_post_renderer_keeps_the_cache_out_of_the_model_repository() -> None:
    """Triton's chart serves /models: a cache mounted inside it would be read as a model (F10)."""
    proc = _post_render_text(TRICKY_DOCS, TRITON_ENV)
    spec = pod_spec([d for d in yaml.safe_load_all(proc.stdout) if d])
    init = container(spec, "trtwarm-init")
    for path in (flag(init, "cache-dir"), flag(init, "handoff-dir")):
        assert not path.startswith("/models/") and path != "/models"
    for bad in ("--cache-dir=/models/cache", "--handoff-dir=/models", "--cache-dir=/"):
        proc = _post_render_text(TRICKY_DOCS, TRITON_ENV, bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert bad.split("=")[0] in proc.stderr


def test_the_post_renderer_is_idempotent_and_never_rewires_a_wired_pod() -> None:
    once = _post_render_text(TRICKY_DOCS, TRITON_ENV)
    twice = _post_render_text(once.stdout, TRITON_ENV)
    assert twice.returncode == 0 and twice.stdout == once.stdout
    assert "already runs trtwarm-init: left as it is" in twice.stderr
    # trtwarm's own chart, wired with trust flags and --read-only: targeted by mistake, it stays as it was (F9)
    rendered = render(yaml.safe_load((CHART / "ci" / "trust-values.yaml").read_text()))
    text = "".join(f"---\n# Source: {path}\n{body}" for path, body in rendered.items()
                   if not path.endswith("NOTES.txt"))
    proc = _post_render_text(text, {"TRTWARM_TARGET": "rel-trtwarm", "TRTWARM_CONTAINER": "inference",
                                    "TRTWARM_MODEL": "/m.onnx"})
    assert proc.returncode == 0 and proc.stdout == text, proc.stderr


def test_the_post_renderer_refuses_input_that_is_not_yaml() -> None:
    proc = _post_render_text("---\nkind: [unclosed\n", TRITON_ENV)
    assert proc.returncode == 2 and "not YAML" in proc.stderr and "Traceback" not in proc.stderr


def _post_renderer_module():  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location("trtwarm_post_render", POST_RENDERER / "post-render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_any_string_in_an_untargeted_document_passes_through_unchanged() -> None:
    """Hypothesis: whatever a chart writes into a document the post-renderer does not target (quoted the way
    PyYAML or Helm's toYaml quotes it), the output holds exactly those bytes."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    module = _post_renderer_module()
    ns = module.parse([], {"TRTWARM_TARGET": "web", "TRTWARM_CONTAINER": "server", "TRTWARM_MODEL": "/m.onnx"})
    target = yaml.safe_dump(_third_party("web", [{"name": "server", "image": "example/server:1"}]))

    @hypothesis.settings(max_examples=150, deadline=None, database=None)
    @hypothesis.given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=20), max_size=5),
                      st.sampled_from(["'", '"', None]))
    def check(data: dict[str, str], style: str | None) -> None:
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}
        text = "---\n" + yaml.safe_dump(doc, default_style=style) + "---\n" + target
        out, _notes = module.render(text, ns)
        assert out.startswith("---\n" + yaml.safe_dump(doc, default_style=style))
        assert list(yaml.safe_load_all(out))[0] == doc

    check()


EDGE_TARGET = '''apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: &labels
    a: 0o17
    b: 017
    c: 1_000
    d: 0x1F
    e: 1e3
    g: yes
    h: ~
    i: 2001-12-14
    j: 1:20
    n: 'single'
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels:
        <<: *labels
        app: web
    spec:
      containers:
        - name: server
          image: x
          args: [0o17, 1e3, yes, 12:30:00]
'''


def test_a_targets_own_plain_scalars_mean_to_the_api_server_what_they_meant_before() -> None:
    """YAML 1.1 readers (the API server's) and ruamel.yaml (1.2) differ on `0o17`, `017`, `yes`, sexagesimals...:
    the round trip keeps each as written, so the target's untouched fields keep their meaning; anchors survive."""
    proc = _post_render_text(EDGE_TARGET, {}, "--target=web", "--container=server", "--model=/m.onnx")
    assert proc.returncode == 0, proc.stderr
    before, after = yaml.safe_load(EDGE_TARGET), yaml.safe_load(proc.stdout)
    assert after["metadata"] == before["metadata"]
    assert after["spec"]["template"]["metadata"] == before["spec"]["template"]["metadata"]
    assert container(pod_spec([after]), "server")["args"] == ["0o17", "1e3", True, 45000]
    assert "&labels" in proc.stdout and "<<: *labels" in proc.stdout
    config = "---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: c}\r\ndata: {a: \"y\"}\r\n"
    raw = subprocess.run([sys.executable, str(POST_RENDERER / "post-render.py"), "--target=web", "--container=server",
                          "--model=/m.onnx"], input=(config + "---\r\n" + EDGE_TARGET).encode(), capture_output=True,
                         env=env_for({}), check=False)
    assert raw.returncode == 0 and raw.stdout.startswith(config.encode()), raw.stderr  # Windows line ends too
    bad = subprocess.run([sys.executable, str(POST_RENDERER / "post-render.py"), "--target=web", "--container=server",
                          "--model=/m.onnx"], input=b"kind: \xff\n", capture_output=True, env=env_for({}), check=False)
    assert bad.returncode == 2 and b"not UTF-8" in bad.stderr and b"Traceback" not in bad.stderr
