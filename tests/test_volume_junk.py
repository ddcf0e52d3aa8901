"""What a writer of the volume can leave in trtwarm's own directories: names trtwarm would never make (a pid of
non-ASCII digits or of 30 digits, a quarantine time that is no time), directory trees thousands of levels deep (made
in a second), a directory where trtwarm's own file belongs. No command exits 1 on them, and no builder of the key is
wedged: what trtwarm cleans up goes (any depth), what it cannot use is refused (exit 9) or ignored."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import cmd_init_args, entries, run_trtwarm
from test_windows import _trusted

from trtwarm.volume.store import host_tag

DEPTH = 5000  # deeper than Python's recursion limit, and than PATH_MAX can name


@pytest.fixture(autouse=True)
def _no_deep_tree_left(tmp_path: Path) -> Iterator[None]:
    """Remove the test's directory after it, whatever it left (pytest's own clean-up of old temporary directories
    recurses, and a tree 5,000 deep left there would break every later session's)."""
    from trtwarm.fs.safe import rmtree_at

    yield
    fd = os.open(tmp_path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        rmtree_at(fd, tmp_path.name, ignore_errors=True)
    finally:
        os.close(fd)


def deep_tree(where: Path, depth: int = DEPTH) -> None:
    """``where/d/d/d/...`` *depth* levels deep, made relative to descriptors (no path could name the bottom)."""
    where.mkdir(parents=True)
    fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    finally:
        os.close(fd)


def _built(model: Path, cache: Path, tmp_path: Path, tag: str = "h0") -> Path:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / tag))
    assert run.returncode == 0, run.stderr
    [entry] = entries(cache)
    return entry


def _no_bug(*runs: object) -> None:
    for run in runs:
        assert run.returncode != 1 and "Traceback" not in run.stderr, run.stderr  # type: ignore[attr-defined]


@pytest.mark.parametrize("pid", ["²³", "9" * 30, "0", "-1"])
def test_a_staging_name_with_a_pid_no_process_has_wedges_no_builder(model: Path, cache: Path, tmp_path: Path,
                                                                     pid: str) -> None:
    """``.staging/<key16>.<this host>.<pid>.<rand>``: ``int('²³')`` was a ValueError and ``os.kill(10**29, 0)`` an
    OverflowError, so every build of that key, and ``verify``, exited 1."""
    entry = _built(model, cache, tmp_path)
    key16 = entry.name.rpartition("--")[2]
    planted = cache / ".staging" / f"{key16}.{host_tag()}.{pid}.x"
    planted.mkdir()
    shutil.rmtree(entry)  # so the next init builds
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    _no_bug(built, run_trtwarm("verify", "--cache-dir", str(cache)), run_trtwarm("ls", "--cache-dir", str(cache)))
    assert built.returncode == 0 and built.summary["result"] == "built", built.stderr


def test_a_quarantine_name_whose_time_is_no_time_is_listed_and_collected(model: Path, cache: Path,
                                                                         tmp_path: Path) -> None:
    """``.quarantine/x.20261399T999999Z.junk.ab``: ``strptime`` refused month 13, and ``ls``, ``gc`` and ``verify``
    exited 1 (the sidecar's gc with them)."""
    _built(model, cache, tmp_path)
    (cache / ".quarantine" / "x.20261399T999999Z.junk.ab").mkdir(parents=True)
    runs = [run_trtwarm(cmd, "--cache-dir", str(cache)) for cmd in ("ls", "verify", "gc")]
    _no_bug(*runs)
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]


def test_a_stale_staging_tree_thousands_deep_is_removed_by_the_next_builder(model: Path, cache: Path,
                                                                          tmp_path: Path) -> None:
    """A dead builder's staging directory (by its age) holding a tree 5,000 levels deep: ``shutil.rmtree`` recursed
    once per level, so every builder of the key (which sweeps its key's dead staging first) and ``verify --fix``
    exited 1 with a RecursionError."""
    entry = _built(model, cache, tmp_path)
    key16 = entry.name.rpartition("--")[2]
    stale = cache / ".staging" / f"{key16}.elsewhere.1.x"
    deep_tree(stale)
    os.utime(stale, (1e9, 1e9))  # older than a day: a dead builder's, whoever made it
    shutil.rmtree(entry)  # so the next init builds
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    _no_bug(built)
    assert built.returncode == 0 and built.summary["result"] == "built", built.stderr
    assert not stale.exists(), "the stale staging directory is still there"


def test_an_entry_holding_a_tree_thousands_deep_is_reported_quarantined_and_collected(model: Path, cache: Path,
                                                                                      tmp_path: Path) -> None:
    """An entry with a directory 5,000 levels deep inside: ``ls``, ``show``, ``verify`` and ``gc`` walked it by
    recursion (or by a path longer than PATH_MAX) and exited 1 (``gc``: 6, with a hint about ``--name``)."""
    entry = _built(model, cache, tmp_path)
    deep_tree(entry / "x")
    key16 = entry.name.rpartition("--")[2]
    runs = [run_trtwarm("ls", "--cache-dir", str(cache)), run_trtwarm("show", "--cache-dir", str(cache), key16),
            run_trtwarm("verify", "--cache-dir", str(cache))]
    _no_bug(*runs)
    assert all(run.returncode == 8 for run in runs), [run.stderr for run in runs]  # damaged: an unlisted file
    fixed = run_trtwarm("verify", "--cache-dir", str(cache), "--fix")
    _no_bug(fixed)
    [quarantined] = (cache / ".quarantine").iterdir()
    os.rename(quarantined, cache / ".quarantine" / "x.20200101T000000Z.damaged.ab")  # past its grace period
    collected = run_trtwarm("gc", "--cache-dir", str(cache), "--yes")
    _no_bug(collected)
    assert collected.returncode == 0 and not list((cache / ".quarantine").iterdir()), collected.stderr



@pytest.mark.parametrize("what", ["lock", "owner.json"])
def test_a_directory_where_the_build_lock_or_its_owner_record_belongs_is_refused(model: Path, cache: Path,
                                                                                  tmp_path: Path, what: str) -> None:
    """``.locks/<key>.lock`` or ``.locks/<key>.owner.json`` made a directory: opening or replacing it was an
    ``IsADirectoryError``, and every build of the key exited 1 ("a bug in trtwarm"). Now a refusal naming it."""
    entry = _built(model, cache, tmp_path)
    [lock] = (cache / ".locks").glob("*.lock")
    planted = lock.with_name(lock.name.removesuffix(".lock") + f".{what}")
    if planted.exists():
        planted.unlink()
    planted.mkdir()
    shutil.rmtree(entry)
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    _no_bug(built)
    assert built.returncode == 9 and str(planted) in built.stderr and "a directory where" in built.stderr, built.stderr



def test_an_unsigned_entry_claiming_terabytes_is_refused_before_a_byte_is_read(model: Path, cache: Path,
                                                                             tmp_path: Path) -> None:
    """Under enforce, an unsigned entry whose manifest lists a 4 TiB sparse engine (consistent sizes, made in a
    millisecond): every start hashed all 4 TiB of zeros (hours) before the trust check refused it. The signature
    is judged on the manifest and envelope as read, before any listed file is opened."""
    private, enforce = _trusted(tmp_path)
    entry = _built(model, cache, tmp_path)
    doc = json.loads((entry / "manifest.json").read_text())
    huge = 4 << 40
    with open(entry / doc["engine_file"], "wb") as engine:
        engine.truncate(huge)
    doc.update(engine_bytes=huge, engine_sha256="0" * 64)
    for row in doc["files"]:
        if row["role"] == "engine":
            row.update(bytes=huge, sha256="0" * 64)
            row.pop("chunk_bytes", None)
            row.pop("chunk_sha256", None)
    (entry / "manifest.json").write_text(json.dumps(doc))
    consumer = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--read-only", "--trust-policy",
                                          str(enforce)), timeout=90)
    assert consumer.returncode == 7 and "unsigned" in consumer.stderr, consumer.stderr
    builder = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--trust-policy", str(enforce),
                                         "--signing-key", str(private)), timeout=90)
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(enforce),
                       timeout=90).returncode == 0



def test_what_others_put_in_a_shared_build_directory_fails_no_build(model: Path, cache: Path, tmp_path: Path) -> None:
    """A host's ``/tmp`` as the build directory (TMPDIR): another user's link or directory named like a private
    build directory of a dead init of this host made the sweep refuse (exit 9) every build on the host, or remove
    the other user's files. Only this uid's directories are swept."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep").write_text("k")
    dead = f"{2 ** 22 + 1}"
    link = shared / f"trtwarm-build-0123456789abcdef.{host_tag()}.{dead}.x1"
    link.symlink_to(tmp_path / "victim")
    theirs = shared / f"trtwarm-build-0123456789abcdef.{host_tag()}.{dead}.x2"
    theirs.mkdir()
    (theirs / "their-file").write_text("t")
    os.chown(theirs, 65534, 65534)
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"), env={"TMPDIR": str(shared)})
    _no_bug(built)
    assert built.returncode == 0 and built.summary["result"] == "built", built.stderr
    assert link.is_symlink() and (theirs / "their-file").exists() and (tmp_path / "victim" / "keep").exists()


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=40) | st.from_regex(r"[0-9]{1,30}", fullmatch=True))
def test_a_pid_field_is_a_pid_a_process_can_have_or_none(text: str) -> None:
    """The one parser of the pid in a name trtwarm made (staging and private build directories): never an
    exception, and only a pid Linux can give."""
    from trtwarm.fs.ops import PID_MAX, pid_alive, pid_field

    pid = pid_field(text)
    assert pid is None or (pid >= 0 and int(text) == pid)
    if pid is not None:
        assert pid_alive(pid) is (0 < pid <= PID_MAX and pid_alive(pid))  # never raises; none beyond PID_MAX


def test_rmtree_at_removes_any_depth_and_never_follows_a_link(tmp_path: Path) -> None:
    from trtwarm.fs.safe import rmtree_at

    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "secret").write_text("s")
    deep_tree(tmp_path / "tree")
    bottom = tmp_path / "tree"
    for _ in range(50):  # a link to the outside at some levels (the rest is too deep for a path to name)
        bottom = bottom / "d"
    os.symlink(outside, bottom / "link")
    os.symlink(outside / "secret", tmp_path / "tree" / "file-link")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        rmtree_at(fd, "tree")
    finally:
        os.close(fd)
    assert not (tmp_path / "tree").exists()
    assert (outside / "keep").is_dir() and (outside / "secret").read_text() == "s"
