"""The signature check on the hit path: a hit under ``--trust-mode enforce`` vs the same hit with trust off, and, in one
process, what the check costs once the entry is hashed (reading the signature, one Ed25519 verification, and importing
``cryptography`` unless init's background import of it has finished by then), without and with that preload; and
the same pair of hits under ``--verify stamp``, resolving in full and as repeats of the node's hit record. A node
records each signature it verified in its stamp directory
(``sig-<fingerprint>.json``) and checks it only once: the digest and stamp rows are hits on a node that verified the
signature before, the "first check" row gives each hit a new stamp directory, so each checks the signature."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MiB = 1 << 20


_TRUST_PROBE = """
import sys, time
from pathlib import Path
from trtwarm.trust import keys
from trtwarm.trust.policy import Gate
from trtwarm.volume.store import check_entry
if sys.argv[3] == "preload":
    keys.preload()  # what init does first under a policy
gate = Gate.create(Path(sys.argv[1]), "enforce")  # init's order: the gate, then hashing the entry, then the check
entry = check_entry(Path(sys.argv[2]), None)
ready, cpu = time.perf_counter(), time.process_time()
gate.check(entry)
print(time.perf_counter() - ready, time.process_time() - cpu)
"""


def _probe(policy: Path, entry: Path, mode: str, env: dict[str, str]) -> list[float]:
    done = subprocess.run([sys.executable, "-c", _TRUST_PROBE, str(policy), str(entry), mode], check=True,
                          capture_output=True, text=True, env=env)
    return [float(x) for x in done.stdout.split()]


def bench_trust(work: Path, init_argv, env: dict[str, str], timed, model: Path, size: int = 10 * MiB,  # noqa: ANN001
                repeat: int = 15) -> dict[str, object]:
    """A hit with signature verification (enforce) vs without; and, in one process, the check after hashing the
    entry, with and without the verifier's import started in the background first (as init does)."""
    cache = work / "cache"
    blob = work / "blob"
    blob.write_bytes(os.urandom(size))
    subprocess.run([sys.executable, "-m", "trtwarm", "keys", "generate", "--out", str(work / "k")], check=True,
                   capture_output=True, env=env)
    (work / "policy.json").write_text(json.dumps({"mode": "enforce", "keys": [{"name": "k",
                                                                               "public_key_file": "k.pub"}]}))
    argv = init_argv(model, cache, work / "h", f"cp {blob} {{output}}")
    subprocess.run([*argv, "--signing-key", str(work / "k.key")], check=True, capture_output=True, env=env)
    argv.append("--read-only")  # both sides: only the policy differs
    enforce = [*argv, "--trust-policy", str(work / "policy.json")]
    stamped = ["--verify", "stamp", "--stamp-dir", str(work / "stamps")]
    time.sleep(2.1)  # past the racy window: the engine was just written, and a younger file is not stamped
    subprocess.run([*enforce, *stamped], check=True, capture_output=True, env=env)  # this node: stamp, verify, record
    off, on, fresh, stamp_off, stamp_on, full_off, full_on = [], [], [], [], [], [], []
    records = (work / "stamps", "hit-*.json")  # removed first: the stamped hit then resolves in full
    for i in range(repeat):  # interleaved, so a change of machine load hits both alike
        off.append(timed(argv))
        on.append(timed(enforce))  # its stamp directory (<handoff>/stamps) holds the verdict after the first run
        fresh.append(timed([*enforce, "--stamp-dir", str(work / f"fresh{i}")]))  # a new node: the check runs
        full_off.append(timed([*argv, *stamped], *records))
        stamp_off.append(timed([*argv, *stamped]))  # a repeat of the hit the run before recorded (README, stamps)
        full_on.append(timed([*enforce, *stamped], *records))
        stamp_on.append(timed([*enforce, *stamped]))
    entry, policy = next((cache / "entries").iterdir()), work / "policy.json"
    cold, warm = [], []
    for _ in range(repeat):
        cold.append(_probe(policy, entry, "cold", env))
        warm.append(_probe(policy, entry, "preload", env))
    off_s, on_s = statistics.median(off), statistics.median(on)
    s_off, s_on, first = statistics.median(stamp_off), statistics.median(stamp_on), statistics.median(fresh)
    return {"first_s": first, "first_added_s": first - off_s, "first_ratio": first / off_s,
            "first_ok": first - off_s <= 0.005, "engine": f"{size // MiB} MiB", "off_s": off_s, "enforce_s": on_s,
            "added_s": on_s - off_s,
            "ratio": on_s / off_s, "check_s": statistics.median(p[0] for p in cold),
            "check_cpu_s": statistics.median(p[1] for p in cold), "preloaded_s": statistics.median(p[0] for p in warm),
            "ok": on_s - off_s <= 0.005, "stamp_off_s": s_off, "stamp_enforce_s": s_on, "stamp_added_s": s_on - s_off,
            "stamp_ratio": s_on / s_off, "stamp_ok": s_on - s_off <= 0.005, "load": os.getloadavg()[0],
            "full_off_s": statistics.median(full_off), "full_on_s": statistics.median(full_on)}


__all__ = ["bench_trust"]
