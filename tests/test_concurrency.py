"""Single flight with real processes, real locks and real signals on a real filesystem."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import debris, entries, run_trtwarm, spawn, wait_for_log, wait_until

from trtwarm.volume.entry import check_entry

pytestmark = pytest.mark.concurrency


def gated_command(counter: Path, gate: Path) -> str:
    """A build that counts itself, then waits while *gate* exists, then copies the model."""
    return (f"sh -c 'echo $$ >> {counter}; while [ -e {gate} ]; do sleep 0.05; done; "
            "cp {model} {output}.part && mv {output}.part {output}'")


def init_args(model: Path, cache: Path, handoff: Path, command: str, *extra: str) -> list[str]:
    return ["init", "--builder", "command", "--builder-version", "test-1", "--build-command", command, "--device",
            "cpu", "--model", str(model), "--cache-dir", str(cache), "--handoff-dir", str(handoff),
            "--progress-interval", "1s", *extra]


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, dict, str]:
    out, _ = proc.communicate(timeout=timeout)
    last = out.strip().splitlines()[-1] if out.strip() else "{}"
    return proc.returncode, json.loads(last), proc.log.read_text()  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["flock", "lease"])
def test_storm_of_16_inits_builds_exactly_once(model: Path, cache: Path, tmp_path: Path, mode: str) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    procs = [spawn(init_args(model, cache, tmp_path / f"h{i}", command, "--lock-mode", mode)) for i in range(16)]
    wait_until(counter.exists, timeout=60)
    time.sleep(1.0)  # let the others pile up behind the lock
    gate.unlink()
    results = [finish(p) for p in procs]
    assert [code for code, _, _ in results] == [0] * 16, [err for _, _, err in results if err][:1]
    outcomes = sorted(summary["result"] for _, summary, _ in results)
    assert outcomes.count("built") == 1 and set(outcomes) <= {"built", "waited", "hit"}
    assert len(counter.read_text().split()) == 1
    [entry] = entries(cache)
    check_entry(entry, None)  # re-hashes the engine against its manifest
    assert {summary["path"] for _, summary, _ in results} == {str(entry / "engine.plan")}
    assert debris(cache) == []


def test_storm_waiters_all_wake_on_publish_and_none_takes_the_lock_after_it(model: Path, cache: Path,
                                                                            tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    procs = [spawn(init_args(model, cache, tmp_path / f"h{i}", command)) for i in range(12)]
    logs = [p.log for p in procs]  # type: ignore[attr-defined]
    # every process is either the builder or provably blocked behind it before the build may finish
    wait_until(lambda: all("building" in log.read_text() or "waiting for" in log.read_text() for log in logs),
               timeout=120, what="all 12 inits building or waiting")
    gate.unlink()
    results = [finish(p) for p in procs]
    assert [code for code, _, _ in results] == [0] * 12, [err for _, _, err in results if err][:1]
    assert sorted(summary["result"] for _, summary, _ in results) == ["built"] + ["waited"] * 11
    holders = [err for _, _, err in results if "holding the build lock" in err]
    assert len(holders) == 1, "only the builder ever held the key's lock; the waiters saw the entry and left"
    waiters = [err for _, summary, err in results if summary["result"] == "waited"]
    assert all("appeared while waiting" in err for err in waiters)


def test_sigkill_of_the_builder_with_several_waiters_builds_once_more(model: Path, cache: Path,
                                                                       tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    builder = spawn(init_args(model, cache, tmp_path / "h0", command))
    wait_until(counter.exists, timeout=60)
    waiters = [spawn(init_args(model, cache, tmp_path / f"h{i}", command)) for i in range(1, 5)]
    for waiter in waiters:
        wait_for_log(waiter, "waiting for")
    os.killpg(builder.pid, signal.SIGKILL)
    builder.wait(timeout=10)
    wait_until(lambda: len(counter.read_text().split()) == 2, timeout=60)  # one waiter took over at once
    gate.unlink()
    results = [finish(w) for w in waiters]
    assert [code for code, _, _ in results] == [0] * 4, [err for _, _, err in results][:1]
    assert sorted(summary["result"] for _, summary, _ in results) == ["built", "waited", "waited", "waited"]
    assert len(counter.read_text().split()) == 2 and len(entries(cache)) == 1 and debris(cache) == []


def test_sigkill_of_the_builder_lets_a_waiter_take_over(model: Path, cache: Path, tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    builder = spawn(init_args(model, cache, tmp_path / "h1", command),
                    env={"POD_NAME": "builder-0", "POD_NAMESPACE": "ml", "NODE_NAME": "gpu-node-7"})
    wait_until(counter.exists, timeout=60)
    waiter = spawn(init_args(model, cache, tmp_path / "h2", command))
    wait_for_log(waiter, "being built by pod builder-0 on node gpu-node-7")  # blocked behind the builder
    os.killpg(builder.pid, signal.SIGKILL)  # the whole process group: trtwarm and its build command
    builder.wait(timeout=10)
    # the waiter took the lock and started its build
    wait_until(lambda: len(counter.read_text().split()) == 2, timeout=60)
    gate.unlink()
    code, summary, err = finish(waiter)
    assert code == 0, err
    assert summary["result"] == "built"
    assert "being built by pod builder-0 on node gpu-node-7" in err
    assert "removed stale staging directory" in err
    assert len(entries(cache)) == 1 and debris(cache) == []


def test_sigkill_in_lease_mode_is_taken_over_after_the_lease_expires(model: Path, cache: Path,
                                                                      tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    builder = spawn(init_args(model, cache, tmp_path / "h1", command, "--lock-mode", "lease"))
    wait_until(counter.exists, timeout=60)
    waiter = spawn(init_args(model, cache, tmp_path / "h2", command, "--lock-mode", "lease"))
    wait_for_log(waiter, "waiting for")
    os.killpg(builder.pid, signal.SIGKILL)
    builder.wait(timeout=10)
    killed_at = time.monotonic()
    wait_until(lambda: len(counter.read_text().split()) == 2, timeout=90)
    gate.unlink()
    code, summary, err = finish(waiter)
    assert code == 0, err
    assert summary["result"] == "built" and time.monotonic() - killed_at < 90
    assert len(entries(cache)) == 1 and debris(cache) == []


def test_inits_for_different_keys_do_not_block_each_other(model: Path, cache: Path, tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    slow = spawn(init_args(model, cache, tmp_path / "h1", command, "--key-extra", "variant=a"))
    wait_until(counter.exists, timeout=60)
    other_gate_free = gated_command(tmp_path / "builds-b", tmp_path / "no-gate")
    fast = run_trtwarm(*init_args(model, cache, tmp_path / "h2", other_gate_free, "--key-extra", "variant=b"),
                       timeout=60)
    assert fast.returncode == 0 and fast.summary["result"] == "built"
    assert slow.poll() is None  # still building its own key
    gate.unlink()
    code, summary, _ = finish(slow)
    assert code == 0 and summary["result"] == "built"
    assert len(entries(cache)) == 2


def test_lock_timeout_exits_5_naming_the_holder(model: Path, cache: Path, tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    holder = spawn(init_args(model, cache, tmp_path / "h1", command), env={"POD_NAME": "big-build-0"})
    wait_until(counter.exists, timeout=60)
    late = run_trtwarm(*init_args(model, cache, tmp_path / "h2", command, "--lock-timeout", "2s"))
    gate.unlink()
    assert late.returncode == 5, late.stderr
    assert "big-build-0" in late.stderr and "Traceback" not in late.stderr
    assert finish(holder)[0] == 0


def test_read_only_mode_waits_for_another_builder(model: Path, cache: Path, tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    builder = spawn(init_args(model, cache, tmp_path / "h1", command))
    wait_until(counter.exists, timeout=60)
    reader = spawn(init_args(model, cache, tmp_path / "h2", command, "--read-only"))
    wait_for_log(reader, "--read-only: waiting for another builder")  # it saw the miss and is polling
    gate.unlink()
    code, summary, err = finish(reader)
    assert code == 0, err
    assert summary["result"] == "waited" and len(counter.read_text().split()) == 1
    assert finish(builder)[0] == 0


def test_read_only_mode_without_a_builder_times_out_with_5(model: Path, cache: Path, tmp_path: Path) -> None:
    command = gated_command(tmp_path / "builds", tmp_path / "gate")
    run = run_trtwarm(*init_args(model, cache, tmp_path / "h", command, "--read-only", "--lock-timeout", "1s"))
    assert run.returncode == 5 and "--read-only" in run.stderr
    assert not (tmp_path / "builds").exists()
