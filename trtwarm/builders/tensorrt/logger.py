"""TensorRT's logger for trtwarm: a bounded tail of warnings and errors, echoed to our log, raising nothing into
TensorRT. The load check reads its records (:func:`~trtwarm.builders.tensorrt.compat.load_verdict`); a failed build
quotes its tail."""

from __future__ import annotations

import collections
import logging
from typing import Any

from trtwarm.builders.tensorrt.compat import WARNING

log = logging.getLogger("trtwarm.build")
TAIL_LINES = 200  # the warnings and errors a logger keeps: enough for every message of a failed build or load


def capturing_logger(trt: Any, echo: int = 2) -> Any:
    """A ``trt.ILogger`` that keeps the last :data:`TAIL_LINES` warnings and errors as ``(severity, message)`` records,
    echoes those up to *echo* to our log (INFO and VERBOSE go to the debug log only, never into memory: a build
    logs thousands), and raises nothing into TensorRT.

    ``ILogger.log`` "may be called from multiple threads" (``NvInferRuntime.h`` L1576-1627), hence the deque (its
    appends are atomic); the binding's trampoline prints and drops an exception raised in ``log`` (``pyCore.cpp``
    release/10.16 L946-965), so one is kept instead and :meth:`check` re-raises it once TensorRT has returned.
    """

    class CapturingLogger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)  # the binding requires the explicit base __init__
            self.records: collections.deque[tuple[int, str]] = collections.deque(maxlen=TAIL_LINES)
            self.deferred: BaseException | None = None

        def log(self, severity: Any, msg: str) -> None:
            try:
                level = int(severity)
                if level > WARNING:
                    log.debug("TensorRT: %s", msg)
                    return
                self.records.append((level, msg))
                if level <= echo:
                    log.log(logging.ERROR if level <= 1 else logging.WARNING, "TensorRT: %s", msg)
            except BaseException as exc:  # noqa: BLE001 - never into the C++ boundary; check() raises it
                self.deferred = self.deferred or exc

        def check(self) -> None:
            """Raise what :meth:`log` caught (e.g. SIGTERM's exception arriving while TensorRT logged)."""
            if self.deferred is not None:
                exc, self.deferred = self.deferred, None
                raise exc

        def tail(self, n: int = 20) -> str:
            return "\n".join([m for _s, m in self.records][-n:])

    return CapturingLogger()


__all__ = ["TAIL_LINES", "capturing_logger"]
