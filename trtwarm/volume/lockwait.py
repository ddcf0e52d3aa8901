"""Waiting for the holder of a build lock to let go, in ``flock`` mode: a shared flock of the lock file, which the
kernel grants to every waiter at once when the holder's exclusive lock goes (a publish, a failure, a death), dropped
as soon as it is granted. :class:`trtwarm.volume.lock.BuildLock` waits through these; they never take the lock.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from trtwarm.fs.atomic import below

#: the pause before looking again when the lock file cannot be waited on
PAUSE_SECONDS = 0.1


def _lock_file(path: Path, create: bool = True) -> int:
    """A descriptor of the lock file *path* to wait on (made if missing, with *create*). :raises OSError:"""
    # never a file a link points at, never in a directory a link swapped in for .locks points at
    flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY  # a shared flock needs no write access
    locks, name = below(path.parent.parent, path)
    try:  # O_NONBLOCK: a FIFO put there never blocks the open (a flock still blocks: it ignores the flag)
        return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o664, dir_fd=locks)
    finally:
        os.close(locks)


def wait_shared(path: Path, released: threading.Event) -> None:
    """Block on a shared flock of *path* (granted once no exclusive holder is left), drop it, set *released*."""
    import fcntl

    try:
        fd = _lock_file(path)
    except OSError:  # cannot wait here: the caller tries the lock itself again after a pause
        time.sleep(PAUSE_SECONDS)
        released.set()
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        time.sleep(PAUSE_SECONDS)
    finally:
        os.close(fd)
        released.set()


class _TimedOut(Exception):
    """The interval timer of :func:`_block` fired."""


def may_wait_here() -> bool:
    """Whether this thread may block on the flock itself, cut short by ``SIGALRM``: the main thread (the only one a
    signal handler runs in), with ``SIGALRM`` and the real-time interval timer unused by anyone else."""
    import signal

    return (threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGALRM) is
            signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))


def wait_here(path: Path, seconds: float) -> bool:
    """:func:`wait_shared` in the calling (main) thread, for at most *seconds* (an interval timer's ``SIGALRM``
    ends the wait): whether the shared flock was granted. One thread, woken by the kernel itself, instead of a helper
    thread that then wakes this one: in a storm, every waiter is scheduled once after the publish, not twice."""
    try:
        fd = _lock_file(path)
    except OSError:  # cannot wait here: the caller tries the lock itself again after a pause
        time.sleep(min(seconds, PAUSE_SECONDS))
        return True
    try:
        return _block(fd, seconds)
    finally:
        os.close(fd)


def pause(path: Path, seconds: float) -> None:
    """Sleep *seconds*, or less when the holder of the lock file *path* lets go meanwhile (a publish, a failure): the
    pause between looks of an init that only waits and never takes the lock (``--read-only``, or under a trust
    policy without a signing key). Never creates the lock file; sleeps the whole time where nobody holds it, where it
    is missing (a volume without a local builder, ``lease`` mode) or where only a helper thread could wait on it."""
    import fcntl

    try:
        fd = _lock_file(path, create=False)
    except OSError:
        time.sleep(seconds)
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: wait for its release
            if may_wait_here():
                _block(fd, seconds)
                return
        except OSError:  # flock does not work here
            pass
        else:  # nobody holds it
            fcntl.flock(fd, fcntl.LOCK_UN)
        time.sleep(seconds)
    finally:
        os.close(fd)


def _block(fd: int, seconds: float) -> bool:
    """Request a shared flock of *fd* in the calling (main) thread for at most *seconds* (``SIGALRM`` from
    ``ITIMER_REAL`` ends the wait) and drop it at once: whether it was granted."""
    import fcntl
    import signal

    armed = [True]

    def alarm(_signum: int, _frame: object) -> None:
        if armed[0]:  # one that comes after the flock returned is ignored (there is nothing left to cut short)
            armed[0] = False
            raise _TimedOut  # out of the flock: PEP 475 retries an interrupted call only when the handler returns

    previous = signal.signal(signal.SIGALRM, alarm)
    granted = False
    try:
        try:
            if seconds <= 0:  # no timer (0 disarms it): look once
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            else:
                signal.setitimer(signal.ITIMER_REAL, seconds)
                fcntl.flock(fd, fcntl.LOCK_SH)  # EINTR when the timer fires: the handler raises, nothing retries
            granted = True
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (_TimedOut, BlockingIOError):  # the time is up, or held and no time to wait
        pass
    except OSError:  # cannot wait on it: the caller looks again after a pause
        time.sleep(min(seconds, PAUSE_SECONDS))
        granted = True
    finally:
        signal.signal(signal.SIGALRM, previous)  # runs a pending handler first (disarmed by then)
    return granted


__all__ = ["PAUSE_SECONDS", "may_wait_here", "pause", "wait_here", "wait_shared"]
