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
from trtwarm.trust.policy import Gate
from trtwarm.volume.entry import check_entry
gate = Gate.create(Path(sys.argv[1]), "enforce")  # init's order: the gate, then hashing the entry, then the check
if sys.argv[3] == "preload":
    gate.preload()  # what init does right before hashing, on a node without a stamp directory
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
                repeat: int = 30) -> dict[str, object]:
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
    # both sides: only the policy differs (the hand-off is a link on both: under enforce it would be a copy by
    # default, whose cost bench/handoff_copy.py measures apart; this row is the signature check's)
    argv += ["--read-only", "--handoff", "link"]
    enforce = [*argv, "--trust-policy", str(work / "policy.json")]
    stamped = ["--verify", "stamp", "--stamp-dir", str(work / "stamps")]
    time.sleep(2.1)  # past the racy window: the engine was just written, and a younger file is not stamped
    subprocess.run([*enforce, *stamped], check=True, capture_output=True, env=env)  # this node: stamp, verify, record
    runs = _rounds(work, argv, enforce, stamped, timed, repeat)
    entry, policy = next((cache / "entries").iterdir()), work / "policy.json"
    probes: dict[str, list[list[float]]] = {"cold": [], "preload": []}
    for i in range(repeat):  # in turn, as the hits
        for mode in _turn(["cold", "preload"], i):
            probes[mode].append(_probe(policy, entry, mode, env))
    return {**_figures(runs), "engine": f"{size // MiB} MiB", "repeat": repeat, "load": os.getloadavg()[0],
            "check_s": statistics.median(p[0] for p in probes["cold"]),
            "check_cpu_s": statistics.median(p[1] for p in probes["cold"]),
            "preloaded_s": statistics.median(p[0] for p in probes["preload"])}


def _rounds(work: Path, argv: list[str], enforce: list[str], stamped: list[str], timed,  # noqa: ANN001
            repeat: int) -> dict[str, list[float]]:
    """Each hit with a check beside the same hit without, the two in turn first: neither a change of machine load
    nor the order of the runs favours a side. The stamped pairs run two apart (the hit resolving in full, then its
    repeat, for one side, then for the other), as a repeat needs the record the run before it left."""
    runs: dict[str, list[float]] = {}
    records = (work / "stamps", "hit-*.json")  # removed first: the stamped hit then resolves in full
    for i in range(repeat):
        first = [("off_first", argv, ()), ("fresh", [*enforce, "--stamp-dir", str(work / f"fresh{i}")], ())]
        digest = [("off", argv, ()), ("on", enforce, ())]  # <handoff>/stamps has the verdict after the first run
        # resolving in full (the records removed first), then a repeat of the record that run left
        stamp = [[("full_off", [*argv, *stamped], records), ("stamp_off", [*argv, *stamped], ())],
                 [("full_on", [*enforce, *stamped], records), ("stamp_on", [*enforce, *stamped], ())]]
        for name, command, remove in [*_turn(first, i), *_turn(digest, i), *(r for side in _turn(stamp, i)
                                                                              for r in side)]:
            runs.setdefault(name, []).append(timed(command, *remove))
    return runs


def _figures(runs: dict[str, list[float]]) -> dict[str, object]:
    """Medians, ratios, and what each check adds (the median of its paired differences) against the target."""
    med = {name: statistics.median(times) for name, times in runs.items()}
    added = {row: _paired(runs[test], runs[base]) for row, test, base in
             (("first", "fresh", "off_first"), ("digest", "on", "off"), ("full", "full_on", "full_off"),
              ("stamp", "stamp_on", "stamp_off"))}
    return {"first_s": med["fresh"], "first_off_s": med["off_first"], "first_added_s": added["first"],
            "first_ratio": med["fresh"] / med["off_first"], "first_ok": added["first"] <= 0.005,
            "off_s": med["off"], "enforce_s": med["on"], "added_s": added["digest"], "ratio": med["on"] / med["off"],
            "ok": added["digest"] <= 0.005, "full_off_s": med["full_off"], "full_on_s": med["full_on"],
            "full_added_s": added["full"], "stamp_off_s": med["stamp_off"], "stamp_enforce_s": med["stamp_on"],
            "stamp_added_s": added["stamp"], "stamp_ratio": med["stamp_on"] / med["stamp_off"],
            "stamp_ok": added["stamp"] <= 0.005}


def _turn(pair: list, i: int) -> list:
    """*pair* in its order on even rounds, reversed on odd ones."""
    return pair if i % 2 == 0 else pair[::-1]


def _paired(with_check: list[float], without: list[float]) -> float:
    """What the check adds: the median of the differences of the runs made one after the other (a change of the
    machine's speed during the bench then moves both runs of a pair, not the figure)."""
    return statistics.median(a - b for a, b in zip(with_check, without))


__all__ = ["bench_trust"]
