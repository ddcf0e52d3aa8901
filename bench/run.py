"""trtwarm benchmarks: ONE table, every row a ratio against a baseline measured beside it in the same run.

``python bench/run.py`` writes ``bench/RESULTS.md`` and replaces the table between the ``<!-- bench -->`` markers in
docs/benchmarks.md. Not timed tests: targets are reported, never asserted. ``--only NAME`` runs one benchmark and
rewrites its rows or block (``bench/blocks.py``); ``--no-write`` prints only; ``--quick`` runs every row and every
block once at small sizes and writes nothing (CI's smoke, ``.ci/run``).

* hit: ``trtwarm init`` on a warm cache, 10 MiB, 1 GiB and 8 GiB engines (the large ones sparse, with a random
  first MiB: no multi-GiB download or write), under ``--verify digest`` (vs a Python read + SHA-256 of the same
  file: target 1.15x) and ``--verify stamp`` (vs the 10 MiB stamp hit: target 1.5x; the 10 MiB one vs
  ``python -c pass``: target 2.5x). ``--skip-8g-digest`` leaves out the slowest row (six 8 GiB hashes).
* storm: N = 16, 64 and 128 inits of one key vs the seed's ``flock -n || while [ ! -f ]; sleep 1`` protocol with the
  same build (see ``bench/storm.py``): builds, last ready after publish (target 0.1x the seed's median), torn reads;
  ``--only storm`` also traces each init (where the time after the publish goes).
* large engines (``bench/bigfiles.py``): the check and the copy of a 1 GiB engine by ``trtwarm.fs.chunked`` against
  SHA-256 over every core and ``cp`` (targets 1.4x and 1.5x), as primitives and as whole inits.
* crash takeover: SIGKILL of a builder with four waiters: until a waiter's build starts, vs a fresh init's start.
* trust: a hit with the signature verified under ``--trust-mode enforce`` vs the same hit with trust off (target:
  <= 5 ms added), and in one process what the check costs after hashing, with and without init's background
  import of the verifier (``bench/trust.py``). ``--only trust`` runs just
  this one and replaces its row in docs/benchmarks.md.
* key resolution of a 1 GiB model with the stat cache vs a full hash; ``ls``, ``ls --json``, ``stats``,
  ``gc --dry-run`` on 10,000 entries vs reading every manifest; ``/metrics`` p99 vs ``/healthz`` on one sidecar.
* images (``bench/images.py``, its own README block; nothing measured, with the reason, where podman cannot run):
  image sizes vs the base, ``podman run`` to ``/healthz`` 200 vs a host process, a hit in a container vs on the host.
  ``--only images`` runs just these; ``--no-images`` skips them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
MiB = 1 << 20


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTWARM_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)  # keep carried deps
    return env


def _timed(argv: list[str], remove: Path | None = None, pattern: str = "") -> float:
    """Seconds *argv* took; *remove* (a file, or with *pattern* the files of that directory it matches) is deleted
    first, untimed."""
    for path in ([] if remove is None else remove.glob(pattern) if pattern else [remove]):
        path.unlink(missing_ok=True)
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=_env())
    return time.perf_counter() - start


def _init_argv(model: Path, cache: Path, handoff: Path, command: str) -> list[str]:
    return [sys.executable, "-m", "trtwarm", "init", "--builder", "command", "--builder-version", "bench",
            "--build-command", command, "--device", "cpu", "--model", str(model), "--cache-dir", str(cache),
            "--handoff-dir", str(handoff)]


def _model(work: Path) -> Path:
    from trtwarm.cli.demo import make_model

    model = make_model(work / "model.onnx")
    old = time.time() - 60
    os.utime(model, (old, old))
    time.sleep(2.1)  # past the stat cache's racy window (ctime)
    return model


FLOOR_HASH = ("import hashlib,sys\nh=hashlib.sha256()\nb=bytearray(16<<20)\nv=memoryview(b)\n"
              "with open(sys.argv[1],'rb',buffering=0) as f:\n    while n:=f.readinto(b): h.update(v[:n])\n"
              "print(h.hexdigest())")


def _engine_source(work: Path, size: int) -> Path:
    """A *size*-byte engine: random when small; else sparse with a random first MiB (no multi-GiB write)."""
    blob = work / f"blob-{size}"
    with open(blob, "wb") as handle:
        handle.write(os.urandom(min(size, 10 * MiB)))
        handle.truncate(size)
    return blob


def _prepare_hit(work: Path, model: Path, size: int) -> tuple[list[str], Path]:
    """Build an entry of *size* bytes and stamp it; return the init argv and the engine."""
    blob, cache, handoff = _engine_source(work, size), work / f"cache-{size}", work / f"h-{size}"
    argv = _init_argv(model, cache, handoff, f"cp --sparse=always {blob} {{output}}")
    subprocess.run(argv, check=True, capture_output=True, env=_env())  # the build
    blob.unlink()
    time.sleep(2.1)  # past the racy window: a file changed within 2 s of its hash is not stamped
    first = subprocess.run([*argv, "--verify", "stamp"], check=True, capture_output=True, text=True, env=_env())
    assert "1 hashed" in first.stderr, first.stderr  # the first stamped hit hashes and stamps
    time.sleep(2.1)  # the hit record is not written while a file it rests on is in its racy window (the stamps)
    second = subprocess.run([*argv, "--verify", "stamp"], check=True, capture_output=True, text=True, env=_env())
    assert "0 hashed" in second.stderr and "repeating" not in second.stderr, second.stderr  # resolves; records
    return argv, next((cache / "entries").iterdir()) / "engine.plan"


#: context for the small-hit row: a process that only imports the standard modules a hit needs, and exits
STDLIB_FLOOR = "import argparse, dataclasses, hashlib, json, logging, pathlib"


def bench_hit(work: Path, sizes: list[int], repeat: int = 7, skip_digest: tuple[int, ...] = ()) -> dict[str, object]:
    """Hit wall time per engine size under digest (vs read + hash) and stamp, and the ``python -c pass`` floor.

    Rounds interleave the sizes and the floors, so a noisy neighbour slows a row and its baseline alike.
    """
    model = _model(work)
    prepared = {size: _prepare_hit(work, model, size) for size in sizes}
    times: dict[str, list[float]] = {}
    for _ in range(repeat):
        times.setdefault("floor", []).append(_timed([sys.executable, "-c", "pass"]))
        times.setdefault("stdlib", []).append(_timed([sys.executable, "-c", STDLIB_FLOOR]))
        for size, (argv, _engine) in prepared.items():
            times.setdefault(f"stamp-{size}", []).append(_timed([*argv, "--verify", "stamp"]))
        small = prepared[sizes[0]][0]  # the same hit resolving in full: its hit record removed first
        times.setdefault("resolve", []).append(_timed([*small, "--verify", "stamp"],
                                                      Path(small[small.index("--handoff-dir") + 1]) / "stamps",
                                                      "hit-*.json"))
    for size, (argv, engine) in prepared.items():
        if size in skip_digest:
            continue
        for _ in range(3 if size > 2 << 30 else repeat):  # 8 GiB: ~6 s a hash here; three pairs, one was too noisy
            times.setdefault(f"digest-{size}", []).append(_timed(argv))
            times.setdefault(f"hash-{size}", []).append(_timed([sys.executable, "-c", FLOOR_HASH, str(engine)]))
    last = subprocess.run([*prepared[sizes[-1]][0], "--verify", "stamp"], check=True, capture_output=True, text=True,
                          env=_env())
    assert "1 file(s) by stamp, 0 hashed" in last.stderr and "repeating" in last.stderr, last.stderr
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = [{"bytes": size, "stamp_s": med[f"stamp-{size}"],
             **({"digest_s": med[f"digest-{size}"], "hash_floor_s": med[f"hash-{size}"]}
                if f"digest-{size}" in med else {})} for size in sizes]
    return {"floor_s": med["floor"], "stdlib_floor_s": med["stdlib"], "resolve_s": med["resolve"], "sizes": rows}


def bench_storm(work: Path, counts: list[int], build_seconds: float = 3.0, trace: bool = False,
                enforce: bool = False) -> list[dict[str, object]]:
    """Per N: the seed protocol, then trtwarm, with the same build (at least *build_seconds*; it also waits until
    every process is waiting, see bench/storm.py). *enforce*: under a trust policy, one signing builder and N - 1
    consumers (``bench.storm.enforced``)."""
    from bench.storm import enforced, seed_storm, trtwarm_storm

    model, rows = _model(work), []
    argv = enforced(work, _init_argv, _env()) if enforce else _init_argv
    for n in counts:
        seed = seed_storm(work, n, build_seconds)
        ours = trtwarm_storm(work, n, build_seconds, argv, _env(), model, trace=trace)
        rows.append({"n": n, "build_seconds": build_seconds, "seed": seed, "trtwarm": ours})
    return rows


def bench_takeover(work: Path) -> dict[str, object]:
    """SIGKILL of a builder: until a waiter's build starts, vs a fresh init's start to its build."""
    from bench.storm import takeover

    return takeover(work, _init_argv, _env(), _model(work))


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
    import copy
    import random

    from trtwarm.fs.ops import atomic_write_json
    from trtwarm.key import key_of

    subprocess.run([*_init_argv(model, cache, cache.parent / "h-fill", "cp {model} {output}")], check=True,
                   capture_output=True, env=_env())
    seed = next((cache / "entries").iterdir())
    manifest = json.loads((seed / "manifest.json").read_text())
    engine = (seed / "engine.plan").read_bytes()
    rng = random.Random(0)
    for i in range(n):
        # each entry its own configuration: a key document that hashes to its key, as every reader checks
        doc = copy.deepcopy(manifest["key_document"])
        doc["build"]["extra"] = {"bench": str(i)}
        key = key_of(doc)
        name = f"m{i % 500}_cpu-x86_64_commandbench_model_static--{key[:16]}"
        entry = cache / "entries" / name
        entry.mkdir()
        (entry / "engine.plan").write_bytes(engine)
        atomic_write_json(entry / "manifest.json", {**manifest, "key": key, "name": name, "key_document": doc},
                          durable=False)
        (cache / ".uses" / key).touch()
        when = time.time() - rng.uniform(0, 60) * 86400
        os.utime(cache / ".uses" / key, (when, when))


def bench_lifecycle(work: Path, n: int, repeat: int = 3) -> list[dict[str, object]]:
    """``ls``, ``stats``, ``gc --dry-run`` on *n* entries vs a floor: one process reading every manifest.

    ``ls`` keeps a manifest index on the volume (``.manifest-index.json``): the first row is ``ls --json`` without
    one (each run deletes it, so each reads every manifest and writes it); the later rows find the one it left, as
    every ``ls`` after the first does. Entries changed within 2 s get no row, so the fill is left to age first.
    """
    cache = work / "cache"
    fill_volume(cache, n, _model(work))
    filled = time.time()
    floor_code = ("import json,os,sys\nfor e in os.scandir(sys.argv[1]):\n"
                  "    json.load(open(os.path.join(e.path,'manifest.json')))")
    floor = statistics.median(_timed([sys.executable, "-c", floor_code, str(cache / "entries")])
                              for _ in range(repeat))
    time.sleep(max(0.0, filled + 2.1 - time.time()))
    index = cache / ".manifest-index.json"
    rows = []
    for label, args, cold in (("ls --json, no manifest index yet", ["ls", "--json"], True),
                              ("ls", ["ls"], False), ("ls --json", ["ls", "--json"], False),
                              ("stats", ["stats"], False),
                              ("gc --dry-run --max-age 30d --max-bytes 1M", ["gc", "--dry-run", "--max-age", "30d",
                                                                             "--max-bytes", "1M"], False)):
        argv = [sys.executable, "-m", "trtwarm", *args, "--cache-dir", str(cache)]
        took = statistics.median(_timed(argv, remove=index if cold else None) for _ in range(repeat))
        target = None if cold else 0.5 if label == "ls --json" else 1.0
        rows.append({"command": label, "n": n, "seconds": took, "floor_s": floor, "ratio": took / floor,
                     "target_s": target, "ok": None if target is None else took <= target})
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
    for label, interval in (("scan every 30 s (default)", "30s"),):
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


def _work_dir(need: int) -> Path:
    """A scratch directory on a filesystem with *need* bytes free (sparse engines need far less; cp may not)."""
    for base in (Path(tempfile.gettempdir()), ROOT / "bench"):
        if shutil.disk_usage(base).free > need:
            return base
    raise SystemExit(f"bench: no filesystem with {need >> 30} GiB free for the large-engine rows")


class Profile(NamedTuple):
    """How much each row measures: the full run, or ``--quick`` (every row once, small sizes: a smoke for CI)."""

    sizes: list[int]  # hit rows' engines
    counts: list[int]  # storm sizes
    build_seconds: float  # the storm's build (at least; it also waits until every process waits)
    entries: int  # lifecycle and scrape volumes
    repeat: int  # hit and lifecycle rounds
    trust_repeat: int
    scrapes: int
    key_bytes: int  # the model of the key-resolution row
    big_bytes: int  # bench/bigfiles.py's engine
    big_rounds: int
    remote_mib: int  # the remote, OCI and hand-off copy blocks (--only, or smoked by --quick)


FULL = Profile([10 * MiB, 1 << 30, 8 << 30], [16, 64, 128], 3.0, 10000, 7, 30, 200, 1 << 30, 1 << 30, 5, 1024)
QUICK = Profile([10 * MiB, 32 * MiB], [4, 8], 1.0, 200, 1, 1, 20, 16 * MiB, 32 * MiB, 1, 32)


def main() -> int:
    from bench.blocks import ONLY  # here: the blocks import this module's helpers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="every row once at small sizes, and every other bench's block, nothing written (CI)")
    parser.add_argument("--skip-8g-digest", action="store_true", help="leave out the 8 GiB digest row (slow)")
    parser.add_argument("--only", choices=list(ONLY),
                        help="run one benchmark and replace its rows in docs/benchmarks.md")
    parser.add_argument("--no-images", action="store_true", help="skip the image rows (bench/images.py)")
    parser.add_argument("--no-write", action="store_true", help="print the tables only (another machine's figures)")
    args = parser.parse_args()
    profile = QUICK if args.quick else FULL
    if args.only:
        return ONLY[args.only](profile, not (args.quick or args.no_write))
    # as installed from a wheel: bytecode compiled ahead (this matters where PYTHONDONTWRITEBYTECODE is set)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "trtwarm")], check=True)
    table = _main_table(profile, skip_8g=args.skip_8g_digest)
    print(table)
    if not (args.quick or args.no_write):
        (ROOT / "bench" / "RESULTS.md").write_text(table)
        replace_block("bench", table)
    if not args.no_images:  # podman builds both images; measures nothing (and says why) where podman cannot run
        with took("images"):
            ONLY["images"](profile, not (args.quick or args.no_write))
    if args.quick:  # the blocks a full run leaves to --only: smoked too, so none of them can rot unseen
        for name in ("remote", "init-vs-curl", "oci", "handoff-copy", "bigfiles", "storm"):
            with took(name):
                ONLY[name](profile, False)
    return 0


@contextlib.contextmanager
def took(part: str) -> Iterator[None]:
    """Say on stderr how long *part* of the run took (where a slow CI smoke spends its minutes)."""
    start = time.perf_counter()
    yield
    print(f"bench: {part} took {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def _main_table(profile: Profile, *, skip_8g: bool) -> str:
    """The one table's rows, measured in a scratch directory; the raw figures go to stderr."""
    from bench.bigfiles import bench_primitives, init_rows
    from bench.table import render

    sizes = profile.sizes
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-", dir=_work_dir(3 * max(sizes))) as tmp:
        work = Path(tmp)
        for sub in ("hit", "storm", "takeover", "lifecycle", "scrape", "bigfiles", "bigfiles-init"):
            (work / sub).mkdir()
        # the rows that move gigabytes last: this VM hands freed memory back to its host, and the next process to
        # touch that much memory pays for it again (README, Reading the results), which would tax the small rows
        with took("storm"):
            storm = bench_storm(work / "storm", profile.counts, profile.build_seconds)
        with took("takeover"):
            takeover = bench_takeover(work / "takeover")
        with took("lifecycle"):
            lifecycle = bench_lifecycle(work / "lifecycle", profile.entries, repeat=min(3, profile.repeat))
        with took("scrape"):
            scrape = bench_scrape(work / "scrape", profile.entries, scrapes=profile.scrapes)
        with took("trust"):
            trust = _trust(work / "trust", profile.trust_repeat)
        with took("hit"):
            hit = bench_hit(work / "hit", sizes, repeat=profile.repeat, skip_digest=(8 << 30,) if skip_8g else ())
        with took("bigfiles"):
            big = {"primitives": bench_primitives(work / "bigfiles", profile.big_bytes, profile.big_rounds),
                   "init": init_rows(work / "bigfiles-init", profile.big_bytes, profile.big_rounds, _init_argv,
                                     _env(), _model(work / "bigfiles-init"))}
        with took("key"):
            key = bench_key(work, profile.key_bytes)
    print(json.dumps({"hit": hit, "storm": storm, "takeover": takeover, "key": key, "lifecycle": lifecycle,
                      "scrape": scrape, "trust": trust, "big": big}, indent=1), file=sys.stderr)
    return render(hit, storm, takeover, key, lifecycle, scrape, trust, big)


def replace_block(marker: str, text: str) -> None:
    """Replace what stands between ``<!-- marker -->`` and ``<!-- /marker -->`` in docs/benchmarks.md."""
    readme = ROOT / "docs" / "benchmarks.md"
    old = readme.read_text()
    new = re.sub(rf"(<!-- {marker} -->\n).*?(<!-- /{marker} -->)", lambda m: m[1] + text + m[2], old, flags=re.S)
    if new == old and f"<!-- {marker} -->" not in old:
        raise SystemExit(f"bench: docs/benchmarks.md has no <!-- {marker} --> block")
    readme.write_text(new)


def _trust(work: Path, repeat: int = 30) -> dict[str, object]:
    from bench.trust import bench_trust

    work.mkdir(exist_ok=True)
    return bench_trust(work, _init_argv, _env(), _timed, _model(work), repeat=repeat)


if __name__ == "__main__":
    sys.exit(main())
