"""trtwarm benchmarks: ratios against baselines measured in the same run. Not timed tests.

``python bench/run.py`` runs all of them, writes ``bench/RESULTS.md`` and replaces the table between the
``<!-- bench -->`` markers in README.md. ``--quick`` uses smaller sizes (for a smoke run).

* hit path: ``trtwarm init`` on a warm cache vs a fresh ``python -c`` that reads and SHA-256-hashes the same
  engine file (the floor). Target: init <= 1.25 x floor + 50 ms.
* storm: N processes on an empty cache with a build of B seconds: builds (must be 1), delay from build end to
  the last process ready (target <= 200 ms at N = 16), waiter wake-up p99.
* key resolution of a 1 GiB model: with the stat cache (target <= 10 ms) vs a full hash.
* lifecycle: ``ls``, ``stats`` and ``gc --dry-run`` on 10,000 entries vs a process that reads every manifest
  (target < 1 s each).
* trust: a hit with the signature verified under ``--trust-mode enforce`` vs the same hit with trust off (target:
  <= 5 ms added), and, in one process, what the check itself costs (importing ``cryptography``, reading the policy,
  one ECDSA verification). ``--only trust`` runs just this one and updates its table in README.md.
* sidecar: ``/metrics`` latency on a volume of 10,000 entries vs ``/healthz`` on the same server (target p99 < 50 ms),
  and the p99 of 200 concurrent scrapes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MiB = 1 << 20


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTWARM_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=_env())
    return time.perf_counter() - start


def _init_argv(model: Path, cache: Path, handoff: Path, command: str) -> list[str]:
    return [sys.executable, "-m", "trtwarm", "init", "--builder", "command", "--builder-version", "bench",
            "--build-command", command, "--device", "cpu", "--model", str(model), "--cache-dir", str(cache),
            "--handoff-dir", str(handoff)]


def _model(work: Path) -> Path:
    from trtwarm.demo import make_model

    model = make_model(work / "model.onnx")
    old = time.time() - 60
    os.utime(model, (old, old))
    time.sleep(2.1)  # past the stat cache's racy window (ctime)
    return model


def bench_hit(work: Path, sizes: list[int], repeat: int = 5) -> list[dict[str, object]]:
    """Hit-path wall time vs the read-and-hash floor, per engine size."""
    model, rows = _model(work), []
    floor_code = ("import hashlib,sys\nh=hashlib.sha256()\nwith open(sys.argv[1],'rb',buffering=0) as f:\n"
                  "    while b:=f.read(4<<20): h.update(b)\nprint(h.hexdigest())")
    for size in sizes:
        blob = work / f"blob-{size}"
        with open(blob, "wb") as handle:
            for _ in range(size // MiB):
                handle.write(os.urandom(MiB))
        cache = work / f"cache-{size}"
        argv = _init_argv(model, cache, work / "h", f"cp {blob} {{output}}")
        subprocess.run(argv, check=True, capture_output=True, env=_env())  # build
        engine = next((cache / "entries").iterdir()) / "engine.plan"
        hit = statistics.median(_timed(argv) for _ in range(repeat))
        floor = statistics.median(_timed([sys.executable, "-c", floor_code, str(engine)]) for _ in range(repeat))
        target = 1.25 * floor + 0.050
        rows.append({"engine": f"{size // MiB} MiB", "init_hit_s": hit, "floor_s": floor, "ratio": hit / floor,
                     "target_s": target, "ok": hit <= target})
        blob.unlink()
    return rows


_TRUST_PROBE = """
import sys, time
from pathlib import Path
start = time.perf_counter()
from trtwarm.trust.policy import Gate
from trtwarm.volume.store import check_entry
entry = check_entry(Path(sys.argv[2]), None, digest=False)
ready, cpu = time.perf_counter(), time.process_time()
Gate.create(Path(sys.argv[1]), "enforce").check(entry)
print(time.perf_counter() - ready, time.process_time() - cpu)
"""


def bench_trust(work: Path, size: int = 10 * MiB, repeat: int = 15) -> dict[str, object]:
    """A hit with signature verification (enforce) vs without; and the in-process cost of the check."""
    model, cache = _model(work), work / "cache"
    blob = work / "blob"
    blob.write_bytes(os.urandom(size))
    subprocess.run([sys.executable, "-m", "trtwarm", "keys", "generate", "--out", str(work / "k")], check=True,
                   capture_output=True, env=_env())
    (work / "policy.json").write_text(json.dumps({"mode": "enforce", "keys": [{"name": "k",
                                                                               "public_key_file": "k.pub"}]}))
    argv = _init_argv(model, cache, work / "h", f"cp {blob} {{output}}")
    subprocess.run([*argv, "--signing-key", str(work / "k.key")], check=True, capture_output=True, env=_env())
    enforce = [*argv, "--trust-policy", str(work / "policy.json"), "--read-only"]
    off, on = [], []
    for _ in range(repeat):  # interleaved, so a change of machine load hits both alike
        off.append(_timed(argv))
        on.append(_timed(enforce))
    entry = next((cache / "entries").iterdir())
    probe = [[float(x) for x in subprocess.run([sys.executable, "-c", _TRUST_PROBE, str(work / "policy.json"),
                                                str(entry)], check=True, capture_output=True, text=True,
                                               env=_env()).stdout.split()] for _ in range(repeat)]
    off_s, on_s = statistics.median(off), statistics.median(on)
    check_s, check_cpu_s = statistics.median(p[0] for p in probe), statistics.median(p[1] for p in probe)
    return {"engine": f"{size // MiB} MiB", "off_s": off_s, "enforce_s": on_s, "added_s": on_s - off_s,
            "ratio": on_s / off_s, "check_s": check_s, "check_cpu_s": check_cpu_s, "ok": on_s - off_s <= 0.005,
            "load": os.getloadavg()[0]}


def render_trust(row: dict) -> str:
    """The trust table (also spliced alone into README.md by ``--only trust``)."""
    return ("| hit with signature check (Ed25519): engine | trust off | `--trust-mode enforce` | added (ratio) "
            "| the check alone, in process: wall / CPU | load average | target 5 ms added |\n"
            "|---|---|---|---|---|---|---|\n"
            f"| {row['engine']} | {row['off_s'] * 1000:.0f} ms | {row['enforce_s'] * 1000:.0f} ms "
            f"| {row['added_s'] * 1000:.1f} ms ({row['ratio']:.2f}) | {row['check_s'] * 1000:.1f} ms / "
            f"{row['check_cpu_s'] * 1000:.1f} ms | {row['load']:.1f} | {'met' if row['ok'] else 'not met'} |\n")


def bench_storm(work: Path, counts: list[int], build_seconds: float) -> list[dict[str, object]]:
    """N concurrent inits on an empty cache; one build of *build_seconds*."""
    model, rows = _model(work), []
    for n in counts:
        cache, marks = work / f"storm-{n}", work / f"marks-{n}"
        marks.mkdir()
        # warm the stat cache with another key, as on any volume that served this model before
        subprocess.run([*_init_argv(model, cache, work / "h-warm", "cp {model} {output}"), "--key-extra", "w=1"],
                       check=True, capture_output=True, env=_env())
        command = (f"sh -c 'echo $$ >> {marks}/builds; sleep {build_seconds}; cp {{model}} {{output}}; "
                   f"python3 -c \"import time; print(time.time())\" > {marks}/build-end'")
        procs = [subprocess.Popen(_init_argv(model, cache, work / f"h-{n}-{i}", command), env=_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]
        codes = [p.wait() for p in procs]
        end = float((marks / "build-end").read_text())
        ready = sorted((work / f"h-{n}-{i}" / "engine.json").stat().st_mtime - end for i in range(n))
        waiters = [r for r in ready if r > 0] or [0.0]
        rows.append({"n": n, "builds": len((marks / "builds").read_text().split()), "exit_ok": codes.count(0),
                     "last_ready_after_build_s": max(ready), "wakeup_p99_s": _p99(waiters)})
    return rows


def _p99(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]


def bench_key(work: Path, size: int, repeat: int = 20) -> dict[str, object]:
    """Key resolution of a model with *size* bytes of external weights: stat cache vs full hash."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from trtwarm.volume.statcache import inspect_model

    weights = numpy_helper.from_array(np.zeros(size // 4, dtype="float32"), "big")
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "big",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1])], [weights])
    model = work / "big" / "big.onnx"
    model.parent.mkdir()
    onnx.save_model(helper.make_model(graph), str(model), save_as_external_data=True, location="big.weights")
    del weights, graph
    time.sleep(2.1)
    start = time.perf_counter()
    inspect_model(model, None)
    full = time.perf_counter() - start
    inspect_model(model, work / "big-stat")  # fills the stat cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        _facts, memo = inspect_model(model, work / "big-stat")
        times.append(time.perf_counter() - start)
        assert memo
    cached = statistics.median(times)
    return {"model": f"{size // MiB} MiB", "full_hash_s": full, "stat_cache_s": cached, "ok": cached <= 0.010}


def fill_volume(cache: Path, n: int, model: Path) -> None:
    """*n* entries cloned from one real build, with last uses spread over 60 days (as a busy volume has)."""
    import hashlib
    import random

    from trtwarm.fsutil import atomic_write_json

    subprocess.run([*_init_argv(model, cache, cache.parent / "h-fill", "cp {model} {output}")], check=True,
                   capture_output=True, env=_env())
    seed = next((cache / "entries").iterdir())
    manifest = json.loads((seed / "manifest.json").read_text())
    engine = (seed / "engine.plan").read_bytes()
    rng = random.Random(0)
    for i in range(n):
        key = hashlib.sha256(str(i).encode()).hexdigest()
        name = f"m{i % 500}_cpu-x86_64_commandbench_model_static--{key[:16]}"
        entry = cache / "entries" / name
        entry.mkdir()
        (entry / "engine.plan").write_bytes(engine)
        atomic_write_json(entry / "manifest.json", {**manifest, "key": key, "name": name}, durable=False)
        (cache / ".uses" / key).touch()
        when = time.time() - rng.uniform(0, 60) * 86400
        os.utime(cache / ".uses" / key, (when, when))


def bench_lifecycle(work: Path, n: int, repeat: int = 3) -> list[dict[str, object]]:
    """``ls``, ``stats``, ``gc --dry-run`` on *n* entries vs a floor: one process reading every manifest."""
    cache = work / "cache"
    fill_volume(cache, n, _model(work))
    floor_code = ("import json,os,sys\nfor e in os.scandir(sys.argv[1]):\n"
                  "    json.load(open(os.path.join(e.path,'manifest.json')))")
    floor = statistics.median(_timed([sys.executable, "-c", floor_code, str(cache / "entries")])
                              for _ in range(repeat))
    rows = []
    for label, args in (("ls", ["ls"]), ("ls --json", ["ls", "--json"]), ("stats", ["stats"]),
                        ("gc --dry-run --max-age 30d --max-bytes 1M", ["gc", "--dry-run", "--max-age", "30d",
                                                                       "--max-bytes", "1M"])):
        argv = [sys.executable, "-m", "trtwarm", *args, "--cache-dir", str(cache)]
        took = statistics.median(_timed(argv) for _ in range(repeat))
        rows.append({"command": label, "n": n, "seconds": took, "floor_s": floor, "ratio": took / floor,
                     "ok": took < 1.0})
    return rows


def _get(url: str) -> float:
    import urllib.request

    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:
        resp.read()
    return time.perf_counter() - start


def bench_scrape(work: Path, n: int, scrapes: int = 200) -> list[dict[str, object]]:
    """``/metrics`` latency on a volume of *n* entries vs ``/healthz`` on the same server; 200 concurrent scrapes."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    cache = work / "cache"
    fill_volume(cache, n, _model(work))
    rows = []
    for label, interval in (("scan every 30 s (default)", "30s"), ("scan every 0.5 s (worst case)", "0.5s")):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "trtwarm", "sidecar", "--cache-dir", str(cache),
                                 "--handoff-dir", str(cache.parent / "h-fill"), "--bind", "127.0.0.1", "--port",
                                 str(port), "--scan-interval", interval], env=_env(), stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    import urllib.request

                    if b"trtwarm_cache_entries" in urllib.request.urlopen(url + "/metrics", timeout=5).read():
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "sidecar did not come up"
                time.sleep(0.2)
            health = [_get(url + "/healthz") for _ in range(scrapes)]
            serial = [_get(url + "/metrics") for _ in range(scrapes)]
            with ThreadPoolExecutor(scrapes) as pool:
                concurrent = list(pool.map(lambda _: _get(url + "/metrics"), range(scrapes)))
        finally:
            proc.terminate()
            proc.wait(10)
        rows.append({"case": label, "n": n, "healthz_p50_s": statistics.median(health),
                     "scrape_p50_s": statistics.median(serial), "scrape_p99_s": _p99(serial),
                     "concurrent_p99_s": _p99(concurrent), "ok": _p99(serial) < 0.050})
    return rows


def render(hit: list[dict], storm: list[dict], key: dict, build_seconds: float,
           lifecycle: list[dict] | None = None, scrape: list[dict] | None = None, trust: dict | None = None) -> str:
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs by `python bench/run.py`.", "",
             "| hit path: engine | `trtwarm init` (hit) | floor: python read + sha256 | ratio | target 1.25x+50ms |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['init_hit_s'] * 1000:.0f} ms | {r['floor_s'] * 1000:.0f} ms | {r['ratio']:.2f} | "
              f"{'met' if r['ok'] else 'MISSED'} ({r['target_s'] * 1000:.0f} ms) |" for r in hit]
    lines += ["", f"| storm: processes (build {build_seconds:.0f} s) | builds | exit 0 | last ready after build end | "
              "waiter wake-up p99 |", "|---|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['builds']} | {r['exit_ok']}/{r['n']} | {r['last_ready_after_build_s'] * 1000:.0f} ms | "
              f"{r['wakeup_p99_s'] * 1000:.0f} ms |" for r in storm]
    lines += ["", "| key resolution: model | full hash | with stat cache | target 10 ms |", "|---|---|---|---|",
              f"| {key['model']} | {key['full_hash_s'] * 1000:.0f} ms | {key['stat_cache_s'] * 1000:.2f} ms | "
              f"{'met' if key['ok'] else 'MISSED'} |"]
    if lifecycle:
        lines += ["", "| lifecycle command | entries | time | floor: read every manifest | ratio | target 1 s |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| `trtwarm {r['command']}` | {r['n']} | {r['seconds'] * 1000:.0f} ms | {r['floor_s'] * 1000:.0f} ms "
                  f"| {r['ratio']:.2f} | {'met' if r['ok'] else 'MISSED'} |" for r in lifecycle]
    if scrape:
        lines += ["", "| sidecar `/metrics`, volume of 10,000 entries | `/healthz` p50 (floor) | scrape p50 | scrape p99 "
                  "| p99 of 200 concurrent scrapes | target p99 50 ms |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['case']} | {r['healthz_p50_s'] * 1000:.1f} ms | {r['scrape_p50_s'] * 1000:.1f} ms | "
                  f"{r['scrape_p99_s'] * 1000:.1f} ms | {r['concurrent_p99_s'] * 1000:.0f} ms | "
                  f"{'met' if r['ok'] else 'MISSED'} |" for r in scrape]
    if trust:
        lines += ["", render_trust(trust).rstrip("\n")]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", choices=["trust"], help="run one benchmark and update its README table")
    args = parser.parse_args()
    if args.only == "trust":
        return _only_trust()
    sizes = [10 * MiB, 100 * MiB] if args.quick else [10 * MiB, 100 * MiB, 1024 * MiB]
    counts = [1, 4] if args.quick else [1, 4, 16, 64]
    build_seconds = 2.0 if args.quick else 8.0
    # as installed from a wheel: bytecode compiled ahead (this matters where PYTHONDONTWRITEBYTECODE is set)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "trtwarm")], check=True)
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-") as tmp:
        work = Path(tmp)
        hit = bench_hit(work / "hit", sizes) if (work / "hit").mkdir() is None else []
        storm = bench_storm(work / "storm", counts, build_seconds) if (work / "storm").mkdir() is None else []
        key = bench_key(work, 100 * MiB if args.quick else 1024 * MiB)
        entries_n = 1000 if args.quick else 10000
        lifecycle = bench_lifecycle(work / "lifecycle", entries_n) if (work / "lifecycle").mkdir() is None else []
        scrape = bench_scrape(work / "scrape", entries_n) if (work / "scrape").mkdir() is None else []
        trust = bench_trust(work / "trust") if (work / "trust").mkdir() is None else {}
    table = render(hit, storm, key, build_seconds, lifecycle, scrape, trust)
    print(table)
    print(json.dumps({"hit": hit, "storm": storm, "key": key, "lifecycle": lifecycle, "scrape": scrape}, indent=1),
          file=sys.stderr)
    if not args.quick:
        (ROOT / "bench" / "RESULTS.md").write_text(table)
        readme = ROOT / "README.md"
        text = readme.read_text()
        new = re.sub(r"(<!-- bench -->\n).*?(<!-- /bench -->)", lambda m: m[1] + table + m[2], text, flags=re.S)
        readme.write_text(new)
    return 0


def _only_trust() -> int:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "trtwarm")], check=True)
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-") as tmp:
        row = bench_trust(Path(tmp))
    table = render_trust(row)
    print(table)
    readme = ROOT / "README.md"
    text = readme.read_text()
    pattern = r"\| hit with signature check.*?\n(?=\n|<!-- /bench -->)"
    if re.search(pattern, text, flags=re.S):
        text = re.sub(pattern, lambda m: table, text, flags=re.S)
    else:
        text = text.replace("<!-- /bench -->", "\n" + table + "<!-- /bench -->")
    readme.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
