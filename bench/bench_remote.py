"""Remote repository benchmarks (``python bench/run.py --only remote``; ``python bench/bench_remote.py [MiB]``
alone): a real SeaweedFS on loopback.

* pull of a 1 GiB engine blob (trtwarm's parallel ranged GETs, verified by chunk digests as the workers write,
  the manifest's 16 MiB chunks) vs ``curl`` of the same object (a presigned URL) to a file in the same run.
  Target: throughput >= 0.8 x curl's.
* peak RSS of the process doing that pull (target <= 300 MB), measured by the pulling process itself.
* verification overhead: the same pull without SHA-256 beside it; 1 - bare / verified wall time (<= 10 %). Beside
  it, the CPU floor: SHA-256's own CPU over the blob spread over every core, the least a pull whose cores are all
  busy (the store shares them here) can add; and the same pull of a manifest without chunk digests (an entry
  published before them: one whole-file SHA-256 in order), for comparison. Hash seconds (summed over the threads
  that hash) and the tail (hashing after the last byte landed) of both.
* end to end: ``trtwarm init`` on an empty volume that pulls the engine (result ``pulled``), for the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
MiB = 1 << 20

_PULL = """
import json, resource, sys, time
from pathlib import Path
from trtwarm.remote.client import Client
from trtwarm.remote.pull import pull_into
from trtwarm.remote.repo import Repository
from trtwarm.remote.url import parse
import os
remote = parse(sys.argv[1], os.environ)
repo = Repository(Client(remote))
manifest = json.loads(sys.argv[2])
stats = pull_into(repo, manifest, Path(sys.argv[3]), chunk=remote.chunk, window=remote.concurrency,
                  verify=sys.argv[4] == "verify")
usage = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking parent (the bench, ~130 MB after its upload)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": stats.seconds, "hash_seconds": stats.hash_seconds, "bytes": stats.bytes,
                  "tail_seconds": stats.tail_seconds,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mb": hwm / 1024}))
"""


def _env(server: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTWARM_") or k.startswith("TRTWARM_REMOTE_")}
    env.update(server.env())  # type: ignore[attr-defined]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # carried deps
    return env


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) the process *pid* has used so far (the server: what it spends per run)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_run(argv: list[str], server_pid: int, **kwargs: object) -> tuple[float, float, float, str]:
    """Run *argv*: its wall seconds, its CPU seconds, the server's CPU seconds meanwhile, and its stdout."""
    cpu0, server0, start = os.times(), _cpu_of(server_pid), time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         **kwargs).stdout  # type: ignore[call-overload]
    wall, cpu1 = time.perf_counter() - start, os.times()
    cpu = cpu1.children_user - cpu0.children_user + cpu1.children_system - cpu0.children_system
    return wall, cpu, _cpu_of(server_pid) - server0, out


def _blob(work: Path, size: int) -> tuple[Path, dict[str, object]]:
    """A random *size* blob and its manifest row, with chunk digests as the publish writes them."""
    from trtwarm.fs.chunked import hash_fd
    from trtwarm.volume.chunks import CHUNK_BYTES, chunk_fields

    path = work / "engine.bin"
    with open(path, "w+b") as handle:
        for _ in range(size // MiB):
            handle.write(os.urandom(MiB))
        handle.flush()
        sha, _, chunks = hash_fd(handle.fileno(), CHUNK_BYTES)
    return path, {"path": "engine.plan", "role": "engine", "bytes": size, "sha256": sha, **chunk_fields(size, chunks)}


def _signer(server: object, prefix: str) -> object:
    """An obstore S3Store straight to *server* (a SeaweedServer), only to presign curl's URL: trtwarm's own client
    reaches the store through its transport's gate, whose URLs are not for others."""
    from obstore.store import S3Store

    from s3server import WRITER

    return S3Store("engines", prefix=prefix, config={"aws_endpoint": server.endpoint,  # type: ignore[attr-defined]
                                                     "aws_access_key_id": WRITER[0],
                                                     "aws_secret_access_key": WRITER[1], "aws_region": "us-east-1"},
                   client_options={"allow_http": True})


def bench_remote(work: Path, size: int = 1024 * MiB, repeat: int = 5) -> dict[str, object]:
    """Pull vs curl of one *size* blob; RSS and hashing share of the pull; an end-to-end pulled init."""
    import datetime

    import obstore

    from s3server import SeaweedServer
    from trtwarm.remote.client import Client
    from trtwarm.remote.repo import blob_path
    from trtwarm.remote.url import parse

    server = SeaweedServer(work / "weed")
    (work / "weed").mkdir(parents=True)
    server.start()
    try:
        env = _env(server)
        remote = parse("s3://engines/bench", env)
        client = Client(remote)
        blob, row = _blob(work, size)
        sha = str(row["sha256"])
        client.put_file(blob_path(sha), blob, remote.chunk, 4)
        blob.unlink()
        chunked = {"files": [row]}
        whole = {"files": [{k: v for k, v in row.items() if not k.startswith("chunk_")}]}
        url = obstore.sign(_signer(server, "bench"), "GET", blob_path(sha), datetime.timedelta(minutes=30))
        pulls, wholes, bare, curls = [], [], [], []
        for i in range(repeat):  # interleaved, so a noisy neighbour hits all four alike
            for name, manifest, mode, into in (("chunks", chunked, "verify", pulls), ("whole", whole, "verify", wholes),
                                               ("bare", chunked, "bare", bare)):
                out = work / f"pull-{name}{i}"
                out.mkdir()
                _, _, server_cpu, text = _timed_run([sys.executable, "-c", _PULL, remote.url, json.dumps(manifest),
                                                     str(out), mode], server.proc.pid, env=env)
                into.append({**json.loads(text), "server_cpu_s": server_cpu})
                (out / "engine.plan").unlink()
            wall, cpu, server_cpu, _ = _timed_run(["curl", "-sSf", "-o", str(work / "curl.bin"), url], server.proc.pid)
            curls.append({"seconds": wall, "cpu_s": cpu, "server_cpu_s": server_cpu})
            (work / "curl.bin").unlink()
        best, curl = min(pulls, key=lambda p: p["seconds"]), min(curls, key=lambda p: p["seconds"])
        bare_best, whole_best = min(bare, key=lambda p: p["seconds"]), min(wholes, key=lambda p: p["seconds"])
        return {"verify_floor": _hash_cpu(size) / (os.cpu_count() or 1) / best["seconds"], "size_mib": size // MiB,
                "pull_s": best["seconds"], "curl_s": curl["seconds"],
                "ratio": curl["seconds"] / best["seconds"], "max_rss_mb": max(p["max_rss_mb"] for p in pulls),
                "bare_pull_s": bare_best["seconds"], "verify_overhead": 1 - bare_best["seconds"] / best["seconds"],
                "tail_s": best["tail_seconds"], "hash_s": best["hash_seconds"],
                "whole_pull_s": whole_best["seconds"], "whole_tail_s": whole_best["tail_seconds"],
                "whole_hash_s": whole_best["hash_seconds"],
                "whole_overhead": 1 - bare_best["seconds"] / whole_best["seconds"],
                "cpu": {"pull": (best["cpu_s"], best["server_cpu_s"]),
                        "whole-file pull": (whole_best["cpu_s"], whole_best["server_cpu_s"]),
                        "bare": (bare_best["cpu_s"], bare_best["server_cpu_s"]),
                        "curl": (curl["cpu_s"], curl["server_cpu_s"])},
                "cpus": os.cpu_count(), "load": os.getloadavg()[0],
                "init_pulled_s": _init_pull(work, env, sha, size, remote)}
    finally:
        server.stop()


def _hash_cpu(size: int) -> float:
    """CPU seconds SHA-256 takes over *size* bytes here. Where the cores are all busy (the store shares them in this
    bench) that CPU spread over every core is the least overhead verification can add to a pull."""
    import hashlib

    piece, digest, start = os.urandom(MiB), hashlib.sha256(), time.process_time()
    for _ in range(size // MiB):
        digest.update(piece)
    return time.process_time() - start


def _init_pull(work: Path, env: dict[str, str], sha: str, size: int, remote: object) -> float:
    """``trtwarm init`` on an empty volume pulling a *size* engine that a first init built and pushed."""
    from trtwarm.cli.demo import make_model

    model = make_model(work / "model.onnx")
    engine = work / "engine-src.bin"
    subprocess.run(["head", "-c", str(size), "/dev/urandom"], stdout=open(engine, "wb"), check=True)

    def init(cache: str) -> float:
        argv = [sys.executable, "-m", "trtwarm", "init", "--builder", "command", "--builder-version", "bench",
                "--build-command", f"cp {engine} {{output}}", "--device", "cpu", "--model", str(model),
                "--cache-dir", str(work / cache), "--handoff-dir", str(work / f"h-{cache}"),
                "--remote", "s3://engines/bench-init"]
        start = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
        assert json.loads(out.splitlines()[-1])["result"] in ("built", "pulled"), out
        return time.perf_counter() - start

    init("first")
    return init("second")


IDLE = 3.0


def _init_curl_pairs(work: Path, base: list[str], env: dict[str, str], url: str, sha: str, repeat: int,
                     idle: float = IDLE) -> dict[str, list[float]]:
    """*repeat* rounds of a pull-only init (*base* argv), ``curl`` + ``sync`` of *url*, and the verified download
    ``curl | tee FILE | sha256sum`` + ``sync`` (its digest compared with *sha*, untimed): their seconds."""
    times: dict[str, list[float]] = {"init": [], "curl": [], "verified": []}

    def init(i: int) -> None:
        argv = [*base, "--read-only", "--cache-dir", str(work / f"c{i}"), "--handoff-dir", str(work / f"h{i}")]
        start = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
        times["init"].append(time.perf_counter() - start)
        assert json.loads(out.splitlines()[-1])["result"] == "pulled", out
        subprocess.run(["rm", "-rf", str(work / f"c{i}")], check=True)

    def curl(_: int) -> None:
        target = work / "curl.bin"
        start = time.perf_counter()
        subprocess.run(["curl", "-sSf", "-o", str(target), url], check=True)
        subprocess.run(["sync", str(target)], check=True)
        times["curl"].append(time.perf_counter() - start)
        target.unlink()

    def verified(_: int) -> None:
        target = work / "verified.bin"
        start = time.perf_counter()
        out = subprocess.run(["bash", "-o", "pipefail", "-c", 'curl -sSf "$1" | tee "$2" | sha256sum && sync "$2"',
                              "verified", url, str(target)], check=True, capture_output=True, text=True).stdout
        times["verified"].append(time.perf_counter() - start)
        assert out.split()[0] == sha, f"the verified download's digest {out.split()[0]} is not the blob's {sha}"
        target.unlink()

    for i in range(repeat):
        sides = [init, curl, verified]
        for side in sides[i % 3:] + sides[:i % 3]:  # each side first in turn
            # The same idle time before each side, the first of a round too: a VM that hands freed memory back
            # to its host (free page reporting, 2 s after the free) faults it in again on the next write, so
            # a side that writes right after the other's files were removed would be spared that cost.
            time.sleep(idle)
            side(i)
    return times


def bench_init_vs_curl(work: Path, size: int = 1024 * MiB, repeat: int = 4, idle: float = IDLE) -> dict[str, object]:
    """A whole pull-only ``trtwarm init`` on an empty volume (process start to exit: the key, the lock, the pull,
    the verified publish with its fsyncs, the hand-off) vs ``curl`` of the same blob to a file and ``sync FILE``
    (its fsync: durability is part of the job), and vs the verified download (``curl | tee FILE | sha256sum`` and
    ``sync FILE``: what a user checking the blob would run), in rounds (each side first in turn), each side after
    *idle* seconds, best of *repeat* each."""
    import datetime

    import obstore

    from s3server import SeaweedServer
    from trtwarm.cli.demo import make_model

    (work / "weed").mkdir(parents=True)
    server = SeaweedServer(work / "weed").start()
    try:
        env = _env(server)
        model = make_model(work / "model.onnx")
        engine = work / "engine-src.bin"
        subprocess.run(["head", "-c", str(size), "/dev/urandom"], stdout=open(engine, "wb"), check=True)
        base = [sys.executable, "-m", "trtwarm", "init", "--builder", "command", "--builder-version", "bench",
                "--build-command", f"cp {engine} {{output}}", "--device", "cpu", "--model", str(model),
                "--remote", "s3://engines/bench-vs-curl"]
        subprocess.run([*base, "--cache-dir", str(work / "first"), "--handoff-dir", str(work / "h-first")],
                       capture_output=True, env=env, check=True)
        doc = json.loads((work / "h-first" / "engine.json").read_text())
        sha = json.loads(Path(doc["path"]).parent.joinpath("manifest.json").read_text())["engine_sha256"]
        url = obstore.sign(_signer(server, "bench-vs-curl"), "GET", f"blobs/sha256/{sha}",
                           datetime.timedelta(minutes=30))
        best = {side: min(values) for side, values in _init_curl_pairs(work, base, env, url, sha, repeat, idle).items()}
        return {"size_mib": size // MiB, "init_s": best["init"], "curl_sync_s": best["curl"],
                "verified_s": best["verified"], "ratio": best["curl"] / best["init"],
                "verified_ratio": best["verified"] / best["init"], "repeat": repeat, "idle_s": idle,
                "cpus": len(os.sched_getaffinity(0)), "load": os.getloadavg()[0],
                # the CPU verification needs that curl does not spend: SHA-256 of the blob, on one core
                "sha256_cpu_s": _hash_cpu(size)}
    finally:
        server.stop()


def render_init_vs_curl(row: dict[str, object], command: str) -> str:
    """The table of a whole pulling init against the two downloads."""
    return "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {os.uname().nodename}, {row['cpus']} CPUs, by `{command}` "
        f"(best of {row['repeat']} rounds, each side after {row['idle_s']:.0f} s idle, in turn first; load "
        f"{row['load']:.1f} at the end; SHA-256 of the blob alone: {row['sha256_cpu_s']:.2f} CPU-s).", "",
        "| engine | whole `trtwarm init --read-only` (pulled) | `curl` + `sync FILE` | ratio (target >= 0.9) | "
        "verified download: `curl \\| tee FILE \\| sha256sum` + `sync FILE` | ratio (target >= 0.9) |",
        "|---|---|---|---|---|---|",
        f"| {row['size_mib']} MiB | {row['init_s']:.2f} s | {row['curl_sync_s']:.2f} s | {row['ratio']:.2f} "
        f"({'met' if row['ratio'] >= 0.9 else 'MISSED'}) | {row['verified_s']:.2f} s | {row['verified_ratio']:.2f} "
        f"({'met' if row['verified_ratio'] >= 0.9 else 'MISSED'}) |", ""])


def render(row: dict[str, object]) -> str:
    """The README table."""
    return "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs by `python bench/run.py --only remote` "
        "(SeaweedFS `weed mini` on loopback).", "",
        "| remote pull of a 1 GiB engine | trtwarm pull (4 ranged GETs in flight, chunk SHA-256s in the workers) | "
        "floor: `curl` to a file | throughput vs curl (target >= 0.8) | peak RSS (target <= 300 MB) | "
        "the same pull without SHA-256 | verification overhead (target <= 10 %) | "
        "`trtwarm init` on an empty volume (`pulled`) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {row['size_mib']} MiB | {row['pull_s']:.2f} s | {row['curl_s']:.2f} s | {row['ratio']:.2f} "
        f"({'met' if row['ratio'] >= 0.8 else 'MISSED'}) | {row['max_rss_mb']:.0f} MB "
        f"({'met' if row['max_rss_mb'] <= 300 else 'MISSED'}) | {row['bare_pull_s']:.2f} s | "
        f"{100 * row['verify_overhead']:.1f} % ({'met' if row['verify_overhead'] <= 0.10 else 'MISSED'}; "
        f"CPU floor here {100 * row['verify_floor']:.0f} %; hashing after the last byte: {row['tail_s']:.2f} s) | "
        f"{row['init_pulled_s']:.2f} s |", "",
        f"The same blob with a manifest without chunk digests (one whole-file SHA-256, in order, by one thread): "
        f"{row['whole_pull_s']:.2f} s, overhead {100 * row['whole_overhead']:.1f} %, hashing after the last byte "
        f"{row['whole_tail_s']:.2f} s. Hash seconds (summed over the threads that hash): {row['hash_s']:.2f} s by "
        f"chunk, {row['whole_hash_s']:.2f} s whole.", "",
        "CPU seconds of the fastest run of each (client + server, on {cpus} cores; load average {load:.1f} at the "
        "end):\n{cells}. Wall time cannot fall below the sum divided by the cores.".format(
            cpus=row["cpus"], load=row["load"], cells="; ".join(
                f"{name} {c:.2f} + {s:.2f} = {c + s:.2f} s" for name, (c, s) in row["cpu"].items())), ""])


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):  # the docstring is the usage; nothing is built or measured
        print(__doc__)
        sys.exit(0)
    if sys.argv[1:2] == ["--init-vs-curl"]:  # python bench/bench_remote.py --init-vs-curl [MiB [ROUNDS [IDLE_S]]]
        with tempfile.TemporaryDirectory(prefix="trtwarm-bench-remote-") as tmp:
            size_arg = int(sys.argv[2]) * MiB if len(sys.argv) > 2 else 1024 * MiB
            result = bench_init_vs_curl(Path(tmp), size_arg, *(int(sys.argv[3]),) if len(sys.argv) > 3 else (),
                                        *(float(sys.argv[4]),) if len(sys.argv) > 4 else ())
        print(render_init_vs_curl(result, " ".join(["python bench/bench_remote.py", *sys.argv[1:]])))
        print(json.dumps(result), file=sys.stderr)
        sys.exit(0)
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-remote-") as tmp:
        result = bench_remote(Path(tmp), int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 1024 * MiB)
    print(render(result))
    print(json.dumps(result), file=sys.stderr)
