"""OCI registry pull benchmark (``python bench/bench_oci.py [MiB] [rounds]``): a real CNCF Distribution registry on
loopback (Debian's ``docker-registry``, tests/registry.py).

A 1 GiB random blob is pushed through trtwarm's registry client, then pulled by trtwarm's shared pull over the OCI
backend (4 parallel 16 MiB ranged GETs, chunk SHA-256s checked by the workers as they write: verification
included) vs ``curl`` of the same blob URL to a file, interleaved rounds; also the same pull without SHA-256 (what
verification costs). The fastest of the rounds of each is compared (single runs on a shared 2-core VM differ by 2x).
Target: throughput >= 0.8 x curl's. Prints one JSON line.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
MiB = 1 << 20

_PULL = """
import json, os, sys
from pathlib import Path
from trtwarm.remote.backend import open_repository, parse_remote
from trtwarm.remote.pull import pull_into
remote = parse_remote(sys.argv[1], os.environ)
stats = pull_into(open_repository(remote), json.loads(sys.argv[2]), Path(sys.argv[3]), chunk=remote.chunk,
                  window=remote.concurrency, verify=sys.argv[4] == "verify")
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": stats.seconds, "hash_seconds": stats.hash_seconds, "max_rss_mb": hwm / 1024}))
"""


def bench_oci(work: Path, size: int = 1024 * MiB, rounds: int = 5) -> dict[str, object]:
    from bench_remote import _blob
    from registry import Registry
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.url import parse

    (work / "registry").mkdir(parents=True)
    server = Registry(work / "registry").start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTWARM_", "REGISTRY_"))}
        env.update(PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
                   HOME=str(work))
        url = f"oci://{server.addr}/engines/bench"
        client = OciClient(parse(url, env))
        blob, row = _blob(work, size)
        started = time.perf_counter()
        with open(blob, "rb") as handle:
            client.upload(f"sha256:{row['sha256']}", handle, size)
        push_s = time.perf_counter() - started
        blob.unlink()
        manifest = {"files": [row]}
        blob_url = f"http://{server.addr}/v2/engines/bench/blobs/sha256:{row['sha256']}"
        pulls, bare, curls = [], [], []
        for i in range(rounds):  # interleaved, so a noisy neighbour hits all alike
            for mode, into in (("verify", pulls), ("bare", bare)):
                out = work / f"pull-{mode}{i}"
                out.mkdir()
                started = time.perf_counter()
                text = subprocess.run([sys.executable, "-c", _PULL, url, json.dumps(manifest), str(out), mode],
                                      capture_output=True, text=True, check=True, env=env).stdout
                into.append({**json.loads(text), "wall": time.perf_counter() - started})
                (out / "engine.plan").unlink()
            started = time.perf_counter()
            subprocess.run(["curl", "-sSf", "-o", str(work / "curl.bin"), blob_url], check=True)
            curls.append(time.perf_counter() - started)
            (work / "curl.bin").unlink()
        best, bare_best = min(p["seconds"] for p in pulls), min(p["seconds"] for p in bare)
        return {"size_mib": size // MiB, "rounds": rounds, "push_s": round(push_s, 2),
                "pull_s": round(best, 2), "pull_median_s": round(sorted(p["seconds"] for p in pulls)[rounds // 2], 2),
                "curl_s": round(min(curls), 2), "curl_median_s": round(sorted(curls)[rounds // 2], 2),
                "ratio": round(min(curls) / best, 2), "bare_pull_s": round(bare_best, 2),
                "verify_overhead": round(1 - bare_best / best, 3),
                "max_rss_mb": round(max(p["max_rss_mb"] for p in pulls), 1),
                "cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 2)}
    finally:
        server.stop()


def render(r: dict[str, object]) -> str:
    """The block of docs/benchmarks.md."""
    from table import stamp

    ok = "met" if float(r["ratio"]) >= 0.8 else "MISSED"  # type: ignore[arg-type]
    overhead = 100 * float(r["verify_overhead"])  # type: ignore[arg-type]
    return "\n".join([
        stamp("python bench/run.py --only oci") + f" Fastest of {r['rounds']} interleaved rounds; load "
        f"{r['load']} at the end.", "",
        "| pull from a registry | trtwarm pull (verified) | `curl` to a file | throughput vs curl (target >= 0.8) | "
        "the same pull without SHA-256 | peak RSS | push (POST + one streamed PUT) |", "|---|---|---|---|---|---|---|",
        f"| {r['size_mib']} MiB | {r['pull_s']} s (median {r['pull_median_s']}) | {r['curl_s']} s (median "
        f"{r['curl_median_s']}) | {r['ratio']} ({ok}); verification overhead {overhead:.1f} % | {r['bare_pull_s']} s "
        f"| {r['max_rss_mb']:.0f} MB | {r['push_s']} s |", ""])


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):  # the docstring is the usage; nothing is built or measured
        print(__doc__)
        sys.exit(0)
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-oci-") as tmp:
        result = bench_oci(Path(tmp), mib * MiB, rounds)
    print(json.dumps(result))
    print(render(result))
