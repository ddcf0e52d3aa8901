"""One ordered pass over a file through its descriptor: the whole-file SHA-256 (which cannot be split), optionally
the chunk digests and a copy, with the stages of each piece run side by side in threads, in lock step.

For each piece (at most :data:`BUFFER` bytes, never across a chunk's end) the calling thread hashes it into the
whole-file digest while helper threads hash it into its chunk's digest, write it to the destination, and read the next
piece into the other of two buffers. All of them see the same bytes in memory: what is written is what was hashed,
and the source is read once. The pass costs one SHA-256 of the file in wall time where three cores are free (the
other stages are shorter), instead of the sum of every stage. A file of at most :data:`SEQUENTIAL` bytes is passed
over in the calling thread alone, through one small buffer (:data:`SMALL_BUFFER`).
"""

from __future__ import annotations

import hashlib
import os

#: bytes per read: measured (docs/benchmarks.md, "Buffers"): a piece that stays in the core's cache between the read,
#: the hash and the write is faster than a large one that goes out to memory and back
BUFFER = 1 << 20
#: below this many bytes a pass runs in the calling thread alone: starting threads costs more than they save
SEQUENTIAL = 4 << 20
#: bytes per read of such a pass, into one buffer: measured in a fresh process (docs/benchmarks.md, "The storm"): a
#: 1 MiB engine is checked in 0.7 ms CPU with 64 KiB reads and in 1.4 ms with 1 MiB ones, most of the difference the
#: first touch of a large buffer's pages (a waiter of a storm, or a hit, checks one small engine once)
SMALL_BUFFER = 64 << 10
#: bytes per write: measured (docs/benchmarks.md, "Buffers"): on the 2-core VM (Linux 6.18, ext4) 1 MiB writes into
#: new page cache cost 8 times the system time of the same bytes in 128 KiB writes (1.96 s against 0.24 s per GiB),
#: while the read's size changes nothing; ``cp`` writes 128 KiB too
WRITE = 128 << 10


def read_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill *view* from *fd* at *offset*; fewer bytes only at the end of the file."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def write_all(fd: int, view: memoryview, offset: int) -> None:
    """Write all of *view* to *fd* at *offset*, at most :data:`WRITE` bytes per call."""
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:done + WRITE], offset + done)


class _Stage:
    """A helper thread that runs one call at a time (or, without a thread, the call at once)."""

    def __init__(self, threaded: bool) -> None:
        self._result: object = None
        self._thread = None
        if threaded:
            import queue
            import threading

            self._todo, self._done = queue.SimpleQueue(), queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, name="trtwarm-stream", daemon=True)
            self._thread.start()

    def start(self, fn, *args) -> None:  # noqa: ANN001
        if self._thread is None:
            self._result = fn(*args)
        else:
            self._todo.put((fn, args))

    def wait(self) -> object:
        if self._thread is None:
            return self._result
        ok, result = self._done.get()
        if not ok:
            raise result  # type: ignore[misc]
        return result

    def stop(self) -> None:
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join()

    def _serve(self) -> None:
        while (job := self._todo.get()) is not None:
            fn, args = job
            try:
                self._done.put((True, fn(*args)))
            except BaseException as exc:  # handed to the caller's thread
                self._done.put((False, exc))


def stream(sfd: int, dfd: int | None, chunk_bytes: int | None, stop: int | None) -> tuple[str, int, list[str]]:
    """``(whole-file SHA-256, bytes read, [chunk SHA-256s])`` of *sfd* read to its end or to *stop* bytes; each piece
    written to *dfd* at its offset. *chunk_bytes* None: no chunk digests (``[]``)."""
    expect = stop if stop is not None else os.fstat(sfd).st_size
    if expect <= SEQUENTIAL:
        return _small(sfd, dfd, chunk_bytes, stop)
    reader, chunker, writer = _Stage(True), _Stage(chunk_bytes is not None), _Stage(dfd is not None)
    try:
        return _pass(sfd, dfd, chunk_bytes, stop, reader, chunker, writer)
    finally:
        for stage in (reader, chunker, writer):
            stage.stop()


class _Sums:
    """The whole-file SHA-256 of the bytes passed so far and, with *chunk_bytes*, the SHA-256 of each chunk."""

    def __init__(self, chunk_bytes: int | None) -> None:
        self.whole, self.chunk, self.digests = hashlib.sha256(), hashlib.sha256(), []
        self.chunked, self.span = chunk_bytes is not None, chunk_bytes or (1 << 62)
        self.size = self.filled = 0  # bytes passed, and of them in the current chunk

    def passed(self, got: int) -> None:
        """*got* more bytes were hashed (into :attr:`whole` and :attr:`chunk`): close the chunk they complete."""
        self.size, self.filled = self.size + got, self.filled + got
        if self.filled == self.span:
            self.digests.append(self.chunk.hexdigest())
            self.chunk, self.filled = hashlib.sha256(), 0

    def result(self) -> tuple[str, int, list[str]]:
        if self.filled and self.chunked:
            self.digests.append(self.chunk.hexdigest())
        return self.whole.hexdigest(), self.size, self.digests


def _small(sfd: int, dfd: int | None, chunk_bytes: int | None, stop: int | None) -> tuple[str, int, list[str]]:
    """:func:`stream` of a small file in the calling thread: read a piece, hash it, write it, read the next."""
    sums, buffer = _Sums(chunk_bytes), memoryview(bytearray(SMALL_BUFFER))
    while got := read_into(sfd, buffer[:min(SMALL_BUFFER, sums.span - sums.filled,
                                            (stop - sums.size) if stop is not None else SMALL_BUFFER)], sums.size):
        data = buffer[:got]
        sums.whole.update(data)
        if sums.chunked:
            sums.chunk.update(data)
        if dfd is not None:
            write_all(dfd, data, sums.size)
        sums.passed(got)
    return sums.result()


def _pass(sfd: int, dfd: int | None, chunk_bytes: int | None, stop: int | None, reader: _Stage, chunker: _Stage,
          writer: _Stage) -> tuple[str, int, list[str]]:
    sums = _Sums(chunk_bytes)
    span = sums.span
    buffers = [memoryview(bytearray(min(BUFFER, span))) for _ in range(2)]

    def want(at: int, in_chunk: int) -> int:
        return min(BUFFER, span - in_chunk, (stop - at) if stop is not None else BUFFER)

    reader.start(read_into, sfd, buffers[0][:want(0, 0)], 0)
    turn = 0
    while got := reader.wait():
        data = buffers[turn][:got]
        after = sums.filled + got if sums.filled + got < span else 0
        reader.start(read_into, sfd, buffers[1 - turn][:want(sums.size + got, after)], sums.size + got)
        if sums.chunked:
            chunker.start(sums.chunk.update, data)
        if dfd is not None:
            writer.start(write_all, dfd, data, sums.size)
        sums.whole.update(data)
        chunker.wait()
        writer.wait()
        sums.passed(got)
        turn = 1 - turn
    return sums.result()


__all__ = ["BUFFER", "SEQUENTIAL", "WRITE", "read_into", "stream", "write_all"]
