"""The engine repository in a real OCI registry (CNCF Distribution 2.8, Debian's ``docker-registry``, on loopback):
push, pull on a fresh volume, pull-only, racing pushers, a corrupted blob, an unreachable registry, gc and auth.

Volumes stand for clusters: each test uses its own repository in one registry. Under ``CI=true`` a missing
``docker-registry`` fails the module instead of skipping it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import cmd_init_args, debris, entries, ort_init_args, run_trtwarm, spawn, wait_until
from registry import Registry, TokenServer, anonymous_env, registry_binary
from s3server import free_ports

if registry_binary() is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("docker-registry is missing (apt-get install docker-registry): CI must run these tests")
    pytest.skip("docker-registry is not installed (apt-get install docker-registry)", allow_module_level=True)

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()
    assert server.proc is not None and server.proc.poll() is not None


@pytest.fixture
def url(registry: Registry, request: pytest.FixtureRequest) -> str:
    """A fresh repository per test."""
    name = request.node.name.lower().replace("[", "-").replace("]", "").replace("_", "-")[:60].strip("-")
    return f"oci://{registry.addr}/engines/{name}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No auth file of the user running the tests: anonymous, unless a test says otherwise."""
    return anonymous_env(tmp_path / "home")


def repo_of(url: str) -> str:
    return url.split("/", 3)[3]


def handoff_doc(handoff: Path) -> dict[str, Any]:
    return json.loads((handoff / "engine.json").read_text())


def engine_sha(handoff: Path) -> str:
    return hashlib.sha256(Path(handoff_doc(handoff)["path"]).read_bytes()).hexdigest()


def tags(registry: Registry, url: str) -> list[str]:
    try:
        return sorted(json.loads(registry.get(f"{repo_of(url)}/tags/list")[0]).get("tags") or [])
    except OSError:
        return []


def manifest(registry: Registry, url: str, tag: str) -> dict[str, Any]:
    return json.loads(registry.get(f"{repo_of(url)}/manifests/{tag}")[0])


def test_push_then_a_fresh_volume_pulls_the_same_bytes_with_no_build(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    first = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env)
    assert first.returncode == 0, first.stderr
    assert first.summary["result"] == "built" and handoff_doc(tmp_path / "ha")["remote"]["push"] == "pushed"
    [key] = tags(registry, url)
    doc = manifest(registry, url, key)
    assert doc["artifactType"] == "application/vnd.trtwarm.entry.v1"
    assert doc["config"]["mediaType"] == "application/vnd.trtwarm.ref.v1+json"
    [layer] = doc["layers"]
    assert layer["digest"] == f"sha256:{engine_sha(tmp_path / 'ha')}"
    assert layer["annotations"]["org.opencontainers.image.title"] == Path(handoff_doc(tmp_path / "ha")["path"]).name
    assert doc["annotations"]["dev.trtwarm.key"] == key

    second = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url), env=env)
    assert second.returncode == 0, second.stderr
    assert second.summary["result"] == "pulled", second.stderr
    assert engine_sha(tmp_path / "hb") == engine_sha(tmp_path / "ha")
    assert "building" not in second.stderr and debris(tmp_path / "b") == []
    listing = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert listing.returncode == 0 and key[:16] in listing.stdout and "1 refs" in listing.stdout, listing.stderr
    shown = run_trtwarm("remote", "show", key[:12], "--remote", url, env=env)
    assert json.loads(shown.stdout)["manifest"]["key"] == key


def test_a_pull_only_consumer_pulls_and_with_nothing_there_times_out(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    nothing = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only",
                                         "--lock-timeout", "1s"), env=env)
    assert nothing.returncode == 5, nothing.stderr
    assert run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env).returncode == 0
    pull = run_trtwarm(*ort_init_args(model, tmp_path / "c", tmp_path / "hc", "--remote", url, "--read-only"), env=env)
    assert pull.returncode == 0 and pull.summary["result"] == "pulled", pull.stderr
    assert engine_sha(tmp_path / "hc") == engine_sha(tmp_path / "ha")


def _racing_command(tmp_path: Path) -> str:
    go = tmp_path / "go"
    return (f"sh -c 'while [ ! -e {go} ]; do sleep 0.05; done; cp {{model}} {{output}}.part; echo $$ >> "
            f"{{output}}.part; mv {{output}}.part {{output}}'")


@pytest.mark.concurrency
def test_eight_racing_pushers_leave_one_tag_and_the_adopters_run_its_engine(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    procs = []
    for i in range(8):
        args = cmd_init_args(model, tmp_path / f"c{i}", tmp_path / f"h{i}", "--remote", url, "--remote-push",
                             "required")
        args[args.index("--build-command") + 1] = _racing_command(tmp_path)
        procs.append(spawn(args, env))
    for proc in procs:
        wait_until(lambda p=proc: "running build command" in p.log.read_text() or p.poll() is not None, 120,
                   "all eight building")
    (tmp_path / "go").touch()
    for proc in procs:
        proc.wait(180)
        assert proc.returncode == 0, proc.log.read_text()
    [key] = tags(registry, url)
    winner = manifest(registry, url, key)["layers"][0]["digest"].removeprefix("sha256:")
    outcomes = {i: handoff_doc(tmp_path / f"h{i}")["remote"]["push"] for i in range(8)}
    shas = {i: engine_sha(tmp_path / f"h{i}") for i in range(8)}
    assert set(shas.values()) == {winner}, (outcomes, winner)  # the settled read-back: every racer adopts the last
    assert sorted(outcomes.values()) == ["adopted"] * 7 + ["pushed"], outcomes
    assert all(debris(tmp_path / f"c{i}") == [] for i in range(8))


def test_a_corrupted_blob_in_the_registry_is_never_handed_over(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    assert run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env).returncode == 0
    blob = registry.blob_file(f"sha256:{engine_sha(tmp_path / 'ha')}")
    good = blob.read_bytes()
    blob.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])  # same size; served with 200 as before

    consumer = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"),
                           env=env)
    assert consumer.returncode == 10, consumer.stderr
    assert "does not match its SHA-256" in consumer.stderr and "Traceback" not in consumer.stderr
    assert entries(tmp_path / "b") == [] and debris(tmp_path / "b") == []
    builder = run_trtwarm(*ort_init_args(model, tmp_path / "c", tmp_path / "hc", "--remote", url), env=env)
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert handoff_doc(tmp_path / "hc")["remote"]["errors"]["integrity"] == 1
    assert engine_sha(tmp_path / "hc") == hashlib.sha256(good).hexdigest()


def test_an_altered_manifest_whose_layers_disagree_with_the_ref_is_refused(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    import urllib.request

    assert run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env).returncode == 0
    [key] = tags(registry, url)
    doc = manifest(registry, url, key)
    doc["layers"].append(doc["config"] | {"mediaType": "application/vnd.trtwarm.file.v1"})  # an extra layer
    request = urllib.request.Request(f"http://{registry.addr}/v2/{repo_of(url)}/manifests/{key}", method="PUT",
                                     data=json.dumps(doc).encode(), headers={"Content-Type": MANIFEST})
    urllib.request.urlopen(request, timeout=10).close()
    run = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"), env=env)
    assert run.returncode == 10 and "do not list the ref's files" in run.stderr, run.stderr
    assert entries(tmp_path / "b") == []


def test_an_untrusted_ref_is_refused_before_a_byte_of_its_engine_is_fetched(
        env: dict[str, str], model: Path, tmp_path: Path) -> None:
    for name in ("ci", "other"):
        assert run_trtwarm("keys", "generate", "--out", str(tmp_path / name)).returncode == 0
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"mode": "enforce", "keys": [{"name": "other", "public_key_file": "other.pub"}]}))
    (tmp_path / "reg").mkdir()
    server = Registry(tmp_path / "reg", accesslog=True).start()
    try:
        url = f"oci://{server.addr}/engines/trust"
        push = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--signing-key",
                                          str(tmp_path / "ci.key")), env=env)
        assert push.returncode == 0, push.stderr
        blob = f"blobs/sha256:{engine_sha(tmp_path / 'ha')}"
        before = server.log.read_text().count(f"GET /v2/engines/trust/{blob}")
        run = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only",
                                         "--trust-policy", str(policy)), env=env)
        assert run.returncode == 7 and entries(tmp_path / "b") == [], run.stderr
        assert server.log.read_text().count(f"GET /v2/engines/trust/{blob}") == before  # the engine never fetched
        assert f"GET /v2/engines/trust/manifests/{handoff_doc(tmp_path / 'ha')['key']}" in server.log.read_text()
        trusting = run_trtwarm(*ort_init_args(model, tmp_path / "c", tmp_path / "hc", "--remote", url, "--read-only"),
                               env=env)  # no policy: pulled, and the log shows its blob GETs (the check above counts)
        assert trusting.returncode == 0 and server.log.read_text().count(f"GET /v2/engines/trust/{blob}") > before
    finally:
        server.stop()


def test_a_chunked_upload_lands_the_same_blob_and_a_wrong_digest_is_refused(registry: Registry, url: str,
                                                                            tmp_path: Path) -> None:
    """The PATCH upload (for a registry behind a proxy that refuses a whole engine in one request: 413)."""
    from trtwarm.errors import RemoteError
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.url import parse

    client = OciClient(parse(url, {"TRTWARM_REMOTE_CHUNK": "1M", "HOME": str(tmp_path)}))
    data = os.urandom((5 << 20) + 12345)  # five whole parts and a short one
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    (tmp_path / "blob").write_bytes(data)
    with open(tmp_path / "blob", "rb") as handle:
        client.upload(digest, handle, len(data), chunked=True)
    assert registry.get(f"{repo_of(url)}/blobs/{digest}")[0] == data
    with pytest.raises(RemoteError, match="DIGEST_INVALID"):
        client.upload(f"sha256:{'0' * 64}", data, len(data), chunked=True)


def test_an_unreachable_registry_builds_or_fails_with_its_own_code(
        env: dict[str, str], model: Path, tmp_path: Path) -> None:
    url = f"oci://127.0.0.1:{free_ports(1)[0]}/engines/dead"
    env = {**env, "TRTWARM_REMOTE_RETRIES": "1"}
    builder = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env)
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert "building locally instead" in builder.stderr
    consumer = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"),
                           env=env)
    assert consumer.returncode == 13 and "did not answer" in consumer.stderr, consumer.stderr
    listing = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert listing.returncode == 13 and "Traceback" not in listing.stderr


def test_gc_and_rm_delete_manifests_only_and_dry_run_changes_nothing(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    for i, precision in enumerate(("fp32", "fp16")):
        args = cmd_init_args(model, tmp_path / "a", tmp_path / f"h{i}", "--remote", url, "--precision", precision)
        assert run_trtwarm(*args, env=env).returncode == 0
    keys = tags(registry, url)
    assert len(keys) == 2
    blob = registry.blob_file(f"sha256:{engine_sha(tmp_path / 'h0')}")
    dry = run_trtwarm("remote", "gc", "--max-age", "0s", "--remote", url, "--dry-run", "--yes", env=env)
    assert dry.returncode == 0 and "would remove ref" in dry.stdout and "manifests only" in dry.stdout, dry.stdout
    assert tags(registry, url) == keys
    rm = run_trtwarm("remote", "rm", keys[0], "--remote", url, "--yes", env=env)
    assert rm.returncode == 0 and tags(registry, url) == keys[1:], rm.stderr
    gc = run_trtwarm("remote", "gc", "--max-age", "0s", "--remote", url, "--yes", env=env)
    assert gc.returncode == 0 and "removed ref" in gc.stdout, gc.stdout
    assert tags(registry, url) == [] and blob.exists()  # blobs go with the registry's own garbage collection
    assert run_trtwarm("remote", "ls", "--remote", url, env=env).returncode == 0


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A registry with htpasswd (Basic) auth."""
    server = Registry(tmp_path_factory.mktemp("locked"), user=("ci", "pushing-secret-2718")).start()
    yield server
    server.stop()


def test_htpasswd_auth_through_the_auth_file_and_every_refusal_its_exit_code(
        locked: Registry, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    url = f"oci://{locked.addr}/engines/auth"
    none = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert none.returncode == 11 and "none are configured" in none.stderr, none.stderr
    wrong = {**env, "REGISTRY_AUTH_FILE": str(locked.auth_file(tmp_path / "wrong.json", ("ci", "not-it-1234")))}
    run = run_trtwarm(*ort_init_args(model, tmp_path / "w", tmp_path / "hw", "--remote", url, "--read-only"),
                      env=wrong)
    assert run.returncode == 11 and "not-it-1234" not in run.stderr + run.stdout, run.stderr
    good = {**env, "REGISTRY_AUTH_FILE": str(locked.auth_file(tmp_path / "auth.json"))}
    push = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=good)
    assert push.returncode == 0 and handoff_doc(tmp_path / "ha")["remote"]["push"] == "pushed", push.stderr
    (tmp_path / "home" / ".docker").mkdir()
    locked.auth_file(tmp_path / "home" / ".docker" / "config.json")  # the default place, no variable
    pull = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"),
                       env=env)
    assert pull.returncode == 0 and pull.summary["result"] == "pulled", pull.stderr
    assert "pushing-secret-2718" not in push.stderr + pull.stderr + (tmp_path / "hb" / "engine.json").read_text()
    (tmp_path / "bad.json").write_text('{"auths": {"x": {"auth": "not base64!"}}}')
    bad = run_trtwarm("remote", "ls", "--remote", url, env={**env, "REGISTRY_AUTH_FILE": str(tmp_path / "bad.json")})
    assert bad.returncode == 2 and "malformed" in bad.stderr, bad.stderr  # fails closed, never anonymous


def test_the_bearer_token_flow_of_a_token_authenticated_registry(
        env: dict[str, str], model: Path, tmp_path: Path) -> None:
    """Distribution with ``auth.token`` (the scheme of Docker Hub, GHCR, Harbor, Quay): a 401 names the realm, the
    client fetches a token there with its Basic credentials and retries; anonymous gets no access."""
    (tmp_path / "reg").mkdir()
    tokens = TokenServer(tmp_path / "reg", ("robot", "token-secret-31415"))
    server = Registry(tmp_path / "reg", token=tokens).start()
    try:
        url = f"oci://{server.addr}/engines/bearer"
        anonymous = run_trtwarm("remote", "ls", "--remote", url, env=env)
        assert anonymous.returncode == 11, anonymous.stderr
        good = {**env, "REGISTRY_AUTH_FILE": str(server.auth_file(tmp_path / "auth.json", tokens.user))}
        push = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=good)
        assert push.returncode == 0 and handoff_doc(tmp_path / "ha")["remote"]["push"] == "pushed", push.stderr
        pull = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"),
                           env=good)
        assert pull.returncode == 0 and pull.summary["result"] == "pulled", pull.stderr
        assert engine_sha(tmp_path / "hb") == engine_sha(tmp_path / "ha") and tokens.issued >= 3
        wrong = {**env, "REGISTRY_AUTH_FILE": str(server.auth_file(tmp_path / "w.json", ("robot", "nope-nope")))}
        refused = run_trtwarm("remote", "ls", "--remote", url, env=wrong)
        assert refused.returncode == 11 and "token service" in refused.stderr, refused.stderr
        assert "token-secret-31415" not in push.stderr + pull.stderr + refused.stderr
    finally:
        server.stop()
        tokens.stop()


def test_prebuild_fills_the_registry_and_coverage_reads_it(
        registry: Registry, url: str, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"models": [{"model": model.name, "shape": ["input=1x16:8x16:32x16"]}],
                                  "options": {"builder": "onnxruntime"}}))
    (tmp_path / model.name).write_bytes(model.read_bytes())
    first = run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", url, env=env)
    assert first.returncode == 0 and "1 ok" in first.stdout, first.stderr
    again = run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", url, env=env)
    assert again.returncode == 0 and "present" in again.stdout, again.stderr
    cover = run_trtwarm("remote", "coverage", "--matrix", str(matrix), "--gpus", "cpu", "--remote", url, "--json",
                        env=env)
    assert cover.returncode == 0 and json.loads(cover.stdout)["percent"] == 100.0, cover.stderr
