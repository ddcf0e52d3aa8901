"""Big engines at disk speed: the check and the copy of a large engine against the floors the hardware sets, measured
beside them in the same run.

    python bench/bigfiles.py [--size-mib 1024] [--rounds 5] [--sweep] [--no-init] [--dir DIR]

Floors (each measured in this run, on this machine):

* SHA-256 over every core: the file's bytes hashed from memory by as many threads as the process may use
  (:func:`trtwarm.fs.cpus.usable_cpus`), each its share; and SHA-256 on one core (a whole-file digest is one
  sequential hash);
* ``cp --reflink=never --sparse=never`` of the same file in the same directory (a plain copy, no hashing).

Rows: the primitives of :mod:`trtwarm.fs.chunked` in this process (the check by chunk digests against SHA-256 over
every core, target <= 1.4x; the copy by chunk digests against ``max(cp, SHA-256 / cores)``, target <= 1.5x; the
build's copy and hash, the whole-file check and the hash, against one core's SHA-256), the sequential code they replace
beside them, and the same two figures as whole ``trtwarm init`` processes: the ``--verify digest`` hit's time over
the same hit of a 1 MiB engine, and the ``--handoff copy`` stamped hit's time over the ``--handoff link`` one.
``--sweep`` times the primitives at each read size (what :data:`trtwarm.fs.stream.BUFFER` was chosen by).
Each figure is the median of ``--rounds`` interleaved rounds (the order rotates every round); the source is in the
page cache (as after a volume read), a copy is deleted after each run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
MiB = 1 << 20
CHUNK = 16 * MiB

from trtwarm.fs import chunked, stream  # noqa: E402
from trtwarm.fs.cpus import usable_cpus  # noqa: E402

SWEEP = [128 << 10, 256 << 10, 512 << 10, 1 * MiB, 2 * MiB, 4 * MiB, 16 * MiB]


def sha_floor(size: int, threads: int, block: bytes) -> float:
    """Seconds for *threads* threads to SHA-256 *size* bytes from memory together, each its share."""
    def share() -> None:
        digest, left, view = hashlib.sha256(), size // threads, memoryview(block)
        while left > 0:
            digest.update(view[:min(left, len(view))])
            left -= len(view)

    workers = [threading.Thread(target=share) for _ in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def make_source(work: Path, size: int) -> tuple[Path, tuple[str, int, list[str]]]:
    """A *size*-byte file of random bytes (never sparse: a hole reads faster than data), read once, and its digests."""
    path = work / "engine.plan"
    with open(path, "wb") as handle:
        for _ in range(size // MiB):
            handle.write(os.urandom(MiB))
        handle.write(os.urandom(size % MiB))
        os.fsync(handle.fileno())  # clean pages: the cold rows can evict them
    fd = os.open(path, os.O_RDONLY)
    try:
        return path, chunked.hash_fd(fd, CHUNK)
    finally:
        os.close(fd)


class Primitives:
    """The timed actions on one source file: the new primitives, the sequential code beside them, the floors."""

    def __init__(self, work: Path, size: int) -> None:
        self.src, (self.sha, self.size, self.chunks) = make_source(work, size)
        self.dst, self.block, self.cores = work / "copy.plan", os.urandom(64 * MiB), usable_cpus()

    def _fd(self, action: Callable[[int], object]) -> Callable[[], object]:
        def run() -> object:
            fd = os.open(self.src, os.O_RDONLY)
            try:
                return action(fd)
            finally:
                os.close(fd)
        return run

    def _copy(self, action: Callable[[int, int], object]) -> Callable[[], object]:
        def run(fd: int) -> object:
            dfd = os.open(self.dst, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                return action(fd, dfd)
            finally:
                os.close(dfd)
        return self._fd(run)

    def actions(self) -> dict[str, Callable[[], object]]:
        from trtwarm.fs.ops import sha256_file

        size, sha, chunks = self.size, self.sha, self.chunks
        return {
            "sha_cores": lambda: sha_floor(size, self.cores, self.block),
            "sha_one": lambda: sha_floor(size, 1, self.block),
            "cp": lambda: subprocess.run(["cp", "--reflink=never", "--sparse=never", str(self.src), str(self.dst)],
                                         check=True),
            "check_chunks": self._fd(lambda fd: _true(chunked.check_fd(fd, size, sha, CHUNK, chunks))),
            "check_whole": self._fd(lambda fd: _true(chunked.check_fd(fd, size, sha))),
            "hash": self._fd(lambda fd: chunked.hash_fd(fd, CHUNK)),
            "copy_chunks": self._copy(lambda s, d: _true(chunked.copy_fd(s, d, size, sha, CHUNK, chunks))),
            "copy_hash": self._copy(lambda s, d: chunked.copy_hash_fd(s, d, CHUNK)),
            "seq_check": lambda: sha256_file(self.src),
            "seq_copy": lambda: _sequential_copy(self.src, self.dst),
            "cold_check": self._fd(lambda fd: _true(chunked.check_fd(fd, size, sha, CHUNK, chunks))),
            "cold_cat": lambda: subprocess.run(["cat", str(self.src)], stdout=subprocess.DEVNULL, check=True),
        }

    def evict(self) -> None:
        """Drop the source's pages from the page cache (a cold engine: after a reboot, or read over the network)."""
        fd = os.open(self.src, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def cfr_copy(self) -> Callable[[], object]:
        """The alternative the copy was measured against: ``copy_file_range`` of each piece (in the kernel), then the
        piece read back from the destination and hashed, chunks on the same threads (a bench-only sketch)."""
        import itertools

        def copy(sfd: int, dfd: int) -> bool:
            chunks, lock, indices, bad = self.chunks, threading.Lock(), itertools.count(), []

            def work() -> None:
                view = memoryview(bytearray(stream.BUFFER))
                while (i := next(indices)) < len(chunks):
                    digest, offset, end = hashlib.sha256(), i * CHUNK, min(self.size, (i + 1) * CHUNK)
                    while offset < end:
                        with lock:
                            n = os.copy_file_range(sfd, dfd, min(len(view), end - offset), offset, offset)
                        got = os.preadv(dfd, [view[:n]], offset)
                        digest.update(view[:got])
                        offset += got
                    bad.extend([i] if digest.hexdigest() != chunks[i] else [])

            threads = [threading.Thread(target=work) for _ in range(self.cores)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return _true(not bad)
        return self._copy(copy)

    def cleanup(self) -> None:
        self.dst.unlink(missing_ok=True)


def _sequential_copy(src: Path, dst: Path) -> str:
    """The hand-off copy before the parallel one (the baseline of the "sequential" rows): one thread reads 16 MiB,
    hashes it, writes it, to the end of the file."""
    digest, buffer = hashlib.sha256(), bytearray(16 << 20)
    with open(src, "rb", buffering=0) as source, open(dst, "xb", buffering=0) as target:
        while got := source.readinto(buffer):
            view = memoryview(buffer)[:got]
            digest.update(view)
            target.write(view)
    return digest.hexdigest()


def _true(ok: bool) -> bool:
    assert ok, "a primitive refused the file it was measured on"
    return ok


def interleaved(actions: dict[str, Callable[[], object]], rounds: int, after: Callable[[], None],
                before: dict[str, Callable[[], None]] | None = None) -> dict[str, float]:
    """Median seconds (and CPU seconds, ``NAME_cpu``) of each action over *rounds* rounds in a new order each round
    (shuffled, not rotated: a rotation keeps each action behind the same neighbour, and on a VM that hands freed
    memory back to its host what ran before a copy decides what its writes cost); *after* (every action) and
    *before* (the actions it names) run untimed."""
    import random

    order = random.Random(0)
    names, before = list(actions), before or {}
    times: dict[str, list[float]] = {key: [] for name in names for key in (name, f"{name}_cpu")}
    for name in names:  # one untimed round: buffers, page tables, the page cache and the CPU's clock warmed up
        actions[name]()
        after()
    for _ in range(rounds):
        for name in order.sample(names, len(names)):
            before.get(name, lambda: None)()
            cpu, start = _cpu(), time.perf_counter()
            actions[name]()
            times[name].append(time.perf_counter() - start)
            times[f"{name}_cpu"].append(_cpu() - cpu)
            after()
    return {name: statistics.median(values) for name, values in times.items()}


def _cpu() -> float:
    """CPU seconds this process (every thread) and its finished children have used: a figure a busy machine moves
    far less than wall time (other processes take turns on the cores, they do not add work to ours)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bench_primitives(work: Path, size: int, rounds: int) -> dict[str, object]:
    """The primitives and their floors on a *size*-byte file."""
    prims = Primitives(work, size)
    med = interleaved(prims.actions(), rounds, prims.cleanup, {"cold_check": prims.evict, "cold_cat": prims.evict})
    prims.src.unlink()
    return {"bytes": size, "cores": prims.cores, "buffer": stream.BUFFER, **med}


def bench_sweep(work: Path, size: int, rounds: int, sizes: list[int]) -> list[dict[str, object]]:
    """The primitives at each read size in *sizes*, with the floors in the same rounds."""
    prims = Primitives(work, size)
    base = prims.actions()
    actions = {k: base[k] for k in ("sha_cores", "sha_one", "cp")}
    for buffer in sizes:
        for name in ("check_chunks", "copy_chunks", "copy_hash", "check_whole"):
            actions[f"{name}@{buffer}"] = _at(buffer, base[name])
        actions[f"copy_writers@{buffer}"] = _at(buffer, base["copy_chunks"], one_writer=False)
        actions[f"copy_cfr@{buffer}"] = _at(buffer, prims.cfr_copy())
    try:
        med = interleaved(actions, rounds, prims.cleanup)
    finally:
        stream.BUFFER = chunked.BUFFER = SWEEP_DEFAULT
        chunked.ONE_WRITER = True
        prims.src.unlink()
    names = ("check_chunks", "copy_chunks", "copy_writers", "copy_cfr", "copy_hash", "check_whole")
    floors = ("sha_cores", "sha_one", "cp")
    return [{"buffer": b, **{n + cpu: med[f"{n}@{b}{cpu}"] for n in names for cpu in ("", "_cpu")},
             **{k + cpu: med[k + cpu] for k in floors for cpu in ("", "_cpu")}} for b in sizes]


SWEEP_DEFAULT = stream.BUFFER


def _at(buffer: int, action: Callable[[], object], *, one_writer: bool = True) -> Callable[[], object]:
    def run() -> object:
        stream.BUFFER = chunked.BUFFER = buffer
        chunked.ONE_WRITER = one_writer
        return action()
    return run


def init_rows(work: Path, size: int, rounds: int, init_argv: Callable[..., list[str]], env: dict[str, str],
              model: Path) -> dict[str, float]:
    """Whole ``trtwarm init`` hits of a *size*-byte random engine: ``--verify digest`` against the same hit of a 1 MiB
    engine, and ``--verify stamp`` with ``--handoff copy`` against ``--handoff link``; the floors in the same rounds."""
    prims = Primitives(work, size)
    (work / "small").mkdir()
    small, _ = make_source(work / "small", MiB)
    argv = {}
    for name, blob in (("big", prims.src), ("small", small)):
        cache, argvs = work / f"cache-{name}", {}
        for mode in ("link", "copy"):
            argvs[mode] = [*init_argv(model, cache, work / f"h-{name}-{mode}", f"cp --sparse=never {blob} {{output}}"),
                           "--handoff", mode]
        subprocess.run(argvs["link"], check=True, capture_output=True, env=env)  # the build
        argv[name] = argvs
    time.sleep(2.1)  # past the racy window: a file changed within 2 s of its hash is not stamped
    for mode in ("link", "copy"):  # the stamps, then the hit record (written once the stamps are out of theirs)
        subprocess.run([*argv["big"][mode], "--verify", "stamp"], check=True, capture_output=True, env=env)
    time.sleep(2.1)
    for mode in ("link", "copy"):
        subprocess.run([*argv["big"][mode], "--verify", "stamp"], check=True, capture_output=True, env=env)

    def run(args: list[str]) -> Callable[[], object]:
        return lambda: subprocess.run(args, check=True, capture_output=True, env=env)

    base = prims.actions()
    actions = {"digest_big": run(argv["big"]["link"]), "digest_small": run(argv["small"]["link"]),
               "stamp_link": run([*argv["big"]["link"], "--verify", "stamp"]),
               "stamp_copy": run([*argv["big"]["copy"], "--verify", "stamp"]),
               **{k: base[k] for k in ("sha_cores", "cp")}}
    med = interleaved(actions, rounds, prims.cleanup)
    return {"bytes": size, "cores": prims.cores, **med}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sweep", action="store_true", help="also time each read size (the buffer's choice)")
    parser.add_argument("--sweep-kib", default=",".join(str(b >> 10) for b in SWEEP),
                        help="the read sizes the sweep times, in KiB (default: %(default)s)")
    parser.add_argument("--no-init", action="store_true", help="the primitives only, no trtwarm init processes")
    parser.add_argument("--dir", help="where the files go (default: a temporary directory)")
    args = parser.parse_args()
    size = args.size_mib * MiB
    work = Path(tempfile.mkdtemp(prefix="trtwarm-bigfiles-", dir=args.dir))
    try:
        sizes = [int(k) << 10 for k in args.sweep_kib.split(",")] if args.sweep else None
        report(work, size, args.rounds, sweep=sizes, init=not args.no_init)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(work: Path, size: int, rounds: int, *, sweep: list[int] | None, init: bool) -> str:
    """Every measurement of this bench in *work*, each part printed as soon as it is measured: the whole table."""
    sys.path.insert(0, str(ROOT / "bench"))
    from run import _env, _init_argv, _model
    from table import bigfiles_rows, stamp, sweep_table

    for sub in ("prim", "sweep", "init"):
        (work / sub).mkdir()
    parts = [stamp(" ".join(["python bench/bigfiles.py", *sys.argv[1:]])), ""]
    prim = bench_primitives(work / "prim", size, rounds)
    parts.append("\n".join(bigfiles_rows(prim)))
    print("\n".join(parts), flush=True)
    if init:
        rows = init_rows(work / "init", size, rounds, _init_argv, _env(), _model(work / "init"))
        parts.append("\n".join(bigfiles_rows(prim, rows)[len(bigfiles_rows(prim)):]))
        print(parts[-1], flush=True)
    if sweep:
        parts.append("\n" + sweep_table(bench_sweep(work / "sweep", size, rounds, sweep)))
        print(parts[-1], flush=True)
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
