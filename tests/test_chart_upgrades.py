"""`helm upgrade --reuse-values` from every earlier chart release (`tests/chart_releases/`, the packages of 0.1.0,
0.2.0 and 0.3.0 as they were released): the new chart renders with the old release's values, every object validates,
no immutable field of an object the old release created changes, and the Pod is still wired.

Helm's `reuseValues` (pkg/action/upgrade.go) replaces the new chart's defaults with the old chart's defaults
coalesced with the release's config (`chart.Values = oldVals`) and renders with that config: reproduced here with
Helm's own coalescing (helm-python-sdk's `merge_values`) and rendering; no cluster is needed for either.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s import CHART, ROOT, assert_wired, container, objects, pod_spec, validate

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")
RELEASES = sorted((ROOT / "tests" / "chart_releases").glob("trtwarm-*.tgz"))


def _old_configs(old: Any) -> list[tuple[str, dict[str, Any]]]:
    """The old chart's defaults and each of its own example values files."""
    found = [("defaults", {})]
    found += [(f["name"], yaml.safe_load(f["data"])) for f in old.files
              if f["name"].startswith("ci/") and f["name"].endswith("-values.yaml")]
    return found


def reuse_values_render(old: Any, config: dict[str, Any], tmp: Path, release: str = "rel") -> dict[str, str]:
    """What `helm upgrade --reuse-values` renders: this chart, its defaults replaced by the old release's values."""
    chart = tmp / "trtwarm"
    if chart.exists():
        shutil.rmtree(chart)
    shutil.copytree(CHART, chart)
    (chart / "values.yaml").write_text(yaml.safe_dump(old.merge_values(config)))
    return helm.Chart.load(str(chart)).render(config, name=release, namespace="ml", is_upgrade=True)


#: fields the API server refuses to change on an existing object (by kind)
IMMUTABLE = {"Deployment": [("spec", "selector")], "DaemonSet": [("spec", "selector")],
             "StatefulSet": [("spec", "selector"), ("spec", "serviceName"), ("spec", "volumeClaimTemplates"),
                             ("spec", "podManagementPolicy")],
             "Job": [("spec", "selector"), ("spec", "template")], "Service": [("spec", "clusterIP")],
             "PersistentVolumeClaim": [("spec", "accessModes"), ("spec", "storageClassName"), ("spec", "volumeName"),
                                       ("spec", "volumeMode")]}


def _dig(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        obj = (obj or {}).get(part)
    return obj


@pytest.mark.parametrize("package", RELEASES, ids=lambda p: p.stem)
def test_reuse_values_upgrade_from_an_earlier_release_keeps_every_immutable_field(package: Path,
                                                                                   tmp_path: Path) -> None:
    old = helm.Chart.load(str(package))
    assert old.version != yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    for name, config in _old_configs(old):
        before = {(o["kind"], o["metadata"]["name"]): o for o in objects(old.render(config, name="rel",
                                                                                   namespace="ml"))}
        after_list = objects(reuse_values_render(old, config, tmp_path))
        legacy = (config.get("exporter") or {}).get("mode") == "legacy"
        assert validate(after_list, range(25 if legacy else 29, 38)) == [], (package.stem, name)
        after = {(o["kind"], o["metadata"]["name"]): o for o in after_list}
        for (kind, obj_name), obj in before.items():
            if (kind, obj_name) not in after:
                assert kind in ("Job", "Pod"), (package.stem, name, kind, obj_name)  # hashed names, hooks
                continue
            for path in IMMUTABLE.get(kind, []):
                assert _dig(after[(kind, obj_name)], path) == _dig(obj, path), (package.stem, name, kind, path)
        spec = pod_spec(after_list)
        main = ((config.get("workload") or {}).get("container") or {}).get("name", "inference")
        assert_wired(spec, main, native=not legacy)
        old_probe = container(pod_spec(list(before.values())), main).get("readinessProbe")
        assert container(spec, main).get("readinessProbe") == old_probe  # a probe the release removed stays gone


def test_the_upgrade_defaults_are_exactly_the_values_added_since_the_first_release() -> None:
    """upgrade-defaults.yaml must hold every value values.yaml has and 0.1.0 did not, with its default, and nothing
    else: a value added without it would be missing after a `--reuse-values` upgrade."""
    first = helm.Chart.load(str(RELEASES[0])).values
    current = yaml.safe_load((CHART / "values.yaml").read_text())
    sections = yaml.safe_load((CHART / "upgrade-defaults.yaml").read_text())["added"]
    assert max(map(int, sections)) == current["defaultsVersion"]

    def leaves(tree: Any, prefix: tuple = ()) -> dict[tuple, Any]:
        if isinstance(tree, dict) and tree:
            return {p: v for k, sub in tree.items() for p, v in leaves(sub, (*prefix, k)).items()}
        return {prefix: tree}

    added = {p: v for p, v in leaves(current).items() if not _has(first, p) and p != ("defaultsVersion",)}
    listed: dict[tuple, Any] = {}
    for tree in sections.values():
        for path, value in leaves(tree).items():
            assert path not in listed, path
            listed[path] = value
    assert listed == added


def _has(tree: Any, path: tuple) -> bool:
    for part in path:
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def test_a_new_value_reaches_a_reuse_values_upgrade_and_a_set_value_stays() -> None:
    """From 0.2.0 (no engines, no prewarm): the new templates read their defaults; what the release set is kept."""
    import tempfile

    old = helm.Chart.load(str(next(p for p in RELEASES if p.stem.endswith("0.2.0"))))
    config = {"exporter": {"port": 9500}, "service": {"enabled": False}}
    with tempfile.TemporaryDirectory() as tmp:
        objs = objects(reuse_values_render(old, config, Path(tmp)))
    spec = pod_spec(objs)
    assert container(spec, "trtwarm-exporter")["ports"][0]["containerPort"] == 9500
    assert not [o for o in objs if o["kind"] == "Service"]
    assert not [v for v in spec["volumes"] if v["name"].startswith("trtwarm-engines")]  # engines.image: default off
    fix = {"cache": {"fixPermissions": {"enabled": True}}}
    with tempfile.TemporaryDirectory() as tmp:
        fixer = container(pod_spec(objects(reuse_values_render(old, fix, Path(tmp)))), "trtwarm-fix-permissions")
    assert fixer["resources"]["limits"]["memory"] == "64Mi"  # added in 0.4.0, default filled in


def test_every_template_adds_the_missing_defaults_before_it_reads_a_value() -> None:
    """Helm renders the templates in an order of its own: each must fill the values in first, or one that reads a
    value added since the release being upgraded fails on a --reuse-values upgrade."""
    templates = [p for p in (CHART / "templates").rglob("*") if p.is_file() and not p.name.startswith("_")]
    assert len(templates) >= 20
    for path in templates:
        assert path.read_text().startswith('{{- include "trtwarm.upgradeDefaults" . -}}\n'), path.name


def test_a_030_prewarm_upgrades_once_it_names_its_gpus(tmp_path: Path) -> None:
    """0.3.0's pre-warm keyed through NVIDIA_VISIBLE_DEVICES=all; 0.4.0's needs the GPU classes: a --reuse-values
    upgrade without them is refused naming prewarm.gpus, and one that adds them (`--set-json`, given on top of the
    reused values) renders a DaemonSet per class in place of the old one."""
    old = helm.Chart.load(str(next(p for p in RELEASES if p.stem.endswith("0.3.0"))))
    config = {"cache": {"type": "hostPath", "hostPath": {"type": "Directory"}},
              "remote": {"url": "s3://engines/prod", "tensorrtVersion": "10.16.1.11+cu12"},
              "prewarm": {"enabled": True, "matrix": {"models": [{"model": "a.onnx"}]}}}
    [before] = [o for o in objects(old.render(config, name="rel", namespace="ml")) if o["kind"] == "DaemonSet"]
    with pytest.raises(helm.HelmError, match="prewarm.enabled needs prewarm.gpus"):
        reuse_values_render(old, config, tmp_path)
    gpus = [{"product": "NVIDIA L4", "computeCapability": "8.9", "memoryGiB": 22}]
    chart = tmp_path / "trtwarm"
    merged = helm.Chart.load(str(chart)).render({**config, "prewarm": {**config["prewarm"], "gpus": gpus}},
                                                name="rel", namespace="ml", is_upgrade=True)
    [after] = [o for o in objects(merged) if o["kind"] == "DaemonSet"]
    assert after["metadata"]["name"] != before["metadata"]["name"]  # a new object: no immutable selector changes
    assert after["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-L4"
    env = [e["name"] for e in container(after["spec"]["template"]["spec"], "trtwarm-prewarm")["env"]]
    assert "NVIDIA_VISIBLE_DEVICES" not in env
