"""What a TensorRT build is doing now, fed by ``trt.IProgressMonitor`` callbacks, read by the progress lines.

TensorRT calls ``phase_start``/``step_complete``/``phase_finish`` from its build threads while trtwarm's ticker
thread reads the state, and phases of one hierarchy may be open side by side (``IProgressMonitor`` in
``include/NvInfer.h``: a phase names its parent; names are unique only "within a single phase hierarchy"). So the
state is keyed by (parent, name), not a stack, and every access holds one lock. Pure Python: tested with real threads.

It is also how a build is cancelled. A signal handler cannot stop TensorRT: Python runs it only in the main thread
between bytecodes, and an exception raised inside a TensorRT callback is printed and dropped by the binding's
trampoline (``python/src/infer/pyCore.cpp`` release/10.16 L946-965 for ``ILogger.log``). What TensorRT does offer is
``IProgressMonitor.step_complete``: "return false to cancel the build" (L1261-1277; an exception there counts as
False). So :func:`run_cancellable` runs the build in a worker thread while the main thread waits in Python, where
SIGTERM's :class:`~trtwarm.errors.Terminated` arrives; it then marks the :class:`ProgressLog` cancelled, the
monitor's next ``step_complete`` returns False, TensorRT ends the build, and the exception goes on (exit 143,
staging removed, nothing published).

A build still inside TensorRT :data:`CANCEL_GRACE_SECONDS` after that (a tactic that never asks ``step_complete``)
is recorded (:func:`left_running`) and the exception goes on all the same: the stop unwinds as usual (staging
removed, locks released, termination message written), then the process ends with ``os._exit``
(:func:`trtwarm.init.stopping.build_left_running`), since an interpreter torn down under a thread inside TensorRT
can crash with another exit code than 143.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("trtwarm.build")
T = TypeVar("T")
#: how long a cancelled build gets to notice (TensorRT calls step_complete many times a second while it times
#: tactics); well inside Kubernetes' default 30 s termination grace period
CANCEL_GRACE_SECONDS = 10.0


class ProgressLog:
    """Open build phases with their step counts; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, list[object]] = {}  # name -> [parent, steps done, steps], in start order
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Ask the build to stop: every later :meth:`step` returns False."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancel.is_set()

    def start(self, name: str, parent: str | None, steps: int) -> None:
        """A phase began (``IProgressMonitor.phase_start``)."""
        with self._lock:
            self._open.pop(name, None)  # a name reused after it finished starts afresh
            self._open[name] = [parent, 0, int(steps)]

    def step(self, name: str, step: int) -> bool:
        """Step *step* (0-based) of *name* is done (``step_complete``); unknown phases are ignored. :return: whether
        the build may go on (False once :meth:`cancel` was called: ``step_complete``'s answer to TensorRT)."""
        with self._lock:
            entry = self._open.get(name)
            if entry is not None:
                entry[1] = max(int(entry[1]), step + 1)  # type: ignore[call-overload]
        return not self._cancel.is_set()

    def finish(self, name: str) -> None:
        """The phase ended, possibly before all its steps (``phase_finish``)."""
        with self._lock:
            self._open.pop(name, None)

    def describe(self, depth: int = 2) -> str:
        """The innermost open phase and its parent, e.g. ``Building engine 3/7 > Tactic selection 12/40``."""
        with self._lock:
            items = list(self._open.items())
        if not items:
            return ""
        name, (parent, done, total) = items[-1]
        chain = [(name, done, total)]
        parents = dict(items)
        while parent in parents and len(chain) < depth:
            name = str(parent)
            parent, done, total = parents[name]
            chain.insert(0, (name, done, total))
        return " > ".join(f"{n} {d}/{t}" if t else str(n) for n, d, t in chain)


def progress_monitor(trt: object, progress: ProgressLog) -> object | None:
    """A ``trt.IProgressMonitor`` feeding *progress* (None: this TensorRT has no such API).

    The binding's trampoline (``python/src/infer/pyCore.cpp``, release/10.16 and main) calls ``phase_start(name,
    parent, num_steps)``, ``step_complete(name, step) -> bool`` (False cancels the build) and ``phase_finish(name)``.
    """
    base = getattr(trt, "IProgressMonitor", None)
    if base is None:
        return None

    class Monitor(base):  # type: ignore[misc,valid-type]
        """Never raises into TensorRT: the state is a report, except the cancel answer of ``step_complete``."""

        def __init__(self) -> None:
            base.__init__(self)

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            try:
                progress.start(phase_name, parent_phase, num_steps)
            except Exception:  # noqa: BLE001 - a report must not fail the build
                pass

        def step_complete(self, phase_name: str, step: int) -> bool:
            try:
                return progress.step(phase_name, step)
            except Exception:  # noqa: BLE001 - (an exception would be read as False: a cancel)
                return not progress.cancelled

        def phase_finish(self, phase_name: str) -> None:
            try:
                progress.finish(phase_name)
            except Exception:  # noqa: BLE001
                pass

    return Monitor()


_LEFT_RUNNING: list[threading.Thread] = []  # cancelled builds that did not stop within the grace period


def left_running() -> list[threading.Thread]:
    """The cancelled builds of this process still running in their threads."""
    return [thread for thread in _LEFT_RUNNING if thread.is_alive()]


def run_cancellable(work: Callable[[], T], progress: ProgressLog, grace: float = CANCEL_GRACE_SECONDS) -> T:
    """``work()`` (a TensorRT build) in a worker thread; the calling (main) thread waits in Python so that SIGTERM and
    SIGINT arrive. On any exception while waiting: :meth:`ProgressLog.cancel`, wait up to *grace* seconds for the
    build to end (else record it in :func:`left_running`), and re-raise. :return: what *work* returned; :raises: what
    *work* raised."""
    outcome: dict[str, object] = {}
    done = threading.Event()  # not Thread.join: after a join cut short by the signal's exception, a second join
    # returned at once while the thread still ran (observed on CPython 3.11, tests/test_tensorrt_order.py)

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name="tensorrt-build", daemon=True)
    worker.start()
    try:
        while not done.wait(0.2):
            pass
    except BaseException:
        progress.cancel()
        log.warning("cancelling the TensorRT build (its progress monitor answers the next step with False)")
        if not done.wait(grace):  # a join with a bound (see ``done`` above for why not Thread.join)
            _LEFT_RUNNING.append(worker)
            log.error("the TensorRT build did not stop within %.0f s of being cancelled: this process removes its "
                      "staging directory and exits without waiting for it", grace)
        raise
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


__all__ = ["CANCEL_GRACE_SECONDS", "ProgressLog", "left_running", "progress_monitor", "run_cancellable"]
