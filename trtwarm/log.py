"""Logging setup: one line per event on stderr, as text or JSON. No other module configures logging."""

from __future__ import annotations

import json
import logging
import sys
import time


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) +
                           f".{int(record.msecs):03d}Z", "level": record.levelname.lower(), "logger": record.name,
                           "msg": record.getMessage()})


class _TextFormatter(logging.Formatter):
    converter = time.gmtime

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03dZ %(levelname)-7s %(message)s", "%Y-%m-%dT%H:%M:%S")


def setup(fmt: str = "text", level: int = logging.INFO) -> None:
    """Send ``trtwarm.*`` records to stderr in *fmt* (``text`` or ``json``), replacing earlier handlers.

    Records carry no caller, thread or process (neither format shows them): looking them up is most of what a record
    costs, and a storm's waiters each log on their way out (the logging HOWTO's "Optimization")."""
    logging._srcfile = None  # type: ignore[attr-defined]  # the documented switch: no sys._getframe() walk
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger("trtwarm")
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


__all__ = ["setup"]
