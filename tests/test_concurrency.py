"""Single flight with real processes, real locks and real signals on a real filesystem."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import debris, entries, env_for, run_trtwarm, spawn, wait_for_log, wait_until

from trtwarm.volume.entry import check_entry
from trtwarm.volume.layout import Layout
from trtwarm.volume.lock import BuildLock

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


@contextlib.contextmanager
def _held(lock_file: Path, release: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the exclusive flock of *lock_file* until *release* is created (or the test ends)."""
    code = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o664)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\n"
            "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock_file), str(release)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.kill()
        holder.communicate()


def _lock(cache: Path) -> BuildLock:
    from trtwarm.config import Identity

    layout = Layout(cache)
    layout.ensure()
    return BuildLock(layout, "k" * 64, Identity.from_env({}), mode="flock")


#: in a process of its own (pytest-timeout keeps SIGALRM in the test process): a wait on the main thread with the
#: holder still there, one with no time, then one the holder's release ends; timings, and SIGALRM and the timer after
MAIN_THREAD_WAIT = """
import os, signal, sys, threading, time
from pathlib import Path
from trtwarm.config import Identity
from trtwarm.volume.layout import Layout
from trtwarm.volume.lock import BuildLock
layout = Layout(Path(sys.argv[1]))
lock = BuildLock(layout, "k" * 64, Identity.from_env({}), mode="flock")
def state():
    return signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
started = time.monotonic()
timed_out = lock.wait_released(0.3)
took = time.monotonic() - started
looked = lock.wait_released(0)
print(timed_out, round(took, 2), looked, state(), threading.active_count(), flush=True)
threading.Timer(0.5, Path(sys.argv[2]).touch).start()
started = time.monotonic()
print(lock.wait_released(60), round(time.monotonic() - started, 2), state(), flush=True)
"""

def test_a_waiter_blocked_in_its_main_thread_wakes_at_the_release_and_leaves_no_timer(cache: Path,
                                                                                      tmp_path: Path) -> None:
    """The main thread waits on the flock itself (an interval timer cuts the wait short): False when the time is
    up (no helper thread started), True as soon as the holder lets go; SIGALRM and the timer left as found."""
    lock = _lock(cache)
    with _held(lock.layout.lock_path(lock.lock_id), tmp_path / "release") as holder:
        run = subprocess.run([sys.executable, "-c", MAIN_THREAD_WAIT, str(cache), str(tmp_path / "release")],
                             capture_output=True, text=True, timeout=120, env=env_for())
        assert run.returncode == 0, run.stderr
        first, second = (line.split() for line in run.stdout.splitlines())
        assert first[0] == "False" and 0.25 <= float(first[1]) < 10 and first[2:] == ["False", "True", "1"], first
        assert second[0] == "True" and float(second[1]) < 30 and second[2] == "True", second  # the release, not 60 s
        holder.wait(timeout=30)
    assert lock.try_acquire(), "the shared lock of the wait is not kept"
    lock.release()


#: the pause of an init that only waits, in a process of its own: on a lock file nobody holds, on one that does not
#: exist (not made), then on one whose holder lets go after 0.5 s; how long each took
PAUSES = """
import sys, threading, time
from pathlib import Path
from trtwarm.volume import lockwait
held, missing, release = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
def took(path, seconds):
    started = time.monotonic()
    lockwait.pause(path, seconds)
    return round(time.monotonic() - started, 2)
free = took(missing.with_name("free.lock"), 0.3)
absent = took(missing, 0.3)
threading.Timer(0.5, release.touch).start()
print(free, absent, missing.exists(), took(held, 60), flush=True)
"""


def test_the_pause_of_an_init_that_only_waits_ends_at_the_release_and_never_makes_the_lock_file(
        cache: Path, tmp_path: Path) -> None:
    lock = _lock(cache)
    held = lock.layout.lock_path(lock.lock_id)
    (held.parent / "free.lock").touch()
    with _held(held, tmp_path / "release"):
        run = subprocess.run([sys.executable, "-c", PAUSES, str(held), str(held.parent / "missing.lock"),
                              str(tmp_path / "release")], capture_output=True, text=True, timeout=120, env=env_for())
    assert run.returncode == 0, run.stderr
    free, absent, made, released = run.stdout.split()
    assert float(free) >= 0.25 and float(absent) >= 0.25 and made == "False", run.stdout  # slept the whole pause
    assert float(released) < 30, run.stdout  # woke at the release, not after 60 s


def test_a_waiter_in_another_thread_or_beside_someones_sigalrm_waits_in_a_helper_thread(cache: Path,
                                                                                         tmp_path: Path) -> None:
    """Where the main thread's timer is not free (not the main thread, or SIGALRM handled by the embedding
    program), the wait runs in a helper thread and the program's SIGALRM is left alone."""
    lock = _lock(cache)
    alarms: list[int] = []
    with _held(lock.layout.lock_path(lock.lock_id), tmp_path / "release") as holder:
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(lock.wait_released(0.3)))
        waiter.start()
        waiter.join(timeout=30)
        assert got == [False]
        previous = signal.signal(signal.SIGALRM, lambda signum, _frame: alarms.append(signum))
        try:
            assert lock.wait_released(0.3) is False
            assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL and alarms == []
            (tmp_path / "release").touch()
            assert lock.wait_released(60) is True
        finally:
            signal.signal(signal.SIGALRM, previous)
        holder.wait(timeout=30)


def test_sigterm_to_a_waiter_blocked_on_the_lock_exits_143_at_once(model: Path, cache: Path, tmp_path: Path) -> None:
    counter, gate = tmp_path / "builds", tmp_path / "gate"
    gate.touch()
    command = gated_command(counter, gate)
    builder = spawn(init_args(model, cache, tmp_path / "h0", command))
    wait_until(counter.exists, timeout=60)
    waiter = spawn(init_args(model, cache, tmp_path / "h1", command))
    wait_for_log(waiter, "waiting for")
    time.sleep(0.5)  # well inside a wait on the flock
    stopped = time.monotonic()
    waiter.send_signal(signal.SIGTERM)
    code, summary, err = finish(waiter, timeout=60)
    assert code == 143 and summary["exit_code"] == 143, err
    assert time.monotonic() - stopped < 10 and "Traceback" not in err
    gate.unlink()
    assert finish(builder)[0] == 0
