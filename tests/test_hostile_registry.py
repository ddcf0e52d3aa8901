"""The registry backend on a bad day: a real registry (CNCF Distribution, Debian's ``docker-registry``) behind the
hostile proxy of tests/hostile.py, one misbehaviour per case, each against a real ``trtwarm`` process (a pull-only
init, a builder that pushes, ``remote ls``, ``prebuild``). Each case asserts the exit code, the time (a bound), the
peak memory (the child's own ``ru_maxrss``) and that nothing unverified reached the cache or the hand-off; the
SIGTERM cases, exit 143 within 5 s. One registry (and one with htpasswd auth) serves the module.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import entries, run_trtwarm
from hostile import (FAST, PEAK_MB, Elsewhere, Hostile, Reply, Request, after_seen, answer, build_args, duplicated,
                     endless, failed_within, flip, hold, huge, nested, nothing_handed_over, rewrite, run_measured,
                     trickle_body, trickle_head)
from registry import Registry, anonymous_env, registry_binary

from trtwarm.cli.demo import make_model

if registry_binary() is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("docker-registry is missing (apt-get install docker-registry): CI must run these tests")
    pytest.skip("docker-registry is not installed (apt-get install docker-registry)", allow_module_level=True)

USER = ("ci", "registry-secret-5678")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The registries, a model, and one entry pushed to each (by a builder, straight to the registry)."""
    base = tmp_path_factory.mktemp("hostile-registry")
    open_reg = Registry(base / "open").start() if (base / "open").mkdir() is None else None
    locked = Registry(base / "locked", user=USER).start() if (base / "locked").mkdir() is None else None
    env = {**anonymous_env(base / "home"), **FAST}
    auth = {**env, "REGISTRY_AUTH_FILE": str(locked.auth_file(base / "auth.json"))}
    model = make_model(base / "model.onnx")
    w = {"base": base, "open": open_reg, "locked": locked, "env": env, "auth": auth, "model": model}
    for name, reg, e in (("open", open_reg, env), ("locked", locked, auth)):
        args = build_args(model, base / f"seed-{name}", base / f"hseed-{name}", f"oci://{reg.addr}/engines/bad")
        run = run_trtwarm(*args, env=e)
        assert run.returncode == 0 and run.summary["result"] == "built", run.stderr
        doc = json.loads((base / f"hseed-{name}" / "engine.json").read_text())
        w[f"key-{name}"] = doc["key"]
        w["engine"] = doc["path"]
    w["blob"] = "sha256:" + __import__("hashlib").sha256(Path(w["engine"]).read_bytes()).hexdigest()
    yield w
    open_reg.stop()
    locked.stop()




@pytest.fixture
def proxy(world: dict[str, Any]) -> Any:
    hostile = Hostile(upstream=("127.0.0.1", int(world["open"].addr.split(":")[1])))
    yield hostile
    hostile.close()


@pytest.fixture
def locked_proxy(world: dict[str, Any]) -> Any:
    hostile = Hostile(upstream=("127.0.0.1", int(world["locked"].addr.split(":")[1])))
    yield hostile
    hostile.close()


def auth_env(world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> dict[str, str]:
    """The environment with an auth file for the registry as reached through *proxy* (its address)."""
    token = __import__("base64").b64encode(":".join(USER).encode()).decode()
    (tmp_path / "auth.json").write_text(json.dumps({"auths": {proxy.addr: {"auth": token}}}))
    return {**world["env"], "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")}


def url_of(proxy: Hostile) -> str:
    return f"oci://{proxy.addr}/engines/bad"


def pull_only(world: dict[str, Any], proxy: Hostile, tmp_path: Path, *extra: str) -> list[str]:
    return build_args(world["model"], tmp_path / "c", tmp_path / "h", url_of(proxy), "--read-only",
                      "--lock-timeout", "20s", *extra)




def manifests(r: Request) -> bool:
    return r.method == "GET" and "/manifests/" in r.path


def tags(r: Request) -> bool:
    return "/tags/list" in r.path


def blob(world: dict[str, Any]) -> Any:
    return lambda r: r.method == "GET" and r.path.endswith(world["blob"])




# --- the pull-only init: exit code, time, memory, nothing handed over -------------------------------------------------
PULL_CASES = [
    # (id, predicate, behaviour, exit code, seconds at most, words in the log)
    ("black-hole-manifest", manifests, hold, 13, 12, "did not answer"),
    ("headers-1-byte-per-second", manifests, trickle_head, 13, 12, "no complete answer within 2 s"),
    ("blob-body-1-byte-per-second", "blob", trickle_body, 13, 20, "slower than the 32 KiB/s minimum"),
    ("endless-manifest", manifests, endless(200), 10, 15, "larger than 4194304 bytes"),
    ("endless-error-on-manifest", manifests, endless(500), 10, 15, "status 500"),
    ("endless-error-on-blob", "blob", endless(503), 10, 20, "status 503"),
    ("huge-error-on-blob", "blob", huge(404, 200 << 20), 10, 20, "blob"),
    ("retry-after-an-hour", manifests, answer(503, b"{}", [("Retry-After", "3600")]), 10, 8, "retry after 3600 s"),
    ("nested-manifest", manifests, answer(200, nested()), 10, 8, "not a trtwarm entry manifest"),
    ("duplicated-keys-in-manifest", manifests, "dup", 10, 8, "given twice"),
    ("blob-bytes-differ-from-its-head", "blob", rewrite(flip), 10, 15, "does not match its SHA-256"),
    ("redirect-loop-on-blob", "blob", answer(307, b"", [("Location", "#self")]), 10, 10, "loop"),
]


@pytest.mark.parametrize("case", PULL_CASES, ids=[c[0] for c in PULL_CASES])
def test_a_pull_only_init_against_a_bad_registry(world: dict[str, Any], proxy: Hostile, tmp_path: Path,
                                                 case: tuple[Any, ...]) -> None:
    _name, predicate, behaviour, code, bound, words = case
    if predicate == "blob":
        predicate = blob(world)
    if behaviour == "dup":
        behaviour = rewrite(lambda req, rep: Reply(rep.status, rep.without("Docker-Content-Digest"),
                                                   duplicated(rep.body.decode())))  # a registry that lies well
    if words == "loop":  # a blob redirect that points back at itself
        behaviour = lambda p, r, c: answer(307, b"", [("Location", r.path)])(p, r, c)  # noqa: E731
    proxy.on(predicate, behaviour)
    run, _ = run_measured(pull_only(world, proxy, tmp_path), world["env"])
    failed_within(run, tmp_path, code, words, bound)


def test_a_pull_only_init_is_bounded_by_its_lock_timeout_with_the_default_waits(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(lambda r: True, hold)
    env = {k: v for k, v in world["env"].items() if k not in FAST}
    run, _ = run_measured(pull_only(world, proxy, tmp_path)[:-2] + ["--lock-timeout", "6s"], env)
    assert run.returncode == 13 and run.seconds <= 6 + 4, (run.seconds, run.stderr[-2000:])
    nothing_handed_over(tmp_path)


def test_remote_ls_against_a_black_hole_costs_one_default_budget(world: dict[str, Any], proxy: Hostile) -> None:
    """The issue measured about 153 s; the default budget is about 22 s (15 s retry window + 5 s + 2 s)."""
    proxy.on(lambda r: True, hold)
    env = {k: v for k, v in world["env"].items() if k not in FAST}
    run, _ = run_measured(["remote", "ls", "--remote", url_of(proxy)], env)
    assert run.returncode == 13 and run.seconds <= 30, (run.seconds, run.stderr[-2000:])
    assert "waiting for oci://" in run.stderr and "gives up after about 22 s" in run.stderr


# --- listings ---------------------------------------------------------------------------------------------------------
LS_CASES = [
    ("self-link", rewrite(lambda req, rep: Reply(rep.status, rep.headers + [("Link", f'<{req.target}>; rel="next"')],
                                                 rep.body)), 10, "loop back"),
    ("huge-page", huge(200, 100 << 20), 10, "larger than 8388608 bytes"),
    ("endless-page", endless(200), 10, "larger than 8388608 bytes"),
    ("nested-page", answer(200, nested()), 10, "nested deeper|larger than"),
    ("duplicated-keys-page", answer(200, b'{"name": "engines/bad", "tags": [], "tags": ["' + b"a" * 64 + b'"]}'), 10,
     "given twice"),
    ("huge-error-page", huge(500, 200 << 20), 10, "status 500"),
]


@pytest.mark.parametrize("case", LS_CASES, ids=[c[0] for c in LS_CASES])
def test_remote_ls_against_a_bad_tag_listing(world: dict[str, Any], proxy: Hostile, case: tuple[Any, ...]) -> None:
    _name, behaviour, code, words = case
    proxy.on(tags, behaviour)
    run, _ = run_measured(["remote", "ls", "--remote", url_of(proxy)], world["env"])
    assert run.returncode == code and re.search(words, run.stderr), run.stderr[-2000:]
    assert run.seconds <= 15 and run.peak_mb < PEAK_MB, (run.seconds, run.peak_mb)
    assert len([r for r in proxy.seen if tags(r)]) <= 8  # a loop is caught on its first repeat
    assert "Traceback" not in run.stderr


# --- another origin: the registry's credentials never leave it --------------------------------------------------------
def _elsewhere_location(other: Elsewhere) -> Any:
    def change(request: Request, reply: Reply) -> Reply:
        location = reply.header("Location") or ""
        path = location.split("/v2/", 1)[1] if "/v2/" in location else "x"
        return Reply(reply.status, reply.without("Location") + [("Location", f"http://{other.addr}/v2/{path}")],
                     reply.body)
    return rewrite(change)


def test_an_upload_location_on_another_origin_gets_no_credentials(world: dict[str, Any], locked_proxy: Hostile,
                                                                  tmp_path: Path) -> None:
    other = Elsewhere(status=401)
    try:
        locked_proxy.on(lambda r: r.method == "POST" and "/blobs/uploads/" in r.path, _elsewhere_location(other))
        matrix = tmp_path / "matrix.json"
        matrix.write_text(json.dumps({"models": [{"model": str(world["model"])}], "options": {
            "builder": "command", "builder-version": "other-1", "device": "cpu",
            "build-command": "sh -c 'head -c 1000 /dev/zero > {output}'"}}))
        run, _ = run_measured(["prebuild", "--matrix", str(matrix), "--remote", url_of(locked_proxy)],
                              auth_env(world, locked_proxy, tmp_path))
        assert run.returncode == 11 and "never sent to another origin" in run.stderr, run.stderr[-2000:]
        assert other.requests and other.authorizations == [], other.requests
        assert USER[1] not in run.stderr + run.stdout
    finally:
        other.close()


def test_a_tag_page_link_to_another_origin_is_refused_and_gets_nothing(world: dict[str, Any], locked_proxy: Hostile,
                                                                      tmp_path: Path) -> None:
    other = Elsewhere(status=200)
    try:
        locked_proxy.on(tags, rewrite(lambda req, rep: Reply(rep.status, rep.headers + [
            ("Link", f'<http://{other.addr}/v2/engines/bad/tags/list?last=x>; rel="next"')], rep.body)))
        run, _ = run_measured(["remote", "ls", "--remote", url_of(locked_proxy)],
                              auth_env(world, locked_proxy, tmp_path))
        assert run.returncode == 10 and "next page on another origin" in run.stderr, run.stderr[-2000:]
        assert other.requests == []
    finally:
        other.close()


def test_a_blob_redirect_to_another_origin_gets_no_credentials(world: dict[str, Any], locked_proxy: Hostile,
                                                               tmp_path: Path) -> None:
    other = Elsewhere(status=403)
    try:
        locked_proxy.on(blob(world), answer(307, b"", [("Location", f"http://{other.addr}/storage/blob?sig=1")]))
        url = url_of(locked_proxy)
        args = build_args(world["model"], tmp_path / "c", tmp_path / "h", url, "--read-only", "--lock-timeout", "20s")
        run, _ = run_measured(args, auth_env(world, locked_proxy, tmp_path))
        assert run.returncode == 11 and "never sent to another origin" in run.stderr, run.stderr[-2000:]
        assert other.requests and other.authorizations == []
        assert USER[1] not in run.stderr + run.stdout
        nothing_handed_over(tmp_path)
    finally:
        other.close()


# --- pushes -----------------------------------------------------------------------------------------------------------
def test_a_registry_that_answers_201_and_stores_nothing_fails_a_required_push(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(lambda r: r.method == "PUT" and "/manifests/" in r.path, answer(201))
    args = build_args(world["model"], tmp_path / "c", tmp_path / "h", url_of(proxy), "--remote-push", "required",
                      "--builder-version", "lying-201")
    run, _ = run_measured(args, world["env"])
    assert run.returncode == 10 and "answered the manifest PUT with 201 but does not have it when read back" in run.stderr \
        and "pull-through cache or a read-only mirror" in run.stderr, run.stderr[-2000:]
    assert entries(tmp_path / "c") == [] and run.seconds < 30


def test_a_push_never_retries_a_post_blindly(world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(lambda r: r.method == "POST", answer(503, b'{"errors": [{"code": "UNAVAILABLE"}]}'))
    args = build_args(world["model"], tmp_path / "c", tmp_path / "h", url_of(proxy), "--builder-version", "post-1")
    run, _ = run_measured(args, world["env"])
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr[-2000:]
    assert len([r for r in proxy.seen if r.method == "POST"]) == 1
    assert json.loads((tmp_path / "h" / "engine.json").read_text())["remote"]["push"] == "failed"


# --- SIGTERM ----------------------------------------------------------------------------------------------------------
def test_sigterm_during_a_trickled_blob_exits_143_within_5_s(world: dict[str, Any], proxy: Hostile,
                                                              tmp_path: Path) -> None:
    proxy.on(blob(world), trickle_body)
    env = {**world["env"], "TRTWARM_REMOTE_READ_TIMEOUT": "60s", "TRTWARM_REMOTE_MIN_RATE": "1"}
    in_the_body = after_seen(proxy, blob(world), 1.5)
    run, after = run_measured(pull_only(world, proxy, tmp_path), env, signal_when=in_the_body)
    assert run.returncode == 143 and after is not None and after <= 5, (run.returncode, after, run.stderr[-2000:])
    nothing_handed_over(tmp_path)


def test_sigterm_during_a_black_holed_push_after_the_hand_off_keeps_the_hand_off_ready(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(lambda r: r.method in ("POST", "PUT", "PATCH") or (r.method == "HEAD"), hold)
    env = {**world["env"], "TRTWARM_REMOTE_READ_TIMEOUT": "60s", "TRTWARM_REMOTE_RETRY_TIMEOUT": "60s"}
    args = build_args(world["model"], tmp_path / "c", tmp_path / "h", url_of(proxy), "--builder-version", "push-1")
    report = tmp_path / "h" / "engine.json"
    pushing = after_seen(proxy, lambda r: report.exists() and r.method in ("HEAD",), 1.0)
    run, after = run_measured(args, env, signal_when=pushing)
    assert run.returncode == 143 and after is not None and after <= 5, (run.returncode, after, run.stderr[-2000:])
    doc = json.loads(report.read_text())
    assert doc["ready"] is True and doc["result"] == "built", doc
    assert (tmp_path / "h" / "engine").exists()


def test_a_registry_that_went_dark_costs_one_budget_then_the_push_is_skipped_at_once(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(blob(world), hold)
    args = build_args(world["model"], tmp_path / "c", tmp_path / "h", url_of(proxy))
    run, _ = run_measured(args, world["env"])
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr[-2000:]
    doc = json.loads((tmp_path / "h" / "engine.json").read_text())
    assert doc["remote"]["push"] == "failed" and doc["seconds"]["push"] < 2, doc["remote"]
    assert run.stderr.count("skipping it for the rest of this process") == 1
