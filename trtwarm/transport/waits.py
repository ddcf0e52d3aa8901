"""Visible waits on a peer, for every backend: a watcher that says what is being waited for, and progress lines for
long transfers (the process's memory of a dead peer is :mod:`trtwarm.transport.breaker`).

* **Watcher.** One daemon thread notices a request that has waited :data:`SAY_AFTER` seconds and logs the store,
  the request and when it gives up; then every progress interval while it still waits.
* **Transfers.** A pull or push registers its total size; the watcher logs bytes, rate and ETA every progress
  interval while it runs.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

log = logging.getLogger("trtwarm.remote")
#: a request still unanswered after this many seconds is named in the log
SAY_AFTER = 2.0


@dataclass
class _Wait:
    """One request or transfer being watched."""

    store: str
    what: str
    interval: float
    budget: float = 0.0  # a request: about when it gives up; 0 for a transfer
    total: int = 0  # a transfer's size in bytes
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    due: float = 0.0

    def line(self, now: float) -> str:
        elapsed = now - self.started
        if not self.total:
            return (f"waiting for {self.store} to answer {self.what} ({elapsed:.0f} s so far; gives up after about "
                    f"{self.budget:.0f} s)")
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = f"ETA {(self.total - self.done) / rate:.0f} s" if rate > 0 else "no bytes yet"
        return (f"{self.what} {self.store}: {self.done / 2**20:.1f} of {self.total / 2**20:.1f} MiB "
                f"({100 * self.done / self.total:.0f} %), {rate / 1e6:.1f} MB/s, {eta}")


class _Watcher:
    """The one thread that says what is being waited for."""

    def __init__(self) -> None:
        self.waits: dict[int, _Wait] = {}
        self.ids = itertools.count()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.wakes = float("inf")  # when the thread wakes next: a wait due later needs no wake-up (a pull adds one
        # per 1 MiB piece)

    def add(self, wait: _Wait, first: float) -> int:
        wait.due = wait.started + first
        with self.cond:
            ident = next(self.ids)
            self.waits[ident] = wait
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="trtwarm-store-watch", daemon=True)
                self.thread.start()
            elif wait.due < self.wakes:
                self.cond.notify()
        return ident

    def remove(self, ident: int) -> None:
        with self.cond:
            self.waits.pop(ident, None)

    def _run(self) -> None:
        while True:
            with self.cond:
                now = time.monotonic()
                due = [w for w in self.waits.values() if w.due <= now]
                for w in due:
                    w.due = now + w.interval
                lines = [w.line(now) for w in due]
            for text in lines:
                log.info("%s", text)
            with self.cond:  # computed and waited on under one hold: an add in between would go unseen
                nxt = min((w.due for w in self.waits.values()), default=time.monotonic() + 3600.0)
                self.wakes = nxt
                self.cond.wait(max(0.05, nxt - time.monotonic()))
                self.wakes = float("inf")


_watcher = _Watcher()


@contextlib.contextmanager
def waiting(store: str, what: str, budget: float, interval: float) -> Iterator[None]:
    """Watch one request on *store*: said after :data:`SAY_AFTER` s, then every *interval* s, until it returns."""
    ident = _watcher.add(_Wait(store, what, max(interval, 1.0), budget=budget), min(SAY_AFTER, interval))
    try:
        yield
    finally:
        _watcher.remove(ident)


#: a transfer smaller than this gets no progress lines (its requests are still watched)
QUIET_BELOW = 1 << 20


class Transfer:
    """A long transfer's progress: :meth:`add` the bytes as they move; logged every *interval* s while it runs."""

    def __init__(self, store: str, what: str, total: int, interval: float) -> None:
        self.wait = _Wait(store, what, max(interval, 1.0), total=max(total, 1))
        self.ident: int | None = None
        self._adding = threading.Lock()

    def add(self, count: int) -> None:
        """*count* more bytes moved (called from any thread)."""
        with self._adding:
            self.wait.done += count

    def __enter__(self) -> Transfer:
        if self.wait.total >= QUIET_BELOW:
            self.ident = _watcher.add(self.wait, self.wait.interval)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ident is not None:
            _watcher.remove(self.ident)


__all__ = ["SAY_AFTER", "Transfer", "waiting"]
