"""Hashing, checking and copying through a descriptor (trtwarm.fs.chunked), on several threads: the digests are
hashlib's, every wrong file is refused (longer, shorter, a chunk flipped, the last chunk short, the wrong digest), the
caller's descriptors keep their offsets, and a copy that meets a bad chunk stops there."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trtwarm.fs.chunked import check_fd, copy_fd, copy_hash_fd, hash_fd

MiB = 1 << 20
CHUNK = MiB


def _digests(data: bytes, chunk: int = CHUNK) -> tuple[str, int, list[str]]:
    return (hashlib.sha256(data).hexdigest(), len(data),
            [hashlib.sha256(data[i:i + chunk]).hexdigest() for i in range(0, len(data), chunk)])


def _file(tmp_path: Path, data: bytes, name: str = "engine.plan") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


class _Fds:
    """A source descriptor, moved to offset 5 (its offset must stay there), and a fresh destination."""

    def __init__(self, src: Path, dst: Path | None = None) -> None:
        self.src = os.open(src, os.O_RDONLY)
        os.lseek(self.src, 5, os.SEEK_SET)
        self.dst = None if dst is None else os.open(dst, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        if self.dst is not None:
            os.lseek(self.dst, 3, os.SEEK_SET)

    def __enter__(self) -> _Fds:
        return self

    def __exit__(self, *exc: object) -> None:
        assert os.lseek(self.src, 0, os.SEEK_CUR) == 5, "the source's offset moved"
        os.close(self.src)
        if self.dst is not None:
            assert os.lseek(self.dst, 0, os.SEEK_CUR) == 3, "the destination's offset moved"
            os.close(self.dst)


SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK, 9 * CHUNK + 12345]


@pytest.mark.parametrize("size", SIZES)
def test_hash_and_copy_give_hashlibs_digests_and_the_copy_holds_the_bytes(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    src = _file(tmp_path, data)
    with _Fds(src, tmp_path / "copy") as fds:
        assert hash_fd(fds.src, CHUNK) == _digests(data)
        assert copy_hash_fd(fds.src, fds.dst, CHUNK) == _digests(data)
    assert (tmp_path / "copy").read_bytes() == data


@pytest.mark.parametrize("size", SIZES)
def test_check_and_copy_accept_the_exact_file_by_chunk_and_by_whole_digest(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    whole, _, chunks = _digests(data)
    src = _file(tmp_path, data)
    with _Fds(src) as fds:
        assert check_fd(fds.src, size, whole)
        assert check_fd(fds.src, size, whole, CHUNK, chunks)  # an empty file's empty list: its whole digest
    for name, row in (("by-chunk", (CHUNK, chunks or None)), ("whole", (None, None))):
        with _Fds(src, tmp_path / name) as fds:
            assert copy_fd(fds.src, fds.dst, size, whole, *row)
        assert (tmp_path / name).read_bytes() == data


def _wrong_files(data: bytes) -> dict[str, bytes]:
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1  # a bit in the middle chunk
    return {"one byte longer": data + b"\0", "one byte shorter": data[:-1], "last chunk short": data[:-CHUNK // 2],
            "last chunk missing": data[:-(len(data) % CHUNK or CHUNK)], "a bit flipped mid-file": bytes(flipped),
            "empty": b""}


@pytest.mark.parametrize("by_chunk", [True, False], ids=["by-chunk", "whole"])
def test_every_wrong_file_is_refused_by_check_and_copy(tmp_path: Path, by_chunk: bool) -> None:
    data = os.urandom(7 * CHUNK + 777)
    whole, size, chunks = _digests(data)
    row = (CHUNK, chunks) if by_chunk else (None, None)
    for i, (what, wrong) in enumerate(_wrong_files(data).items()):
        src = _file(tmp_path, wrong, f"wrong{i}")
        with _Fds(src, tmp_path / f"copy{i}") as fds:
            assert not check_fd(fds.src, size, whole, *row), what
            assert not copy_fd(fds.src, fds.dst, size, whole, *row), what


def test_a_wrong_digest_list_is_refused(tmp_path: Path) -> None:
    data = os.urandom(3 * CHUNK)
    whole, size, chunks = _digests(data)
    with _Fds(_file(tmp_path, data)) as fds:
        assert not check_fd(fds.src, size, whole, CHUNK, chunks[:2]), "too few digests"
        assert not check_fd(fds.src, size, whole, CHUNK, [*chunks, chunks[0]]), "too many digests"
        assert not check_fd(fds.src, size, "0" * 64), "the whole-file digest is checked without chunk digests"
        assert check_fd(fds.src, size, "0" * 64, CHUNK, chunks), "with chunk digests, they are what is checked"
        assert not check_fd(fds.src, size, whole, 2 * CHUNK, chunks), "digests of another chunk size"
    empty = _file(tmp_path, b"", "empty")
    with _Fds(empty) as fds:
        assert not check_fd(fds.src, 0, hashlib.sha256(b"").hexdigest(), CHUNK, [hashlib.sha256(b"").hexdigest()])


def test_a_copy_stops_at_the_first_bad_chunk(tmp_path: Path) -> None:
    data = bytearray(os.urandom(64 * CHUNK))
    whole, size, chunks = _digests(bytes(data))
    data[CHUNK + 10] ^= 1  # chunk 1 of 64
    src = _file(tmp_path, bytes(data))
    with _Fds(src, tmp_path / "copy") as fds:
        assert not copy_fd(fds.src, fds.dst, size, whole, CHUNK, chunks)
    assert (tmp_path / "copy").stat().st_size < size // 2, "the copy went on past the bad chunk"


def test_a_source_that_grows_while_hashed_gives_digests_of_what_was_copied(tmp_path: Path) -> None:
    """A file still being written: whatever prefix the pass read, the digests and the copy are of the same bytes."""
    src = tmp_path / "growing"
    src.write_bytes(os.urandom(8 * MiB))
    stop = threading.Event()

    def grow() -> None:
        with open(src, "ab") as handle:
            while not stop.is_set():
                handle.write(os.urandom(64 * 1024))
                handle.flush()

    writer = threading.Thread(target=grow)
    writer.start()
    try:
        with _Fds(src, tmp_path / "copy") as fds:
            got = copy_hash_fd(fds.src, fds.dst, CHUNK)
    finally:
        stop.set()
        writer.join()
    copied = (tmp_path / "copy").read_bytes()
    assert got == _digests(copied) and got[1] >= 8 * MiB


def test_a_read_error_reaches_the_caller(tmp_path: Path) -> None:
    """A descriptor that cannot be read (a directory: EISDIR) raises in the caller's thread, from the pool too."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError):
            hash_fd(fd, CHUNK)
    finally:
        os.close(fd)
    data = os.urandom(4 * CHUNK)
    whole, size, chunks = _digests(data)
    src = os.open(_file(tmp_path, data), os.O_RDONLY)
    dst = os.open(tmp_path / "read-only-copy", os.O_RDONLY | os.O_CREAT, 0o600)  # not writable: EBADF
    try:
        with pytest.raises(OSError):
            copy_fd(src, dst, size, whole, CHUNK, chunks)
        with pytest.raises(OSError):
            copy_hash_fd(src, dst, CHUNK)
    finally:
        os.close(src)
        os.close(dst)


CHECK_IN_CHILD = """
import hashlib, os, sys, threading, time
from trtwarm.fs.chunked import check_fd
from trtwarm.fs.cpus import usable_cpus
data = os.urandom(32 << 20)
open(sys.argv[1], "wb").write(data)
chunks = [hashlib.sha256(data[i:i + (1 << 20)]).hexdigest() for i in range(0, len(data), 1 << 20)]
peak, done = [threading.active_count()], threading.Event()
def watch():
    while not done.is_set():
        peak.append(threading.active_count())
        time.sleep(0.0005)
watcher = threading.Thread(target=watch)
watcher.start()
fd = os.open(sys.argv[1], os.O_RDONLY)
ok = all(check_fd(fd, len(data), "", 1 << 20, chunks) for _ in range(20))
done.set(); watcher.join()
print(usable_cpus(), max(peak) - 2, ok)  # the threads beside the main one and the watcher
"""


def test_the_check_starts_no_more_threads_than_the_cpus_it_may_use(tmp_path: Path) -> None:
    """Pinned to one CPU, a check of 32 chunks runs in the caller's thread alone (a real affinity mask)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    pin = "import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); exec(sys.argv.pop(1))"
    out = subprocess.run([sys.executable, "-c", pin, CHECK_IN_CHILD, str(tmp_path / "f")], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "0", "True"], out
