"""Storm and takeover benchmarks: ``trtwarm init`` against the seed's shell protocol, run side by side.

The seed protocol (one builder by ``flock -n``, everyone else polls for the file)::

    flock -n LOCK -c 'build > ENGINE' || while [ ! -f ENGINE ]; do sleep 1; done

Both protocols run the same build: sleep, then write the engine in 64 KiB chunks over ~0.2 s, as a serializer
writing a large engine does. The seed writes the engine in place, so a poller can read it half-written (a torn read,
counted by comparing the bytes); trtwarm builds in staging and publishes by one rename.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WRITER = ("import sys,time\nsrc=open(sys.argv[1],'rb').read()\nwith open(sys.argv[2],'wb') as f:\n"
          "    for i in range(0,len(src),65536):\n        f.write(src[i:i+65536]); f.flush(); time.sleep(0.0125)\n")


def _writer(work: Path) -> tuple[Path, Path]:
    """The engine source (1 MiB) and the chunked writer script."""
    src, script = work / "engine-src", work / "writer.py"
    if not src.exists():
        src.write_bytes(os.urandom(1 << 20))
        script.write_text(WRITER)
    return src, script


def _until(predicate, timeout: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("bench: condition not reached")
        time.sleep(0.05)


def _gated(gate: Path, seconds: float) -> str:
    """The build's wait: at least *seconds*, and until the bench removes *gate* (every waiter is waiting)."""
    return f"sleep {seconds}; while [ -e {gate} ]; do sleep 0.05; done"


def _staggered(n: int, start) -> list[subprocess.Popen]:  # noqa: ANN001
    """Start *n* processes spread evenly over one second, as Pods of a rollout start (both protocols alike): the
    seed's one-second polls then fall at every phase of the publish, instead of all at the same instant."""
    procs = []
    for i in range(n):
        procs.append(start(i))
        time.sleep(1.0 / n)
    return procs


def seed_storm(work: Path, n: int, build_seconds: float) -> dict[str, object]:
    """N shell processes of the seed protocol; ready times after the engine is complete, torn reads."""
    src, script = _writer(work)
    run = work / f"seed-{n}"
    run.mkdir()
    engine, lock = run / "engine.plan", run / "lock"
    gate = run / "gate"
    gate.touch()
    build = (f"echo $$ >> {run}/builds; {_gated(gate, build_seconds)}; {sys.executable} {script} {src} {engine}; "
             f"date +%s.%N > {run}/published")
    waiter = (f"flock -n {lock} -c '{build}' || while [ ! -f {engine} ]; do sleep 1; done; "
              f"if cmp -s {src} {engine}; then r=ok; else r=torn; fi; echo \"$(date +%s.%N) $r\" >> {run}/ready")
    procs = _staggered(n, lambda _i: subprocess.Popen(["sh", "-c", waiter]))
    time.sleep(2.0)  # every shell is past `flock -n` and in its polling loop
    gate.unlink()
    codes = [p.wait() for p in procs]
    published = float((run / "published").read_text())
    lines = [line.split() for line in (run / "ready").read_text().splitlines()]
    # a torn reader is "ready" with a broken engine, possibly before the publish: only whole engines count
    after = sorted(float(t) - published for t, r in lines if r == "ok")
    return {"n": n, "builds": len((run / "builds").read_text().split()), "exit_ok": codes.count(0),
            "median_s": statistics.median(after), "last_s": max(after),
            "torn": sum(1 for _, r in lines if r == "torn")}


def trtwarm_storm(work: Path, n: int, build_seconds: float, init_argv, env: dict[str, str],  # noqa: ANN001
                  model: Path, trace: bool = False) -> dict[str, object]:
    """N ``trtwarm init`` processes on an empty key; ready (engine.json written) after publish (the rename)."""
    src, script = _writer(work)
    run = work / f"trtwarm-{n}"
    run.mkdir()
    cache = run / "cache"
    # warm the stat cache with another key, as on any volume that served this model before
    subprocess.run([*init_argv(model, cache, run / "h-warm", "cp {model} {output}"), "--key-extra", "w=1"],
                   check=True, capture_output=True, env=env)
    gate = run / "gate"
    gate.touch()
    command = (f"sh -c 'echo $$ >> {run}/builds; {_gated(gate, build_seconds)}; {sys.executable} {script} {src} "
               "{output}'")
    logs = [run / f"h{i}.log" for i in range(n)]
    wrap = traced if trace else list
    procs = _staggered(n, lambda i: subprocess.Popen(wrap([*init_argv(model, cache, run / f"h{i}", command),
                                                           "--progress-interval", "1s"]), env=env,
                                                     stdout=subprocess.PIPE, stderr=logs[i].open("w"), text=True))
    # every waiter is provably blocked (it logged a progress line) before the build may finish, as the seed's are
    _until(lambda: sum("waiting for" in log.read_text() for log in logs) >= n - 1, 600)
    gate.unlink()
    outs, cpu = [], []  # cpu: each process's whole CPU time (its exit's teardown included), from wait4
    for p in procs:
        outs.append(p.stdout.read())
        p.stdout.close()
        _pid, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu.append(usage.ru_utime + usage.ru_stime)
    results = [out.strip().splitlines()[-1] if out.strip() else "" for out in outs]
    published = (cache / "entries").stat().st_mtime  # the publishing rename is the last change to entries/
    after = sorted((run / f"h{i}" / "engine.json").stat().st_mtime - published for i in range(n))
    torn = sum(1 for i in range(n) if (run / f"h{i}" / "engine").read_bytes() != src.read_bytes())
    return {"n": n, "builds": len((run / "builds").read_text().split()),
            "exit_ok": sum(1 for p in procs if p.returncode == 0), "last_s": max(after),
            "median_s": statistics.median(after), "torn": torn,
            "waited": sum(1 for r in results if '"waited"' in r), "hit": sum(1 for r in results if '"hit"' in r),
            **({"trace": trace_summary(logs, cpu)} if trace else {})}


def enforced(work: Path, init_argv, env: dict[str, str]):  # noqa: ANN001, ANN201
    """*init_argv* under ``--trust-mode enforce`` (a policy trusting one new key, the hand-off a link as in the other
    storms): the first init of a storm (``h0``, started first) holds the signing key and builds, every other one is
    a consumer, which may not build and only waits for a signed entry (as serving Pods do where a prebuild Job or a
    signing Pod builds)."""
    import json

    key = work / "signing"
    if not (work / "policy.json").exists():
        subprocess.run([sys.executable, "-m", "trtwarm", "keys", "generate", "--out", str(key)], check=True,
                       capture_output=True, env=env)
        (work / "policy.json").write_text(json.dumps({"mode": "enforce", "keys": [{"name": "signing",
                                                                                     "public_key_file": "signing.pub"}]}))

    def argv(model: Path, cache: Path, handoff: Path, command: str) -> list[str]:
        signer = ["--signing-key", f"{key}.key"] if handoff.name in ("h0", "h-warm") else []
        return [*init_argv(model, cache, handoff, command), "--trust-policy", str(work / "policy.json"),
                "--handoff", "link", *signer]

    return argv


#: ``--trace``: each init started through this launcher, under ``-X importtime``, which marks on its stderr (the init's
#: log) when its shared flock was granted (the wake-up, in the lock's helper thread), when the main thread woke from
#: waiting for that helper (``main``), each rename into the volume's entries (the publish), the hand-off's
#: ``engine.json`` replace and the exit. Each mark carries the wall clock, the process's CPU time, the marking thread's
#: CPU time and its ``/proc/thread-self/schedstat`` run delay (nanoseconds runnable but waiting for a CPU; its first
#: field, the time on a CPU, lags by up to a tick for the thread reading it), so the
#: main thread's time from its wake-up to the hand-off splits into on a CPU, waiting for a CPU, and blocked (I/O,
#: locks). The import lines after the wake-up are the imports the waiter makes on its way out. The launcher imports
#: only ``fcntl``, ``os``, ``sys``, ``threading`` and ``time`` before trtwarm does.
TRACER = """
import fcntl, os, sys, threading, time
def mark(what):
    try:  # its second field: when a task is running, the wait before this run is already counted
        with open("/proc/thread-self/schedstat", "rb") as f:
            waiting = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        waiting = 0
    sys.stderr.write(f"trace: {what} {time.time():.6f} {time.process_time():.6f} {time.thread_time_ns()} {waiting}\\n")
    sys.stderr.flush()
real_flock, real_rename, real_replace, real_exit = fcntl.flock, os.rename, os.replace, os._exit
real_wait = threading.Event.wait
published, woke = [], []
def flock(fd, op):
    real_flock(fd, op)
    if op == fcntl.LOCK_SH:
        mark("woke")
        woke.append(1)
        if threading.current_thread() is threading.main_thread():  # it waited on the flock itself
            mark("main")
            woke.append(1)
    elif op == fcntl.LOCK_UN and published:
        mark("released")
def wait(self, timeout=None):
    got = real_wait(self, timeout)
    if got and woke and len(woke) == 1 and threading.current_thread() is threading.main_thread():
        mark("main")
        woke.append(1)
    return got
def rename(src, dst, *args, **kw):
    real_rename(src, dst, *args, **kw)
    if "--" in str(dst) and "." not in str(dst):
        mark("published")
        published.append(1)
def replace(src, dst, *args, **kw):
    real_replace(src, dst, *args, **kw)
    if str(dst).endswith("engine.json"):
        mark("handoff")
def _exit(code):
    mark("exit"); real_exit(code)
fcntl.flock, os.rename, os.replace, os._exit = flock, rename, replace, _exit
threading.Event.wait = wait
mark("start")
sys.argv = ["trtwarm", *sys.argv[1:]]
from trtwarm.cli.entry import run
run()
"""


def traced(argv: list[str]) -> list[str]:
    """*argv* (``python -m trtwarm ...``) run through :data:`TRACER` under ``-X importtime``."""
    return [argv[0], "-X", "importtime", "-c", TRACER, *argv[argv.index("trtwarm") + 1:]]


def trace_summary(logs: list[Path], cpu: list[float] | None = None) -> dict[str, object]:
    """From traced logs (and *cpu*, each process's whole CPU seconds, in the order of *logs*): per waiter, the
    wake-up after the publish, the hand-off after the wake-up, the exit after the hand-off, the CPU it spent after
    its wake-up (to the hand-off, and in all: its exit's teardown included), and its main thread's time from its
    wake-up to the hand-off on a CPU, waiting for one, and blocked (medians and the last); and the imports made after
    the wake-up (their summed self time)."""
    import calendar

    marks, late = [], {}
    for i, log in enumerate(logs):
        seen, woke = {}, False
        for line in log.read_text().splitlines():
            if line.startswith("trace: "):
                what, when, used, *sched = line.split()[1:6]
                seen.setdefault(what, float(when))
                seen.setdefault(f"{what}_cpu", float(used))
                if len(sched) == 2:
                    seen.setdefault(f"{what}_sched", (int(sched[0]) / 1e9, int(sched[1]) / 1e9))
                woke = woke or what == "woke"
            elif " appeared while waiting " in line:  # the log's own clock: UTC, milliseconds
                stamp, _, millis = line.split()[0].rstrip("Z").partition(".")
                seen["appeared"] = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) + int(millis) / 1000
            elif woke and line.startswith("import time:") and "|" in line:
                self_us, _cum, name = (part.strip() for part in line[len("import time:"):].split("|", 2))
                if self_us.isdigit():
                    late[name.strip()] = late.get(name.strip(), 0) + int(self_us)
        if cpu is not None:
            seen["cpu_total"] = cpu[i]
        marks.append(seen)
    published = min(m["published"] for m in marks if "published" in m)
    released = min((m["released"] for m in marks if "released" in m), default=published)
    waiters = [m for m in marks if "woke" in m and "handoff" in m]
    steps = {"released": [released - published], "woke": [m["woke"] - released for m in waiters],
             "appeared": [m["appeared"] - m["woke"] for m in waiters if "appeared" in m],
             "handoff": [m["handoff"] - m["woke"] for m in waiters],
             "exit": [m["exit"] - m["handoff"] for m in waiters if "exit" in m],
             "cpu_after_wake": [m["handoff_cpu"] - m["woke_cpu"] for m in waiters],
             "cpu_after_wake_with_exit": [m["cpu_total"] - m["woke_cpu"] for m in waiters if "cpu_total" in m],
             "cpu_to_wait": [m["woke_cpu"] for m in waiters],
             "ready": [m["handoff"] - published for m in waiters], **_main_thread(waiters)}
    return {"waiters": len(waiters), **{f"{k}_median_s": statistics.median(v) for k, v in steps.items() if v},
            **{f"{k}_last_s": max(v) for k, v in steps.items() if v},
            "late_imports_us": dict(sorted(late.items(), key=lambda kv: -kv[1])[:25]),
            "late_import_us_per_waiter": sum(late.values()) / max(1, len(waiters))}


def _main_thread(waiters: list[dict[str, object]]) -> dict[str, list[float]]:
    """The main thread's seconds from its wake-up (``main``) to the hand-off: in all, on a CPU, runnable but waiting
    for a CPU, and blocked (the rest: I/O, a lock, a page fault that waits)."""
    both = [m for m in waiters if "main_sched" in m and "handoff_sched" in m]
    wall = [m["handoff"] - m["main"] for m in both]
    on_cpu = [m["handoff_sched"][0] - m["main_sched"][0] for m in both]
    waiting = [m["handoff_sched"][1] - m["main_sched"][1] for m in both]
    return {"main_to_handoff": wall, "main_on_cpu": on_cpu, "main_waiting_for_cpu": waiting,
            "main_blocked": [w - c - q for w, c, q in zip(wall, on_cpu, waiting)],
            "wake_to_main": [m["main"] - m["woke"] for m in both]}


def trace_table(rows: list[dict[str, object]]) -> str:
    """The traced storms (:func:`trace_summary` of each, by N) as a table: medians, the slowest waiter's in brackets,
    milliseconds."""
    def ms(t: dict[str, float], key: str) -> str:
        if f"{key}_median_s" not in t:
            return "-"
        return f"{t[f'{key}_median_s'] * 1000:.1f} ({t[f'{key}_last_s'] * 1000:.1f})"

    lines = ["| N | release → wake-up | wake-up → main thread | main thread → hand-off: in all | on a CPU | "
             "waiting for a CPU | blocked | CPU after the wake-up: to the hand-off | with the exit | last ready |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ours: dict[str, Any] = row["trtwarm"]  # type: ignore[assignment]
        cells = [ms(ours["trace"], k) for k in ("woke", "wake_to_main", "main_to_handoff", "main_on_cpu",
                                                "main_waiting_for_cpu", "main_blocked", "cpu_after_wake",
                                                "cpu_after_wake_with_exit")]
        lines.append(f"| {row['n']} | " + " | ".join(cells) + f" | {ours['last_s'] * 1000:.0f} |")
    return "\n".join(lines)


def takeover(work: Path, init_argv, env: dict[str, str], model: Path) -> dict[str, object]:  # noqa: ANN001
    """SIGKILL a builder with 4 waiters behind it: seconds until a waiter's build starts, vs a fresh init's start."""
    run = work / "takeover"
    run.mkdir()
    gate = run / "gate"
    gate.touch()
    command = (f"sh -c 'date +%s.%N >> {run}/starts; while [ -e {gate} ]; do sleep 0.01; done; "
               "cp {model} {output}'")
    cache = run / "cache"
    start = time.time()
    builder = subprocess.Popen(init_argv(model, cache, run / "h0", command), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    starts = run / "starts"
    _until(lambda: starts.exists() and starts.read_text().strip(), 60)  # the shell creates it before `date` writes
    fresh = float(starts.read_text().split()[0]) - start
    waiters = [subprocess.Popen([*init_argv(model, cache, run / f"h{i}", command), "--progress-interval", "1s"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for i in range(1, 5)]
    time.sleep(3.0)  # let the waiters block behind the builder (2 cores: four Python starts)
    killed = time.time()
    os.killpg(builder.pid, signal.SIGKILL)
    builder.wait()
    _until(lambda: len(starts.read_text().split()) >= 2, 60)
    took = float(starts.read_text().split()[1]) - killed
    gate.unlink()
    codes = [w.wait(60) for w in waiters]
    return {"takeover_s": took, "fresh_start_s": fresh, "builds": len(starts.read_text().split()),
            "exit_ok": codes.count(0)}


__all__ = ["TRACER", "enforced", "seed_storm", "takeover", "trace_summary", "trace_table", "traced", "trtwarm_storm"]
