"""The remote repository's pure parts: URL and settings, ref shapes (a hostile ref cannot escape the entry),
retention and coverage decisions, and the declared TensorRT version of pull-only consumers."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from conftest import run_trtwarm

from trtwarm.errors import ConfigError, RemoteError
from trtwarm.remote import coverage, gc
from trtwarm.remote.repo import check_ref, make_ref, manifest_files
from trtwarm.remote.url import parse, redact

KEY = "ab" * 32


def _manifest(key: str = KEY, name: str = "m_cpu_ort_fp32_static--abababababababab", created: float = 1e9,
              sha: str = "cd" * 32, doc: dict | None = None) -> dict:
    return {"schema": 2, "key": key, "name": name, "created": created, "key_document": doc or {},
            "files": [{"path": "engine.plan", "role": "engine", "bytes": 3, "sha256": sha}],
            "engine_file": "engine.plan", "engine_sha256": sha, "engine_bytes": 3}


@pytest.mark.parametrize("url", ["s3:/x", "http://b/p", "s3://", "s3://B/p", "s3://b/../x", "s3://b/a//b"])
def test_bad_remote_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse(url, {})


def test_a_bad_bucket_name_is_named_as_such() -> None:
    with pytest.raises(ConfigError, match="'b' is not a valid bucket name") as info:
        parse("s3://b/prefix", {})
    assert "3 to 63" in str(info.value.hint)


def test_settings_come_from_the_aws_variables_and_secrets_never_show() -> None:
    env = {"AWS_ENDPOINT_URL": "https://s3.example:9000", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_REGION": "eu-west-1",
           "TRTWARM_REMOTE_CHUNK": "1M"}
    remote = parse("s3://engines/prod/", env)
    assert (remote.bucket, remote.prefix, remote.endpoint) == ("engines", "prod", "https://s3.example:9000")
    assert remote.chunk == 5 << 20  # S3's smallest multipart part
    assert "s3cr3t" not in repr(remote) and "s3cr3t" not in remote.describe()
    assert redact("denied for s3cr3t", remote) == "denied for ***"
    with pytest.raises(ConfigError, match="plain http"):
        parse("s3://engines", {"AWS_ENDPOINT_URL": "http://minio:9000"})
    assert parse("s3://engines", {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ALLOW_HTTP": "true"}).allow_http


@pytest.mark.parametrize("path", ["../../etc/cron.d/x", "/etc/passwd", "a/../../b", "", "a\\b", "./x"])
def test_a_ref_naming_a_file_outside_the_entry_is_refused(path: str) -> None:
    manifest = _manifest()
    manifest["files"][0]["path"] = path
    with pytest.raises(RemoteError, match="unsafe|lacks|no files"):
        check_ref(make_ref(manifest, None), KEY)


def test_ref_checks_key_schema_and_signature_shape_and_reads_schema_1() -> None:
    with pytest.raises(RemoteError, match="another key"):
        check_ref(make_ref(_manifest(key="ef" * 32), None), KEY)
    with pytest.raises(RemoteError, match="not a trtwarm.ref/v1"):
        check_ref({"schema": "x", "manifest": _manifest()}, KEY)
    with pytest.raises(RemoteError, match="signature"):
        check_ref(make_ref(_manifest(), "sig"), KEY)  # type: ignore[arg-type]
    v1 = {k: v for k, v in _manifest().items() if k != "files"}
    assert manifest_files(v1) == [{"path": "engine.plan", "role": "engine", "bytes": 3, "sha256": "cd" * 32}]


def _meta(sha: str, age: float, now: float) -> dict:
    return {"path": f"blobs/sha256/{sha}", "size": 3,
            "last_modified": datetime.datetime.fromtimestamp(now - age, datetime.timezone.utc)}


def test_gc_keeps_every_referenced_blob_and_young_orphans_and_stops_on_an_unreadable_ref() -> None:
    now = 2e9
    refs = [(KEY, make_ref(_manifest(created=now - 100 * 86400), None), ""),
            ("ef" * 32, make_ref(_manifest(key="ef" * 32, sha="11" * 32, created=now), None), "")]
    blobs = [_meta("cd" * 32, 1e7, now), _meta("11" * 32, 1e7, now), _meta("22" * 32, 1e7, now),
             _meta("33" * 32, 60, now)]
    todo = gc.plan(refs, blobs, now, max_age=30 * 86400, blob_grace=86400)
    assert [k for k, _n, r in todo.refs] == [KEY] and todo.refs[0][2] == "age"
    assert todo.blobs == [("22" * 32, 3)] and todo.young == 1  # cd.. still named by the ref removed in this pass
    broken = gc.plan([*refs, ("99" * 32, None, "not JSON")], blobs, now, blob_grace=0)
    assert broken.blobs == [] and "unreadable" in broken.note


def test_coverage_matches_product_and_class_and_ignores_cuda_when_not_declared() -> None:
    want = {"schema": 1, "model": {"sha256": "m"}, "build": {"precision": "fp16"},
            "builder": {"name": "tensorrt", "version": "10.16.1.11", "cuda": None}}
    h100 = {**want, "builder": {**want["builder"], "cuda": "12"},
            "device": {"kind": "gpu", "product": "NVIDIA H100 80GB HBM3", "mig_profile": None}}
    anyamp = {**want, "device": {"kind": "gpu", "class": "ampere+"}}
    refs = [("k1", make_ref(_manifest(doc=h100), None))]
    cells = coverage.cover([("m/fp16", want)], ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"], refs)
    assert [c.key for c in cells] == ["k1", None] and coverage.percent(cells) == 50.0
    refs = [("k2", make_ref(_manifest(doc=anyamp), None))]
    cells = coverage.cover([("m/fp16", want)], ["NVIDIA A100-SXM4-80GB"], refs)
    assert [c.key for c in cells] == ["k2"]
    strict = {**want, "builder": {**want["builder"], "cuda": "13"}}
    assert coverage.cover([("m", strict)], ["NVIDIA H100 80GB HBM3"], refs)[0].key is None


def test_coverage_answers_an_aarch64_grace_hopper_column_apart_from_x86_64_hopper(tmp_path: Path) -> None:
    """An engine runs only on the platform it was built on (TensorRT RuntimePlatform SAME_AS_BUILD): a ref built on
    an x86_64 sm9.0 node covers the x86_64 column only; a ref keyed before the platform was in the key, none."""
    want = {"schema": 1, "model": {"sha256": "m"}, "build": {"precision": "fp16"},
            "builder": {"name": "tensorrt", "version": "10.16.1.11", "cuda": "12"}}
    x86 = {**want, "device": {"kind": "gpu", "class": "sm9.0", "platform": "linux-x86_64"}}
    old = {**want, "device": {"kind": "gpu", "class": "sm9.0"}}
    cols = coverage.columns(["sm9.0", "cpu", "sm8.0@linux-aarch64"], ["linux-x86_64", "linux-aarch64"])
    assert cols == ["sm9.0@linux-x86_64", "sm9.0@linux-aarch64", "cpu", "sm8.0@linux-aarch64"]
    cells = coverage.cover([("m/fp16", want)], cols[:2], [("k1", make_ref(_manifest(doc=x86), None)),
                                                          ("k0", make_ref(_manifest(doc=old), None))])
    assert [(c.gpu, c.key) for c in cells] == [("sm9.0@linux-x86_64", "k1"), ("sm9.0@linux-aarch64", None)]
    from trtwarm.cli.matrix import matrix_platforms
    from trtwarm.cli.prebuild import _check_platform
    from trtwarm.node.hostplatform import host_platform

    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"models": [{"model": "a.onnx"}], "platforms": ["linux-amd64", "Linux-arm64"]}))
    assert matrix_platforms(matrix) == ["linux-x86_64", "linux-aarch64"]
    matrix.write_text(json.dumps({"models": [{"model": "a.onnx"}]}))
    assert matrix_platforms(matrix) == [host_platform()]
    matrix.write_text(json.dumps({"models": [{"model": "a.onnx"}], "platforms": ["aarch64"]}))
    with pytest.raises(ConfigError, match="not a platform"):
        matrix_platforms(matrix)
    with pytest.raises(ConfigError, match="the matrix declares the platforms linux-riscv64") as err:
        _check_platform(["linux-riscv64"])  # this runner's engines would serve no node of the fleet
    assert "run prebuild on a runner of each declared platform" in (err.value.hint or "")


def test_coverage_of_tensorrt_rows_needs_no_tensorrt_and_no_gpu(tmp_path: Path, model: Path) -> None:
    """--tensorrt declares the version: the key's builder section is computed without importing TensorRT."""
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"models": [{"model": str(model), "shape": ["input=1x16:8x16:32x16"]}],
                                  "precision": ["fp16", "fp32"], "options": {"builder": "tensorrt"}}))
    from trtwarm.cli.matrix import coverage_rows

    rows = coverage_rows(matrix, {}, "10.16.1.11+cu12")
    assert [label for label, _ in rows] == ["mlp/fp16", "mlp/fp32"]
    assert rows[0][1]["builder"] == {"name": "tensorrt", "version": "10.16.1.11", "cuda": "12"}
    assert rows[0][1]["build"]["precision"] == "fp16" and "device" not in rows[0][1]
    bad = run_trtwarm("key", "--model", str(model), "--tensorrt-version", "10.x")
    assert bad.returncode == 2 and "10.16.1.11+cu12" in bad.stderr


def test_remote_keep_per_model_keeps_the_newest_of_each_configuration() -> None:
    """Refs of one model in two precisions and for two GPU products are four configurations: keeping 1 per model
    removes only the older build of a configuration (a new model version), never another configuration's engine."""
    def doc(product: str, precision: str, digest: str) -> dict:
        return {"model": {"sha256": digest}, "builder": {"name": "tensorrt", "version": "10.16.1.11"},
                "device": {"kind": "gpu", "product": product}, "build": {"precision": precision}}

    rows = [(f"{i:02x}" * 32, product, precision, digest, created)
            for i, (product, precision, digest, created) in enumerate([
                ("NVIDIA H100 80GB HBM3", "fp16", "v1", 1e9), ("NVIDIA H100 80GB HBM3", "fp16", "v2", 2e9),
                ("NVIDIA H100 80GB HBM3", "int8", "v2", 2e9), ("NVIDIA A100-SXM4-80GB", "fp16", "v2", 2e9)])]
    refs = [(key, make_ref(_manifest(key=key, name=f"bert_{p}_{q}--{key[:16]}", created=c, sha=key,
                                     doc=doc(p, q, d)), None), "") for key, p, q, d, c in rows]
    todo = gc.plan(refs, [], 3e9, keep_per_model=1)
    assert [(name.split("--")[0], reason) for _, name, reason in todo.refs] == [
        ("bert_NVIDIA H100 80GB HBM3_fp16", "count")] and todo.kept_refs == 3
    assert todo.refs[0][0] == rows[0][0]  # the older model version's


def test_remote_gc_refuses_a_keep_per_model_that_keeps_nothing() -> None:
    for count in ("0", "-1"):
        run = run_trtwarm("remote", "gc", "--remote", "s3://engines/prod", "--keep-per-model", count, "--dry-run")
        assert run.returncode == 2 and "would remove every ref" in run.stderr and "hint:" in run.stderr


@pytest.mark.parametrize(("doc", "words"), [
    ([1, 2], "not a JSON object"), ({"models": [{"model": "a.onnx"}], "precision": []}, "non-empty list"),
    ({"models": [{"model": "a.onnx"}], "precision": [{"a": 1}]}, "list of names"),
    ({"models": [{"model": "a.onnx"}], "options": ["x"]}, "must be an object")])
def test_a_malformed_matrix_is_a_usage_error_naming_what_is_wrong(tmp_path: Path, doc: object, words: str) -> None:
    """Not a bug report (exit 1), and never a green CI job that built nothing."""
    from trtwarm.cli.matrix import matrix_rows

    (tmp_path / "matrix.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=words):
        matrix_rows(tmp_path / "matrix.json")


def test_remote_coverage_without_a_gpu_product_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text(json.dumps({"models": [{"model": "a.onnx"}]}))
    run = run_trtwarm("remote", "coverage", "--matrix", str(tmp_path / "m.json"), "--gpus", " , ", "--remote",
                      "s3://engines/prod")
    assert run.returncode == 2 and "names no GPU product" in run.stderr and "hint:" in run.stderr


def test_remote_coverage_of_tensorrt_rows_without_tensorrt_asks_for_its_version(tmp_path: Path, model: Path) -> None:
    """No TensorRT here: the answer is --tensorrt (coverage needs only the version), not "install TensorRT"."""
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed here: coverage reads its version")
    (tmp_path / "m.json").write_text(json.dumps({"models": [{"model": str(model)}], "precision": ["fp16"],
                                                 "options": {"builder": "tensorrt"}}))
    run = run_trtwarm("remote", "coverage", "--matrix", str(tmp_path / "m.json"), "--gpus", "NVIDIA H100 80GB HBM3",
                      "--remote", "s3://engines/prod")
    assert run.returncode == 2 and "hint: pass --tensorrt" in run.stderr, run.stderr


def test_the_waits_come_from_the_variables_and_flags_and_zero_is_refused() -> None:
    remote = parse("s3://b1/p", {"TRTWARM_REMOTE_READ_TIMEOUT": "2s", "TRTWARM_REMOTE_RETRY_TIMEOUT": "1m",
                                 "TRTWARM_REMOTE_CONNECT_TIMEOUT": "3"})
    limits = remote.limits
    assert (limits.read_timeout, limits.retry_timeout, limits.connect_timeout, limits.timeout) == (2, 60, 3, 300)
    assert limits.budget == 2 + 60 + 2
    assert parse("s3://b1/p", {}).limits.budget == 22  # the default request budget the docs quote
    for name in ("TRTWARM_REMOTE_READ_TIMEOUT", "TRTWARM_REMOTE_RETRY_TIMEOUT", "TRTWARM_REMOTE_CONNECT_TIMEOUT",
                 "TRTWARM_REMOTE_TIMEOUT"):
        with pytest.raises(ConfigError, match="must be above zero"):
            parse("s3://b1/p", {name: "0"})
    run = run_trtwarm("remote", "ls", "--remote", "s3://b1/p", "--remote-read-timeout", "0s")
    assert run.returncode == 2 and "--remote-read-timeout" in run.stderr, run.stderr


def test_the_breaker_fails_at_once_after_a_store_failed_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    from trtwarm.errors import RemoteUnreachable
    from trtwarm.transport import breaker as waits

    waits.reset()
    try:
        waits.check("s3://a at http://x")  # nothing failed yet
        waits.trip("s3://a at http://x", "no answer")
        waits.trip("s3://a at http://x", "no answer again")
        assert caplog.text.count("skipping it for the rest of this process") == 1
        with pytest.raises(RemoteUnreachable, match=r"skipped for the rest of this process: it failed \d+ s ago "
                                                    r"\(no answer\)"):
            waits.check("s3://a at http://x")
        waits.check("s3://other at http://y")  # another store is not affected
    finally:
        waits.reset()


def test_a_transfer_line_says_bytes_rate_and_eta() -> None:
    from trtwarm.transport.waits import _Wait

    wait = _Wait("s3://a", "pulling e from", 10.0, total=100 << 20, done=25 << 20)
    wait.started -= 5.0
    line = wait.line(wait.started + 5.0)
    assert line.startswith("pulling e from s3://a: 25.0 of 100.0 MiB (25 %), 5.2 MB/s, ETA 15 s"), line
    idle = _Wait("s3://a", "GET refs/k.json", 10.0, budget=22.0)
    assert "waiting for s3://a to answer GET refs/k.json (3 s so far; gives up after about 22 s)" == \
        idle.line(idle.started + 3.2)
