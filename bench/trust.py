"""The signature check on the hit path: a hit under ``--trust-mode enforce`` vs the same hit with trust off, and, in one
process, what the check itself costs (importing ``cryptography``, reading the policy, one Ed25519 verification)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MiB = 1 << 20


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


def bench_trust(work: Path, init_argv, env: dict[str, str], timed, model: Path, size: int = 10 * MiB,  # noqa: ANN001
                repeat: int = 15) -> dict[str, object]:
    """A hit with signature verification (enforce) vs without; and the in-process cost of the check."""
    cache = work / "cache"
    blob = work / "blob"
    blob.write_bytes(os.urandom(size))
    subprocess.run([sys.executable, "-m", "trtwarm", "keys", "generate", "--out", str(work / "k")], check=True,
                   capture_output=True, env=env)
    (work / "policy.json").write_text(json.dumps({"mode": "enforce", "keys": [{"name": "k",
                                                                               "public_key_file": "k.pub"}]}))
    argv = init_argv(model, cache, work / "h", f"cp {blob} {{output}}")
    subprocess.run([*argv, "--signing-key", str(work / "k.key")], check=True, capture_output=True, env=env)
    enforce = [*argv, "--trust-policy", str(work / "policy.json"), "--read-only"]
    off, on = [], []
    for _ in range(repeat):  # interleaved, so a change of machine load hits both alike
        off.append(timed(argv))
        on.append(timed(enforce))
    entry = next((cache / "entries").iterdir())
    probe = [[float(x) for x in subprocess.run([sys.executable, "-c", _TRUST_PROBE, str(work / "policy.json"),
                                                str(entry)], check=True, capture_output=True, text=True,
                                               env=env).stdout.split()] for _ in range(repeat)]
    off_s, on_s = statistics.median(off), statistics.median(on)
    check_s, check_cpu_s = statistics.median(p[0] for p in probe), statistics.median(p[1] for p in probe)
    return {"engine": f"{size // MiB} MiB", "off_s": off_s, "enforce_s": on_s, "added_s": on_s - off_s,
            "ratio": on_s / off_s, "check_s": check_s, "check_cpu_s": check_cpu_s, "ok": on_s - off_s <= 0.005,
            "load": os.getloadavg()[0]}


__all__ = ["bench_trust"]
