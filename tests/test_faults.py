"""Bad inputs and faults across every command: the exit code of the one table, a ``hint:`` line, no traceback, and
nothing lost (the entries and the previous hand-off survive).

Faults are real: tmpfs mounts filled to ENOSPC or remounted read-only (``mount``, needs root), permissions enforced
by running trtwarm without CAP_DAC_OVERRIDE (``setpriv``; root ignores ``chmod`` otherwise), files where directories
should be, symlink loops, ports in use, real signals to real process groups. The README's exit-code section lists
the cases of :data:`FAULTS`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import Run, cmd_init_args, debris, entries, env_for, ort_init_args, spawn, trtwarm_argv, wait_for_log
from trtwarm.cli.demo import make_model
from trtwarm.errors import VOLUME_ERRNOS, VolumeError, exit_code_for, volume_error

NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]  # root, but chmod applies to it


def tree(root: Path) -> dict[str, str]:
    """Every path under *root* with its kind and content digest (files) or target (links)."""
    out = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            out[rel] = "dir"
    return out


@dataclass
class Ctx:
    """One case's world: a populated cache, a hand-off dir holding a previous run's report, scratch space."""

    tmp: Path
    model: Path
    vol: Path
    handoff: Path
    mounts: list[Path] = field(default_factory=list)
    no_dac: bool = False
    restore: list[Callable[[], None]] = field(default_factory=list)

    def file(self, name: str = "a-file") -> Path:
        path = self.tmp / name
        path.write_text("not a directory\n")
        return path

    def loop(self) -> Path:
        path = self.tmp / "loop"
        path.symlink_to(path)
        return path

    def chmod(self, path: Path, mode: int) -> None:
        """chmod for this case (run without DAC override), undone afterwards so the snapshot can be read."""
        old = path.stat().st_mode & 0o7777
        path.chmod(mode)
        self.no_dac = True
        self.restore.append(lambda: path.chmod(old))

    def tmpfs(self, size: str = "4m") -> Path:
        point = self.tmp / f"mnt{len(self.mounts)}"
        point.mkdir()
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], check=True,
                           capture_output=True)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            pytest.skip(f"cannot mount tmpfs here (needs root / CAP_SYS_ADMIN): {exc}")
        self.mounts.append(point)
        return point

    def on_tmpfs(self, size: str = "4m") -> Path:
        """Move the populated cache and the hand-off onto a fresh tmpfs; return the mount point."""
        point = self.tmpfs(size)
        shutil.copytree(self.vol, point / "cache", symlinks=True)
        shutil.copytree(self.handoff, point / "h", symlinks=True)
        self.vol, self.handoff = point / "cache", point / "h"
        return point

    def fill(self, point: Path) -> None:
        """Fill the tmpfs at *point* to the last byte."""
        with open(point / "filler", "wb", buffering=0) as handle:
            for chunk in (65536, 4096, 1):
                try:
                    while True:
                        handle.write(b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC

    def remount_ro(self, point: Path) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True, capture_output=True)

    def init(self, *extra: str, cache: Path | None = None, handoff: Path | None = None) -> list[str]:
        """``init`` flags of a hit on the template's entry ``tag=b`` (more ``--key-extra`` make it a miss)."""
        return cmd_init_args(self.model, cache or self.vol, handoff or self.handoff, "--key-extra", "tag=b", *extra)

    def miss(self, *extra: str, **kw: Path) -> list[str]:
        return self.init("--key-extra", "fault=miss", *extra, **kw)

    def age_leases(self) -> None:
        for lease in (self.vol / ".leases").rglob("*.json"):
            os.utime(lease, (time.time() - 86400, time.time() - 86400))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A cache with two entries built by real ``trtwarm init`` runs, and the hand-off of the last one."""
    root = tmp_path_factory.mktemp("template")
    model = make_model(root / "models" / "mlp.onnx")
    for tag in ("a", "b"):
        run = subprocess.run(trtwarm_argv(*cmd_init_args(model, root / "cache", root / "h", "--key-extra",
                                                         f"tag={tag}")), capture_output=True, text=True,
                             env=env_for(), check=False)
        assert run.returncode == 0, run.stderr
    return model, root / "cache", root / "h"


@pytest.fixture
def ctx(template: tuple[Path, Path, Path], tmp_path: Path) -> Iterator[Ctx]:
    model, cache, handoff = template
    shutil.copytree(cache, tmp_path / "cache", symlinks=True)
    shutil.copytree(handoff, tmp_path / "h", symlinks=True)
    c = Ctx(tmp_path, model, tmp_path / "cache", tmp_path / "h")
    yield c
    for undo in reversed(c.restore):
        undo()
    for point in reversed(c.mounts):
        subprocess.run(["umount", "-l", str(point)], check=False)


def run_in(c: Ctx, argv: list[str]) -> Run:
    env = env_for({"TRTWARM_TERMINATION_LOG": str(c.tmp / "termination-log")})
    (c.tmp / "termination-log").write_text("")
    proc = subprocess.run([*(NO_DAC if c.no_dac else []), *trtwarm_argv(*argv)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def assert_clean(run: Run, code: int, words: str) -> None:
    """The exit code, the words, a hint, and no traceback."""
    assert run.returncode == code, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout, run.stderr
    assert words.lower() in run.stderr.lower(), run.stderr
    assert re.search(r"^\S+ ERROR +hint: \S", run.stderr, re.M), run.stderr


def _bound_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _hold_gc_lock(c: Ctx) -> list[str]:
    import filelock

    lock = filelock.FileLock(str(c.vol / ".locks" / "gc.lock"))
    lock.acquire()
    c.restore.append(lock.release)
    c.age_leases()
    return ["gc", "--cache-dir", str(c.vol), "--max-age", "0s", "--yes", "--lock-mode", "flock"]


def _ro(c: Ctx, argv: Callable[[Ctx], list[str]]) -> list[str]:
    point = c.on_tmpfs()
    c.age_leases()
    c.remount_ro(point)
    return argv(c)


def _dead_staging(c: Ctx) -> None:
    """A staging directory left by a builder that is gone (a pid that no longer exists), for ``verify --fix``
    (made before :func:`_ro` copies the cache onto a tmpfs and remounts it read-only)."""
    (c.vol / ".staging" / f"0123456789abcdef.{os.uname().nodename}.999999999.dead").mkdir(parents=True)


def _full(c: Ctx, argv: Callable[[Ctx], list[str]]) -> list[str]:
    c.fill(c.on_tmpfs())
    return argv(c)


def _foreign(c: Ctx) -> Path:
    (c.vol / "VERSION").write_text("99\n")
    return c.vol


def _stranger(c: Ctx) -> Path:
    (c.tmp / "stranger").mkdir()
    (c.tmp / "stranger" / "notes.txt").write_text("someone else's files\n")
    return c.tmp / "stranger"


def _empty(c: Ctx) -> Path:
    (c.tmp / "empty").mkdir()
    return c.tmp / "empty"


def _no_handoff(init_argv: list[str]) -> list[str]:
    """``init`` flags without ``init`` and ``--handoff-dir`` (for ``key``)."""
    at = init_argv.index("--handoff-dir")
    return init_argv[1:at] + init_argv[at + 2:]


def _sidecar(c: Ctx, *flags: str) -> list[str]:
    return ["sidecar", "--cache-dir", str(c.vol), "--handoff-dir", str(c.handoff), "--bind", "127.0.0.1", *flags]


def _lifecycle(command: str, where: Callable[[Ctx], Path], *flags: str) -> Callable[[Ctx], list[str]]:
    extra = ["mlp"] if command == "rm" else []
    return lambda c: [command, *extra, "--cache-dir", str(where(c)), *flags]


@dataclass(frozen=True)
class Fault:
    """One bad input or fault: how to cause it (returns the argv), and what the user must see."""

    id: str
    setup: Callable[[Ctx], list[str]]
    code: int
    words: str
    mount: bool = False


LIFECYCLE = ("ls", "stats", "verify", "gc", "rm")
FAULTS = [
    # init
    Fault("init: --cache-dir is a file", lambda c: c.miss(cache=c.file()), 6, "not a directory"),
    Fault("init: --cache-dir below a file (ENOTDIR)", lambda c: c.miss(cache=c.file() / "cache"), 6,
          "not a directory"),
    Fault("init: --cache-dir is a symlink loop (ELOOP)", lambda c: c.miss(cache=c.loop()), 6, "symbolic link loop"),
    Fault("init: cache of another layout version", lambda c: c.init(cache=_foreign(c)), 6, "layout version"),
    Fault("init: entries/ and .staging/ not writable (EACCES)",
          lambda c: (c.chmod(c.vol / "entries", 0o555), c.chmod(c.vol / ".staging", 0o555), c.miss())[-1], 6,
          "permission denied"),
    Fault("init: --handoff-dir is a file", lambda c: c.init(handoff=c.file("handoff")), 6, "hand-off"),
    Fault("init: build on a read-only volume (EROFS)", lambda c: _ro(c, lambda c: c.miss()), 6, "read-only",
          mount=True),
    Fault("init: build on a full volume (ENOSPC)", lambda c: _full(c, lambda c: c.miss()), 6, "full", mount=True),
    Fault("init: --lock-timeout is not a duration", lambda c: c.init("--lock-timeout", "soon"), 2, "duration"),
    Fault("init: unknown --lock-mode", lambda c: c.init("--lock-mode", "nfs"), 2, "invalid choice"),
    Fault("init: unknown flag", lambda c: c.init("--colour"), 2, "unrecognized"),
    Fault("init: unknown --precision", lambda c: c.init("--precision", "int4"), 2, "precision"),
    Fault("init: build command fails", lambda c: c.miss("--build-command", "sh -c 'echo boom; exit 3' {output}"), 4,
          "status 3"),
    Fault("init: build tool missing", lambda c: c.miss("--build-command", "no-such-tool-x {output}"), 4,
          "cannot run build command"),
    Fault("init: build writes no engine", lambda c: c.miss("--build-command", "true {output}"), 4, "wrote no engine"),
    Fault("init: model missing", lambda c: cmd_init_args(c.tmp / "nope.onnx", c.vol, c.handoff), 3,
          "does not exist"),
    Fault("init: model is not ONNX", lambda c: cmd_init_args(c.file("m.onnx"), c.vol, c.handoff), 3, "onnx"),
    Fault("init: --read-only and nobody builds", lambda c: c.miss("--read-only", "--lock-timeout", "1s"), 5,
          "--read-only"),
    # key
    Fault("key: no --model", lambda c: ["key", "--cache-dir", str(c.vol)], 2, "no model"),
    Fault("key: cache of another layout version", lambda c: ["key", *_no_handoff(c.init(cache=_foreign(c)))], 6,
          "layout version"),
    Fault("key: --cache-dir below a file", lambda c: ["key", *_no_handoff(c.init(cache=c.file() / "c"))], 6,
          "not a directory"),
    Fault("key --explain: --cache-dir does not exist",
          lambda c: ["key", "--explain", *_no_handoff(c.init(cache=c.tmp / "unmounted"))], 6, "does not exist"),
    # lifecycle: no volume, or not a trtwarm volume, must never read as "0 entries"
    *[Fault(f"{cmd}: --cache-dir does not exist", _lifecycle(cmd, lambda c: c.tmp / "unmounted"), 6,
            "does not exist") for cmd in LIFECYCLE],
    *[Fault(f"{cmd}: --cache-dir is an empty directory", _lifecycle(cmd, _empty), 6, "is empty")
      for cmd in LIFECYCLE],
    Fault("ls: --cache-dir is not a trtwarm cache", _lifecycle("ls", _stranger), 6, "not a trtwarm cache"),
    Fault("show: --cache-dir does not exist", lambda c: ["show", "mlp", "--cache-dir", str(c.tmp / "unmounted")], 6,
          "does not exist"),
    Fault("sign: --cache-dir is not a trtwarm cache",
          lambda c: ["sign", "mlp", "--key", str(c.tmp / "none.key"), "--cache-dir", str(_stranger(c))], 6,
          "not a trtwarm cache"),
    Fault("verify: --cache-dir is not a trtwarm cache", _lifecycle("verify", _stranger), 6, "not a trtwarm cache"),
    Fault("ls: --cache-dir is a file", _lifecycle("ls", lambda c: c.file()), 6, "not a directory"),
    Fault("stats: --cache-dir is a symlink loop", _lifecycle("stats", lambda c: c.loop()), 6, "symbolic link loop"),
    Fault("verify: --cache-dir below a file", _lifecycle("verify", lambda c: c.file() / "c"), 6, "not a directory"),
    Fault("gc: cache of another layout version", _lifecycle("gc", _foreign, "--max-age", "0s"), 6, "layout version"),
    Fault("gc: --max-age is not a duration", _lifecycle("gc", lambda c: c.vol, "--max-age", "soon"), 2, "duration"),
    Fault("gc: --max-bytes is not a size", _lifecycle("gc", lambda c: c.vol, "--max-bytes", "lots"), 2, "size"),
    Fault("gc: negative --keep-per-model", _lifecycle("gc", lambda c: c.vol, "--keep-per-model", "-1"), 2,
          "negative"),
    Fault("gc: another gc holds the volume", _hold_gc_lock, 5, "another gc"),
    Fault("gc: entries/ not writable (EACCES)",
          lambda c: (c.age_leases(), c.chmod(c.vol / "entries", 0o555),
                     ["gc", "--cache-dir", str(c.vol), "--max-age", "0s", "--yes"])[-1], 6, "permission denied"),
    Fault("gc: read-only volume (EROFS)",
          lambda c: _ro(c, lambda c: ["gc", "--cache-dir", str(c.vol), "--max-age", "0s", "--yes"]), 6,
          "read-only", mount=True),
    Fault("verify --fix: read-only volume (EROFS)",
          lambda c: (_dead_staging(c), _ro(c, lambda c: ["verify", "--fix", "--cache-dir", str(c.vol)]))[-1], 6,
          "read-only", mount=True),
    Fault("rm: nothing matches", lambda c: ["rm", "no-such-entry", "--cache-dir", str(c.vol), "--yes"], 2,
          "no entry matches"),
    Fault("rm: key prefix too short", lambda c: ["rm", "abc", "--cache-dir", str(c.vol), "--yes"], 2,
          "no entry matches"),
    Fault("rm: entries/ not writable (EACCES)",
          lambda c: (c.chmod(c.vol / "entries", 0o555),
                     ["rm", *[p.name for p in entries(c.vol)], "--cache-dir", str(c.vol), "--yes", "--force"])[-1],
          6, "permission denied"),
    Fault("rm: read-only volume (EROFS)",
          lambda c: _ro(c, lambda c: ["rm", *[p.name for p in entries(c.vol)], "--cache-dir", str(c.vol), "--yes",
                                      "--force"]), 6, "read-only", mount=True),
    Fault("rm: no selector", lambda c: ["rm", "--cache-dir", str(c.vol)], 2, "required"),
    # sidecar
    Fault("sidecar: --port above 65535", lambda c: _sidecar(c, "--port", "70000"), 2, "out of range"),
    Fault("sidecar: negative --port", lambda c: _sidecar(c, "--port", "-1"), 2, "out of range"),
    Fault("sidecar: --port not a number", lambda c: _sidecar(c, "--port", "http"), 2, "invalid int"),
    Fault("sidecar: --bind not an address", lambda c: _sidecar(c, "--port", "0", "--bind", "999.1.1.1"), 2,
          "cannot listen"),
    Fault("sidecar: --bind an address of another host", lambda c: _sidecar(c, "--port", "0", "--bind", "192.0.2.1"),
          2, "cannot listen"),
    Fault("sidecar: --port in use",
          lambda c: (sock := _bound_port(), c.restore.append(sock.close),
                     _sidecar(c, "--port", str(sock.getsockname()[1])))[-1], 2, "in use"),
    Fault("sidecar: --scan-interval is not a duration", lambda c: _sidecar(c, "--scan-interval", "often"), 2,
          "duration"),
    # demo, selftest, the command line itself
    Fault("demo: --cache-dir below a file", lambda c: ["demo", "--cache-dir", str(c.file() / "c"),
                                                       "--workdir", str(c.tmp / "w")], 6, "not a directory"),
    Fault("demo: --workdir below a file", lambda c: ["demo", "--workdir", str(c.file() / "w")], 6, "--workdir"),
    Fault("selftest: unknown flag", lambda c: ["selftest", "--fast"], 2, "unrecognized"),
    Fault("trtwarm: unknown command", lambda c: ["bogus"], 2, "unknown command 'bogus'"),
    Fault("trtwarm: no command", lambda c: [], 2, "required"),
]


@pytest.mark.parametrize("fault", [pytest.param(f, id=f.id, marks=[pytest.mark.mount] if f.mount else [])
                                   for f in FAULTS])
def test_fault(ctx: Ctx, fault: Fault) -> None:
    before = (tree(ctx.vol / "entries"), (ctx.handoff / "engine.json").read_text())
    argv = fault.setup(ctx)
    if ctx.mounts and fault.mount:  # the setup moved the volume: compare against the moved copy
        before = (tree(ctx.vol / "entries"), (ctx.handoff / "engine.json").read_text())
    run = run_in(ctx, argv)
    for undo in reversed(ctx.restore):
        undo()
    ctx.restore.clear()
    assert_clean(run, fault.code, fault.words)
    assert tree(ctx.vol / "entries") == before[0], "entries changed"
    kept = [p.read_text() for p in (ctx.handoff / "engine.json", ctx.handoff / "engine.prev.json") if p.exists()]
    assert before[1] in kept, "the previous hand-off was lost"
    if argv[:1] == ["init"]:  # the init's failure is also on stdout and in the termination message
        assert run.summary["exit_code"] == fault.code
        assert json.loads((ctx.tmp / "termination-log").read_text())["exit_code"] == fault.code


def test_at_least_forty_faults_cover_every_command() -> None:
    assert len(FAULTS) >= 40
    commands = {f.id.split(":")[0] for f in FAULTS}
    assert {"init", "key", "ls", "stats", "verify", "gc", "rm", "sidecar", "demo", "selftest"} <= commands


def test_selftest_without_a_gpu_exits_2_with_a_hint(ctx: Ctx) -> None:
    if Path("/dev/nvidia0").exists():
        pytest.skip("a GPU is visible here: selftest would run")
    assert_clean(run_in(ctx, ["selftest", "--workdir", str(ctx.tmp / "st")]), 2, "gpu")


@pytest.mark.parametrize("code", sorted(VOLUME_ERRNOS), ids=[errno.errorcode[c] for c in sorted(VOLUME_ERRNOS)])
def test_every_volume_errno_is_exit_6_with_its_own_hint(code: int) -> None:
    # EIO and ESTALE cannot be caused on this machine's filesystems; the table is what every command goes through
    error = volume_error(OSError(code, os.strerror(code), "/models/cache/entries/x"), "read")
    assert isinstance(error, VolumeError) and exit_code_for(error) == 6
    assert error.hint and "/models/cache/entries/x" in error.message
    assert VOLUME_ERRNOS[code][0] in error.message


@pytest.mark.mount
def test_full_volume_at_start_writes_the_summary_and_keeps_the_previous_handoff(ctx: Ctx) -> None:
    point = ctx.on_tmpfs()
    old = (ctx.handoff / "engine.json").read_text()
    ctx.fill(point)
    run = run_in(ctx, ctx.miss())
    assert_clean(run, 6, "full")
    assert run.summary["exit_code"] == 6 and "full" in run.summary["error"]
    assert json.loads((ctx.tmp / "termination-log").read_text())["exit_code"] == 6
    assert (ctx.handoff / "engine.prev.json").read_text() == old
    assert len(entries(ctx.vol)) == 2 and debris(ctx.vol) == []


@pytest.mark.mount
def test_a_hit_on_a_full_volume_still_hands_the_engine_over(ctx: Ctx) -> None:
    point = ctx.on_tmpfs()
    elsewhere = ctx.tmp / "handoff-elsewhere"
    ctx.fill(point)
    run = run_in(ctx, ctx.init(handoff=elsewhere))
    assert run.returncode == 0, run.stderr
    assert run.summary["result"] == "hit"
    assert json.loads((elsewhere / "engine.json").read_text())["ready"] is True
    assert "the volume is full" in run.stderr and "read-only" not in run.stderr  # the lease's one warning, true


@pytest.mark.mount
def test_onnxruntime_build_on_a_full_volume_is_exit_6_not_4(ctx: Ctx, tmp_path: Path) -> None:
    point = ctx.tmpfs("1m")
    cache = point / "cache"
    model = make_model(tmp_path / "m" / "mlp.onnx")
    first = run_in(ctx, ort_init_args(model, cache, tmp_path / "h1"))
    assert first.returncode == 0, first.stderr
    ctx.fill(point)  # ONNX Runtime then fails with "Protobuf serialization failed", not ENOSPC
    run = run_in(ctx, ort_init_args(model, cache, tmp_path / "h2", "--key-extra", "x=1"))
    assert_clean(run, 6, "full")
    assert len(entries(cache)) == 1 and debris(cache) == []


def _live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_build_stops_the_build_group_and_removes_staging(ctx: Ctx, sig: int, code: int) -> None:
    pids = ctx.tmp / "pids"
    build = f"sh -c 'sleep 300 & echo $! >> {pids}; sleep 300 & echo $! >> {pids}; echo forked; wait' {{output}}"
    log = ctx.tmp / "termination-log"
    log.write_text("")
    proc = spawn(ctx.miss("--build-command", build), env={"TRTWARM_TERMINATION_LOG": str(log)})
    wait_for_log(proc, "[build] forked")
    children = [int(x) for x in pids.read_text().split()]
    assert len(children) == 2 and all(_live(p) for p in children)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    text = proc.log.read_text()  # type: ignore[attr-defined]
    assert proc.returncode == code, text
    assert not [p for p in children if _live(p)], "a build process outlived the init"
    assert "stopping the build command's process group" in text and "Traceback" not in text
    assert "hint: " in text
    assert debris(ctx.vol) == [] and len(entries(ctx.vol)) == 2
    assert json.loads(log.read_text())["exit_code"] == code
    assert json.loads(out.strip().splitlines()[-1])["exit_code"] == code
    assert json.loads((ctx.handoff / "engine.json").read_text())["exit_code"] == code


def test_a_read_only_consumer_names_damage_it_cannot_move_and_hashes_it_once(ctx: Ctx) -> None:
    """A corrupt entry on a read-only mount cannot be quarantined from here: the consumer verifies it once, waits
    for a replacement without re-hashing it, and fails naming the damage (exit 6), not a plain timeout."""
    engine = Path(run_in(ctx, ctx.init()).summary["path"])  # the entry a consumer of tag=b uses
    data = bytearray(engine.read_bytes())
    data[0] ^= 0xFF
    engine.write_bytes(bytes(data))
    pod_handoff = ctx.tmp / "pod-h"  # the Pod's own emptyDir, writable
    run = run_in(ctx, _ro(ctx, lambda c: c.init("--read-only", "--lock-timeout", "3s", handoff=pod_handoff)))
    assert_clean(run, 6, "is damaged (engine SHA-256 does not match the manifest")
    assert run.stderr.count("failed verification") == 1, run.stderr  # hashed once, not every half second
    assert engine.parent.name in {p.name for p in (ctx.vol / "entries").iterdir()}  # nothing moved or lost
    # with the hand-off on the read-only mount too, no start can succeed: refused at once, naming the hand-off
    run = run_in(ctx, ctx.init("--read-only", "--lock-timeout", "3s"))
    assert_clean(run, 6, f"cannot write the hand-off to {ctx.handoff}")
    assert "failed verification" not in run.stderr
