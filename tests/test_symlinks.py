"""Symlink-safe volume operations (issue 26 item 4, issue 27 item 8): a writer of the volume puts a symlink (or a
plain file) where trtwarm's own directory belongs. Every command refuses with exit 9 naming the path, and nothing
outside the cache root is written or deleted: real symlinks to a real victim directory, real processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, run_trtwarm, wait_until
from test_sidecar import SidecarProc
from test_trust import keypair

from trtwarm.volume.stamps import RACY_SECONDS

UNSAFE = 9


def _victim(tmp_path: Path) -> Path:
    """A directory outside the cache holding files someone cares about, shaped like what trtwarm would delete there
    (an old build directory, a stale lease, a quarantined entry)."""
    victim = tmp_path / "victim"
    (victim / "0123456789abcdef.host.1.aaaa").mkdir(parents=True)
    (victim / "0123456789abcdef.host.1.aaaa" / "precious.txt").write_text("keep me")
    (victim / "k").mkdir()
    (victim / "k" / "old.json").write_text("{}")
    os.utime(victim / "k" / "old.json", (1, 1))
    os.utime(victim / "0123456789abcdef.host.1.aaaa", (1, 1))
    (victim / "notes.txt").write_text("mine")
    return victim


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else b"/") for p in sorted(path.rglob("*"))}


def _built(model: Path, cache: Path, tmp_path: Path) -> Path:
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0")).summary["result"] == "built"
    return entries(cache)[0]


def _replace_with_link(cache: Path, name: str, victim: Path) -> None:
    path = cache / name
    if path.is_dir():
        os.rename(path, cache / f"{name}.moved")
    path.symlink_to(victim)


def _refused(run, path: Path) -> None:  # noqa: ANN001
    assert run.returncode == UNSAFE, (run.returncode, run.stderr)
    assert str(path) in run.stderr and "refused, nothing followed or deleted" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("name", [".staging", ".quarantine", ".leases", ".locks", ".trash", ".uses", "entries"])
def test_every_command_refuses_a_link_where_its_directory_belongs_and_the_victim_survives(
        name: str, model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    (entry / "engine.plan").write_bytes(b"corrupt")  # verify --fix, gc and init would all move or delete things
    victim = _victim(tmp_path)
    before = _tree(victim)
    _replace_with_link(cache, name, victim)
    commands = [cmd_init_args(model, cache, tmp_path / "h1"), ["verify", "--fix", "--cache-dir", str(cache)],
                ["gc", "--yes", "--max-age", "1s", "--quarantine-grace", "1s", "--cache-dir", str(cache)],
                ["rm", "--yes", "--force", entry.name.rsplit("--", 1)[1], "--cache-dir", str(cache)],
                ["ls", "--cache-dir", str(cache)], ["show", entry.name, "--cache-dir", str(cache)],
                ["sign", "--key", str(keypair(tmp_path, "ci")[0]), entry.name, "--cache-dir", str(cache)]]
    for args in commands:
        _refused(run_trtwarm(*args), cache / name)
    assert _tree(victim) == before, "nothing outside the cache root was written or deleted"


@pytest.mark.parametrize("name", [".leases", ".quarantine", ".staging"])
def test_a_plain_file_where_a_directory_belongs_is_refused_too(name: str, model: Path, cache: Path,
                                                              tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    moved = cache / f"{name}.moved"
    os.rename(cache / name, moved)
    (cache / name).write_text("not a directory")
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    _refused(run, cache / name)
    assert "is a regular file" in run.stderr
    assert (cache / name).read_text() == "not a directory", "refused, not repaired behind the operator's back"


def test_a_keys_lease_directory_that_is_a_file_or_a_link_is_refused_not_silently_unleased(
        model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    key = json.loads((entry / "manifest.json").read_text())["key"]
    lease_dir = cache / ".leases" / key
    for child in lease_dir.iterdir():
        child.unlink()
    lease_dir.rmdir()
    lease_dir.write_text("odd")
    _refused(run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")), lease_dir)
    lease_dir.unlink()
    victim = _victim(tmp_path)
    before = _tree(victim)
    lease_dir.symlink_to(victim / "k")
    _refused(run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2")), lease_dir)
    _refused(run_trtwarm("gc", "--yes", "--max-age", "1s", "--cache-dir", str(cache)), lease_dir)
    assert _tree(victim) == before


def test_an_entry_that_is_a_link_is_moved_as_a_link_never_followed(model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    victim = tmp_path / "victim-entry"
    os.rename(entry, victim)  # a complete, valid entry, but outside the cache: never served, never deleted
    entry.symlink_to(victim)
    before = _tree(victim)
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr
    assert "a symlink, not a directory (not followed)" in run.stderr
    assert [p for p in (cache / ".quarantine").iterdir() if p.is_symlink()], "the link itself was quarantined"
    rebuilt = entries(cache)[0]
    os.rename(rebuilt, tmp_path / "rebuilt")
    rebuilt.symlink_to(victim)
    assert run_trtwarm("rm", "--yes", "--force", rebuilt.name, "--cache-dir", str(cache)).returncode == 0
    assert not os.path.lexists(rebuilt) and _tree(victim) == before, "rm removed the link, not its target"


def test_the_repeat_hit_never_writes_a_lease_through_a_link(model: Path, cache: Path, tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    time.sleep(RACY_SECONDS + 0.2)
    args = cmd_init_args(model, cache, tmp_path / "h", "--verify", "stamp")
    env = {"POD_NAME": "p1", "POD_NAMESPACE": "ml"}
    for _ in range(2):
        assert run_trtwarm(*args, env=env).returncode == 0
    key = json.loads((tmp_path / "h" / "engine.json").read_text())["key"]
    victim = _victim(tmp_path)
    before = _tree(victim)
    lease_dir = cache / ".leases" / key
    for child in lease_dir.iterdir():
        child.unlink()
    lease_dir.rmdir()
    lease_dir.symlink_to(victim)
    run = run_trtwarm(*args, env=env)
    _refused(run, lease_dir)
    assert "repeating this node's record" not in run.stderr
    assert _tree(victim) == before


def test_the_sidecars_periodic_gc_refuses_and_keeps_serving(model: Path, cache: Path, tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    victim = _victim(tmp_path)
    before = _tree(victim)
    _replace_with_link(cache, ".staging", victim)
    side = SidecarProc(cache, tmp_path / "h0", "--gc-interval", "1s", "--gc-max-age", "1s", "--scan-interval", "1s")
    try:
        wait_until(lambda: (side.metric("trtwarm_exporter_scrape_errors_total") or 0) >= 2, 20, "errors counted")
        assert side.proc.poll() is None, "the sidecar keeps serving"
    finally:
        side.stop()
    stderr = side.proc.stderr.read()
    assert "periodic gc refused" in stderr and str(cache / ".staging") in stderr, stderr
    assert "Traceback" not in stderr
    assert _tree(victim) == before


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(model: Path, cache: Path,
                                                                       tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    key = json.loads((entry / "manifest.json").read_text())["key"]
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.rename(entry, tmp_path / "gone")  # a miss: the init takes the key's build lock
    lock = cache / ".locks" / f"{key}.lock"
    lock.unlink()
    lock.symlink_to(victim)
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    assert run.returncode == UNSAFE and f"{lock} is a symlink" in run.stderr, run.stderr
    assert victim.read_text() == "precious"
