"""What a TensorRT build is doing now, fed by ``trt.IProgressMonitor`` callbacks, read by the progress lines.

TensorRT calls ``phase_start``/``step_complete``/``phase_finish`` from its build threads while trtwarm's ticker
thread reads the state, and phases of one hierarchy may be open side by side (``IProgressMonitor`` in
``include/NvInfer.h``: a phase names its parent; names are unique only "within a single phase hierarchy"). So the
state is keyed by (parent, name), not a stack, and every access holds one lock. Pure Python: tested with real threads.
"""

from __future__ import annotations

import threading


class ProgressLog:
    """Open build phases with their step counts; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, list[object]] = {}  # name -> [parent, steps done, steps], in start order

    def start(self, name: str, parent: str | None, steps: int) -> None:
        """A phase began (``IProgressMonitor.phase_start``)."""
        with self._lock:
            self._open.pop(name, None)  # a name reused after it finished starts afresh
            self._open[name] = [parent, 0, int(steps)]

    def step(self, name: str, step: int) -> None:
        """Step *step* (0-based) of *name* is done (``step_complete``); unknown phases are ignored."""
        with self._lock:
            entry = self._open.get(name)
            if entry is not None:
                entry[1] = max(int(entry[1]), step + 1)  # type: ignore[call-overload]

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


def progress_monitor(trt: object, log: ProgressLog) -> object | None:
    """A ``trt.IProgressMonitor`` feeding *log* (None: this TensorRT has no such API).

    The binding's trampoline (``python/src/infer/pyCore.cpp``, release/10.16 and main) calls ``phase_start(name,
    parent, num_steps)``, ``step_complete(name, step) -> bool`` (False cancels the build) and ``phase_finish(name)``.
    """
    base = getattr(trt, "IProgressMonitor", None)
    if base is None:
        return None

    class Monitor(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            log.start(phase_name, parent_phase, num_steps)

        def step_complete(self, phase_name: str, step: int) -> bool:
            log.step(phase_name, step)
            return True

        def phase_finish(self, phase_name: str) -> None:
            log.finish(phase_name)

    return Monitor()


__all__ = ["ProgressLog", "progress_monitor"]
