"""The chart's trust values: the policy from a ConfigMap for every init, the signing key only in the builder role."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s import CHART, container, flag, objects, pod_spec, render

from trtwarm.trust.policy import Policy

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[test]')")


def _values(name: str) -> dict:
    return yaml.safe_load((CHART / "ci" / name).read_text())


def test_a_consumer_gets_the_policy_a_read_only_cache_and_no_key(tmp_path: Path) -> None:
    objs = objects(render(_values("trust-values.yaml")))
    init = container(pod_spec(objs), "trtwarm-init")
    assert flag(init, "trust-mode") == "enforce" and "--read-only" in init["args"]
    assert flag(init, "trust-policy") == "/etc/trtwarm/trust/policy.json" and flag(init, "signing-key") is None
    by_name = {m["name"]: m for m in init["volumeMounts"]}
    assert by_name["trtwarm-cache"].get("readOnly") is True and "trtwarm-signing" not in by_name
    assert not any("secret" in v for v in pod_spec(objs)["volumes"])
    [config] = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-trust")]
    policy = json.loads(config["data"]["policy.json"])
    assert policy["mode"] == "enforce" and [k["name"] for k in policy["keys"]] == ["ci-2026", "ci-2027"]
    # the rendered policy and keys are what trtwarm itself accepts
    for name, text in config["data"].items():
        (tmp_path / name).write_text(text)
    assert len(Policy.load(tmp_path / "policy.json").keys) == 2


def test_a_builder_mounts_the_signing_key_from_its_secret() -> None:
    spec = pod_spec(objects(render(_values("trust-builder-values.yaml"))))
    init = container(spec, "trtwarm-init")
    assert flag(init, "signing-key") == "/etc/trtwarm/signing/signing.key" and "--read-only" not in init["args"]
    [secret] = [v for v in spec["volumes"] if "secret" in v]
    assert secret["secret"]["secretName"] == "trtwarm-signing-key"
    assert {m["name"]: m for m in init["volumeMounts"]}["trtwarm-signing"]["readOnly"] is True
    [policy] = [v for v in spec["volumes"] if v["name"] == "trtwarm-trust"]
    assert policy["configMap"]["name"] == "trtwarm-trust-policy"
    for name in ("trtwarm-exporter", "inference"):  # only the init container sees the key
        assert "trtwarm-signing" not in {m["name"] for m in container(spec, name).get("volumeMounts", [])}


def test_trust_is_off_by_default() -> None:
    objs = objects(render({}))
    init = container(pod_spec(objs), "trtwarm-init")
    assert flag(init, "trust-mode") is None and not any(o["kind"] == "ConfigMap" for o in objs)


def test_values_doc_is_current() -> None:
    proc = subprocess.run([sys.executable, str(CHART.parent / "values_doc.py"), "--check"], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_enforcing_builder_without_a_key_is_refused() -> None:
    with pytest.raises(helm.HelmError, match="needs trust.signingKey.existingSecret"):
        render({"trust": {"mode": "enforce", "role": "builder", "keys": []}})


def test_a_consumer_under_digest_keeps_its_signature_records_in_the_node_stamp_directory() -> None:
    """``engine.stamps.hostPath`` under a trust policy with ``verify: digest``: the signatures the init verified are
    recorded on the node, so the next Pod there skips the check (README, Verify by stamp); only the init mounts it."""
    values = {**_values("trust-values.yaml"), "engine": {"stamps": {"hostPath": "/var/lib/trtwarm/stamps",
                                                                    "maxAge": "2h"}}}
    spec = pod_spec(objects(render(values)))
    init = container(spec, "trtwarm-init")
    assert flag(init, "verify") == "digest" and flag(init, "trust-mode") == "enforce"
    assert flag(init, "stamp-max-age") == "2h"  # records expire like stamps
    assert {m["name"]: m["mountPath"] for m in init["volumeMounts"]}["trtwarm-stamps"] == flag(init, "stamp-dir")
    assert all("trtwarm-stamps" not in [m["name"] for m in c.get("volumeMounts", [])] for c in spec["containers"])


@pytest.mark.parametrize(("keys", "message"), [
    ([], "needs trust.keys"),
    ([{"name": "ci", "public_key_file": "a.pub"}, {"name": "ci", "public_key_file": "b.pub"}], "names \"ci\" twice"),
])
def test_a_policy_the_init_would_refuse_is_refused_at_render_time(keys: list, message: str) -> None:
    """The init fails closed on these policies (exit 2, nothing served); the chart says so before anything runs."""
    with pytest.raises(helm.errors.HelmError, match=message):
        render({"trust": {"mode": "enforce", "role": "consumer", "keys": keys}})
