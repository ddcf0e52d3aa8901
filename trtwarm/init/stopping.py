"""Stopping ``trtwarm init`` (and the commands that talk to a repository) cleanly: the Pod's SIGTERM (or a terminal's
SIGINT) becomes an exception, and every network wait of the process ends (:mod:`trtwarm.transport.stop`)."""

from __future__ import annotations

import logging
import signal
import sys

from trtwarm.errors import Interrupted, Terminated
from trtwarm.transport import stop

log = logging.getLogger("trtwarm")


def stop_on_signals(command: str = "init") -> None:
    """Turn the first SIGTERM or SIGINT into :class:`Terminated` / :class:`Interrupted`, raised in the main thread:
    the code unwinding it stops a build's process group, removes the staging directory and releases the locks, and
    :func:`trtwarm.cli.main.main` writes the termination message and exits 143 / 130. A second signal during that
    cleanup is only logged, so the cleanup itself is not cut short (the kubelet's SIGKILL after the grace period
    still is). Every connect, read, write and retry pause of the transport, in any thread, ends within a tick of the
    signal (:func:`trtwarm.transport.stop.request`), so transfers in worker threads stop too."""
    stopping: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if stopping:
            log.warning("%s again: still stopping", signal.Signals(signum).name)
            return
        stopping.append(signum)
        stop.request(signum)
        name = signal.Signals(signum).name
        log.warning("%s received: stopping (a build in progress is stopped and its staging directory removed)",
                    name)
        raise (Terminated if signum == signal.SIGTERM else Interrupted)(f"{command} stopped by {name}")

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def build_left_running(code: int) -> bool:
    """Whether a cancelled TensorRT build is still running in a thread (it did not stop within
    :data:`~trtwarm.builders.tensorrt.progress.CANCEL_GRACE_SECONDS`); if so, says that the process exits now with
    *code*, and the caller must end it with ``os._exit`` (:func:`trtwarm.cli.main.run` does).

    Asked when the command has returned, i.e. when the stop has unwound as usual: the staging directory removed, the
    locks released, the termination message written. A normal exit would then tear the interpreter down under a
    thread inside TensorRT, which can crash with another exit code than 143 (130), or hang.
    """
    if "trtwarm.builders.tensorrt.progress" not in sys.modules:  # no TensorRT build ran in this process
        return False
    from trtwarm.builders.tensorrt.progress import CANCEL_GRACE_SECONDS, left_running

    if not left_running():
        return False
    log.error("exiting with %d now: the cancelled TensorRT build is still inside TensorRT %.0f s after it was "
              "cancelled, and is not waited for (its staging directory is removed, nothing was published)", code,
              CANCEL_GRACE_SECONDS)
    return True


__all__ = ["build_left_running", "stop_on_signals"]
