"""What ``--handoff copy`` costs: copying (and hashing, in the same read) a 1 GiB engine into the hand-off directory,
against ``cp`` of the same file on the same filesystem, and against a hit's ``read + SHA-256``.

    python bench/handoff_copy.py [--size-mib 1024] [--dir DIR] [--runs 5]

The source is read once first (page cache warm, as after a hit's verification). Each figure is the median of
``--runs`` runs; the copy is deleted between runs. Prints a Markdown table for docs/benchmarks.md.
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trtwarm.fs import copy as fscopy  # noqa: E402


def copy_hashed(src: str, dst: str, *, reflink: bool = True) -> tuple[None, None, bool]:
    """The hand-off copy as trtwarm makes it: descriptor to descriptor, checked as copied (trtwarm.fs.copy.clone)."""
    sfd = os.open(src, os.O_RDONLY)
    dfd = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        size = os.fstat(sfd).st_size
        row = {"bytes": size, "sha256": "0" * 64}  # the digest does not matter for the timing
        cloned = reflink and fscopy._clone(sfd, dfd)
        if cloned:
            fscopy.check_fd(dfd, size, row["sha256"])
        else:
            fscopy.copy_fd(sfd, dfd, size, row["sha256"])
        return None, None, cloned
    finally:
        os.close(sfd)
        os.close(dfd)


def _median(runs: int, action, cleanup) -> float:  # noqa: ANN001
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
        cleanup()
    return statistics.median(times)


def _read_hash(path: Path) -> None:
    digest, buffer = hashlib.sha256(), bytearray(16 << 20)
    with open(path, "rb", buffering=0) as handle:
        while got := handle.readinto(buffer):
            digest.update(memoryview(buffer)[:got])


def measure(size_mib: int, directory: str | None, runs: int) -> str:
    """The table: copy_hashed and its floors on a *size_mib* file in a new directory under *directory*."""
    work = Path(tempfile.mkdtemp(prefix="trtwarm-copy-", dir=directory))
    try:
        src, dst = work / "engine.plan", work / "copy.plan"
        with open(src, "wb") as handle:
            for _ in range(size_mib):
                handle.write(os.urandom(1 << 20))
        _read_hash(src)  # warm

        def gone() -> None:
            dst.unlink(missing_ok=True)

        rows = {
            "cp --reflink=never": _median(runs, lambda: subprocess.run(["cp", "--reflink=never", src, dst],
                                                                       check=True), gone),
            "cp (coreutils default: reflink or copy_file_range where offered)":
                _median(runs, lambda: subprocess.run(["cp", src, dst], check=True), gone),
            "read + SHA-256 (a hit's --verify digest)": _median(runs, lambda: _read_hash(src), gone),
            "copy_hashed, no reflink (read, hash, write)":
                _median(runs, lambda: copy_hashed(str(src), str(dst), reflink=False), gone),
            "copy_hashed (reflink tried first)": _median(runs, lambda: copy_hashed(str(src), str(dst)), gone),
        }
        reflinked = copy_hashed(str(src), str(dst))[2]
        gone()
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(work)], capture_output=True, text=True).stdout.strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rows["cp --reflink=never"]
    lines = [f"Measured {time.strftime('%Y-%m-%d')}: {size_mib} MiB on {fs} ({len(os.sched_getaffinity(0))} CPUs), "
             f"median of {runs}, by `python bench/handoff_copy.py --size-mib {size_mib} --runs {runs}`; reflink "
             f"offered: {reflinked}", "", "| what | seconds | ratio to `cp --reflink=never` |", "|---|---|---|"]
    lines += [f"| {what} | {seconds:.3f} | {seconds / base:.2f} |" for what, seconds in rows.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--dir", help="where the source and the copies go (default: a temporary directory)")
    parser.add_argument("--runs", type=int, default=5)
    ns = parser.parse_args()
    print(measure(ns.size_mib, ns.dir, ns.runs))


if __name__ == "__main__":
    main()
