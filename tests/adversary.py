"""A volume adversary: someone who can write the shared volume (or a seed tier) and races trtwarm with inotify.

:class:`Adversary` watches directories with the kernel's inotify (``inotify_init1``/``inotify_add_watch`` through
ctypes; no package) in a thread of the test process, while trtwarm runs in its own process. A :class:`Trap` names a
directory (and, with ``deep``, every directory created below it later), a file name pattern and the events that
count (``ACCESS``, ``MODIFY``, ``OPEN``, ``CLOSE_WRITE``, ``CLOSE_NOWRITE``, ``CREATE``, ``MOVED_TO``); on the *nth*
such event it runs its action on the file's path once: swap a file, a directory or a symlink in, rewrite bytes in
place, plant a FIFO.

The kernel queues events, so the watcher cannot stop trtwarm at a point: it reacts within about a millisecond of
the event, as a real attacker's few lines would. Each test picks the event that opens the window it attacks (e.g.
the close of the hash's read, before the use) and asserts what must hold whoever wins the race: nothing unverified
served or uploaded, nothing outside the cache changed. An action that finds its file gone (trtwarm moved on first,
e.g. renamed its staging directory away) is the attacker losing the race, not a failure: the trap stays unfired. A
test that needs the attack to have happened checks :attr:`Trap.fired`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fnmatch
import os
import select
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ACCESS, MODIFY, OPEN, CLOSE_WRITE, CLOSE_NOWRITE, CREATE, MOVED_TO = 0x01, 0x02, 0x20, 0x08, 0x10, 0x100, 0x80
_ISDIR, _OVERFLOW, _IGNORED = 0x40000000, 0x4000, 0x8000
_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass
class Trap:
    """Run *action(path)* on the *nth* event of *mask* on a name matching *pattern* in *directory* (or below it,
    with *deep*). ``dirs``: match directories (an ``opendir``), not files."""

    directory: Path
    pattern: str
    mask: int
    action: Callable[[Path], None]
    nth: int = 1
    deep: bool = False
    dirs: bool = False
    seen: int = 0
    fired: list[Path] = field(default_factory=list)
    error: BaseException | None = None


class Adversary:
    """The watcher thread; a context manager (stops and joins on exit, re-raising an action's failure)."""

    def __init__(self, *traps: Trap) -> None:
        self.traps = list(traps)
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.watches: dict[int, Path] = {}
        self._stop = threading.Event()
        for trap in self.traps:
            self._watch(trap.directory, trap.deep)
        self.thread = threading.Thread(target=self._run, name="adversary", daemon=True)

    def _watch(self, directory: Path, deep: bool) -> None:
        mask = ACCESS | MODIFY | OPEN | CLOSE_WRITE | CLOSE_NOWRITE | CREATE | MOVED_TO
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(directory), mask)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):  # gone already (a staging directory renamed away)
                return
            raise OSError(err, "inotify_add_watch", str(directory))
        self.watches[wd] = Path(directory)
        if deep:
            for sub in (p for p in Path(directory).iterdir() if p.is_dir() and not p.is_symlink()):
                self._watch(sub, True)

    def __enter__(self) -> Adversary:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(10)
        os.close(self.fd)
        failed = next((t.error for t in self.traps if t.error is not None), None)
        if failed is not None and exc[0] is None:
            raise failed

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + size].rstrip(b"\0").decode(errors="replace")
                offset += _EVENT.size + size
                self._event(wd, mask, name)

    def _event(self, wd: int, mask: int, name: str) -> None:
        where = self.watches.get(wd)
        if where is None or not name or mask & (_OVERFLOW | _IGNORED):
            return
        path = where / name
        if mask & _ISDIR and mask & (CREATE | MOVED_TO):  # a new directory below a deep trap: watch it at once
            for trap in self.traps:
                if trap.deep and (where == trap.directory or trap.directory in where.parents):
                    self._watch(path, True)
                    break
        for trap in self.traps:
            inside = where == trap.directory or (trap.deep and trap.directory in where.parents)
            if not inside or not mask & trap.mask or bool(mask & _ISDIR) != trap.dirs:
                continue
            if not fnmatch.fnmatch(name, trap.pattern) or trap.fired:
                continue
            trap.seen += 1
            if trap.seen == trap.nth:
                try:
                    trap.action(path)
                    trap.fired.append(path)
                except FileNotFoundError:  # the window closed before the writer acted: not fired
                    pass
                except BaseException as exc:  # noqa: BLE001 - reported by __exit__
                    trap.error = exc


# --- what a writer of the volume does in the window ---------------------------------------------------------------
def swap_file(data: bytes) -> Callable[[Path], None]:
    """Replace the file by another with *data* (a new inode, renamed over the name: atomic)."""
    def act(path: Path) -> None:
        tmp = path.with_name(f".adv.{os.getpid()}.{path.name}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return act


def rewrite_in_place(data: bytes) -> Callable[[Path], None]:
    """Overwrite the file's bytes in place (the same inode; *data* is cut or padded to the file's size)."""
    def act(path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            os.pwrite(fd, (data * (size // max(len(data), 1) + 1))[:size], 0)
        finally:
            os.close(fd)
    return act


def swap_symlink(target: Path) -> Callable[[Path], None]:
    """Replace the name by a symlink to *target* (anything outside the cache)."""
    def act(path: Path) -> None:
        tmp = path.with_name(f".adv.{os.getpid()}.{path.name}")
        os.symlink(target, tmp)
        os.replace(tmp, path)
    return act


def plant_fifo() -> Callable[[Path], None]:
    """Replace the file by a FIFO (opening it for reading would wait for a writer forever)."""
    def act(path: Path) -> None:
        tmp = path.with_name(f".adv.{os.getpid()}.{path.name}")
        os.mkfifo(tmp)
        os.replace(tmp, path)
    return act


def swap_dir(replacement: Path, aside: Path) -> Callable[[Path], None]:
    """Move the directory away to *aside* and rename *replacement* (prepared before) into its place."""
    def act(path: Path) -> None:
        os.rename(path, aside)
        os.rename(replacement, path)
    return act


def plant_links(links: dict[str, Path]) -> Callable[[Path], None]:
    """Beside the file, add symlinks ``{name: target}`` (the file's directory gets them)."""
    def act(path: Path) -> None:
        for name, target in links.items():
            os.symlink(target, path.parent / name)
    return act


def swap_parent_for_link(target: Path, aside: Path) -> Callable[[Path], None]:
    """Move the file's directory's subdirectory named by the trap away and put a symlink to *target* there."""
    def act(path: Path) -> None:
        os.rename(path, aside)
        os.symlink(target, path)
    return act


def tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path below *root* with its mode and (for a file) its bytes: what must not change outside the cache."""
    out: dict[str, tuple[int, bytes | None]] = {".": (os.lstat(root).st_mode, None)}
    for path in sorted(root.rglob("*")):
        st = os.lstat(path)
        out[str(path.relative_to(root))] = (st.st_mode, path.read_bytes() if path.is_file() else None)
    return out


def victim(where: Path) -> Path:
    """Files and directories outside the cache a volume writer would love trtwarm to touch: a 0600 secret, a 0700
    directory holding an empty directory, an empty directory."""
    where.mkdir(parents=True)
    secret = where / "credentials"
    secret.write_bytes(b"aws_secret_access_key = SENTINEL-SECRET-" + os.urandom(8).hex().encode())
    secret.chmod(0o600)
    (where / "private").mkdir(mode=0o700)
    (where / "private").chmod(0o700)
    (where / "private" / "empty").mkdir()
    (where / "empty").mkdir()
    return where


def copy_entry(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


__all__ = ["ACCESS", "CLOSE_NOWRITE", "CLOSE_WRITE", "CREATE", "MODIFY", "MOVED_TO", "OPEN", "Adversary", "Trap",
           "copy_entry", "plant_fifo", "plant_links", "rewrite_in_place", "swap_dir", "swap_file", "swap_parent_for_link",
           "swap_symlink", "tree", "victim"]
