"""Real read-only and full volumes (tmpfs mounts; needs root, skips with the reason elsewhere)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import (cmd_init_args, debris, entries, env_for, ort_init_args, run_trtwarm, settle, spawn,
                      trtwarm_argv, wait_for_log, wait_until)

pytestmark = pytest.mark.mount


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "vol"
    point.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point))
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot mount tmpfs here (needs root / CAP_SYS_ADMIN): {exc}")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def test_hit_on_a_read_only_volume_works_and_a_build_there_exits_6(model: Path, tmpfs: Path, tmp_path: Path) -> None:
    cache = tmpfs / "cache"
    assert run_trtwarm(*ort_init_args(model, cache, tmp_path / "h1")).returncode == 0
    _mount("-o", "remount,ro", str(tmpfs))
    hit = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h2"))
    assert hit.returncode == 0, hit.stderr
    assert hit.summary["result"] == "hit"
    miss = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h3", "--key-extra", "other=1"))
    assert miss.returncode == 6, miss.stderr
    assert "read-only" in miss.stderr and "Traceback" not in miss.stderr
    assert len(entries(cache)) == 1


def test_enospc_while_publishing_leaves_no_partial_entry(model: Path, tmpfs: Path, tmp_path: Path) -> None:
    cache = tmpfs / "cache"
    filler, flag = tmpfs / "filler", tmp_path / "fill-the-volume"
    flag.touch()
    # the build fits, then (while the flag exists) fills the rest of the volume: the manifest write hits ENOSPC
    command = (f"sh -c 'head -c 65536 /dev/urandom > {{output}}; [ -e {flag} ] && cat /dev/zero > {filler} "
               "2>/dev/null; true'")
    args = ["init", "--builder", "command", "--builder-version", "t", "--build-command", command, "--device", "cpu",
            "--model", str(model), "--cache-dir", str(cache), "--handoff-dir", str(tmp_path / "h")]
    full = run_trtwarm(*args)
    assert full.returncode == 6, full.stderr
    assert "full" in full.stderr and "Traceback" not in full.stderr
    assert entries(cache) == [] and debris(cache) == []
    filler.unlink()
    flag.unlink()
    again = run_trtwarm(*args)
    assert again.returncode == 0, again.stderr
    assert again.summary["result"] == "built" and len(entries(cache)) == 1


def test_a_setgid_group_shared_volume_keeps_its_group_all_the_way_down(model: Path, tmp_path: Path) -> None:
    """fsGroup's volume root is group-writable and setgid: entries must carry that group (not the builder's primary
    group), so another uid of the group can later move them (gc); this runs as root, whose primary group is 0."""
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chown(cache, 0, 2000)
    cache.chmod(0o2775)
    built = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h"))
    assert built.returncode == 0, built.stderr
    (entry,) = entries(cache)
    for path in (cache / "entries", entry, *entry.iterdir()):
        assert os.stat(path).st_gid == 2000, path
    assert os.stat(entry).st_mode & 0o7777 == 0o2775


def test_a_hit_on_a_read_only_volume_says_it_takes_no_lease(model: Path, tmpfs: Path, tmp_path: Path) -> None:
    cache = tmpfs / "cache"
    assert run_trtwarm(*ort_init_args(model, cache, tmp_path / "h1")).returncode == 0
    _mount("-o", "remount,ro", str(tmpfs))
    hit = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h2"))
    assert hit.returncode == 0 and hit.summary["result"] == "hit"
    assert "no in-use lease on" in hit.stderr and "the cache volume is read-only here" in hit.stderr
    log = tmp_path / "sidecar.log"
    with open(log, "w") as err:
        sidecar = subprocess.Popen(trtwarm_argv("sidecar", "--cache-dir", str(cache), "--handoff-dir",
                                                str(tmp_path / "h2"), "--port", "0", "--bind", "127.0.0.1",
                                                "--lease-interval", "0.05s"), env=env_for(), stderr=err)
    try:
        wait_until(lambda: "is ready; no in-use lease" in log.read_text(), what="the sidecar's read-only line")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=10)
    text = log.read_text()
    assert text.count("no in-use lease") == 1 and "read-only here" in text and "lease None" not in text


def test_a_read_only_triton_repo_is_named_not_the_handoff_dir(model: Path, tmpfs: Path, tmp_path: Path) -> None:
    (tmpfs / "triton").mkdir()
    _mount("-o", "remount,ro", str(tmpfs))
    run = run_trtwarm(*ort_init_args(model, tmp_path / "cache", tmp_path / "h", "--triton-repo",
                                     str(tmpfs / "triton"), "--triton-model", "mlp"))
    assert run.returncode == 6, run.stderr
    assert f"cannot lay out the Triton model repository {tmpfs / 'triton'}" in run.stderr
    assert "hint: mount a writable emptyDir at --triton-repo" in run.stderr and "hand-off" not in run.stderr


def test_ls_on_a_read_only_volume_lists_without_writing_its_manifest_index(model: Path, tmpfs: Path,
                                                                          tmp_path: Path) -> None:
    cache = tmpfs / "cache"
    for tag in ("a", "b"):
        assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{tag}", "--key-extra", f"t={tag}")
                           ).returncode == 0
    settle(cache)
    _mount("-o", "remount,ro", str(tmpfs))
    ro = run_trtwarm("ls", "--cache-dir", str(cache), "--json")  # no index yet, and none can be written
    assert ro.returncode == 0 and ro.stderr == "", ro.stderr
    assert len(json.loads(ro.stdout)) == 2 and not (cache / ".manifest-index.json").exists()
    _mount("-o", "remount,rw", str(tmpfs))
    assert run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout == ro.stdout
    assert (cache / ".manifest-index.json").is_file()
    _mount("-o", "remount,ro", str(tmpfs))
    again = run_trtwarm("ls", "--cache-dir", str(cache), "--json")  # an index written elsewhere is read here
    assert again.returncode == 0 and again.stdout == ro.stdout and again.stderr == ""


def test_a_new_cache_in_a_directory_holding_other_files_is_made_with_a_warning(model: Path, tmp_path: Path) -> None:
    """A wrong --cache-dir (or the wrong volume mounted) is adopted, as a fresh ext4 volume's lost+found must be, but
    not silently."""
    odd = tmp_path / "data"
    (odd / "models").mkdir(parents=True)
    (odd / "lost+found").mkdir()
    run = run_trtwarm(*ort_init_args(model, odd, tmp_path / "h"))
    assert run.returncode == 0, run.stderr
    assert "WARNING" in run.stderr and "already holds other files (models)" in run.stderr
    fresh = run_trtwarm(*ort_init_args(model, tmp_path / "fresh", tmp_path / "h2"))
    assert "created a new trtwarm cache" in fresh.stderr and "already holds" not in fresh.stderr


def test_a_damaged_entry_on_a_read_only_mount_waits_for_a_writer_as_read_only_would(model: Path, tmpfs: Path,
                                                                                    tmp_path: Path) -> None:
    """A plain init (no --read-only) finds the entry corrupt on a read-only mount: it cannot quarantine or rebuild
    it, so it says so and waits for a writer (not exit 6 at once blaming a cleanup that ignores leases, and no
    "created a new trtwarm cache" where it created nothing); a writer's rebuild on a read-write mount of the same
    volume ends the wait with that engine."""
    cache = tmpfs / "cache"
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")).returncode == 0
    [entry] = entries(cache)
    engine = entry / "engine.plan"
    engine.write_bytes(b"X" + engine.read_bytes()[1:])  # same size: only the hash finds it
    view = tmp_path / "ro-view"  # the same volume, mounted read-only, as a consumer Pod sees it
    view.mkdir()
    _mount("--bind", str(tmpfs), str(view))
    try:
        _mount("-o", "remount,bind,ro", str(view))
        quick = run_trtwarm(*cmd_init_args(model, view / "cache", tmp_path / "h2", "--lock-timeout", "1s"))
        assert quick.returncode == 6, quick.stderr
        assert f"the entry {entry.name} is damaged (engine SHA-256 does not match" in quick.stderr
        assert "mounted read-only here" in quick.stderr and "waits as --read-only would" in quick.stderr
        assert "cleanup that ignores" not in quick.stderr and "new trtwarm cache" not in quick.stderr
        assert "`trtwarm verify --fix` on a writable mount" in quick.stderr
        waiter = spawn(cmd_init_args(model, view / "cache", tmp_path / "h3", "--lock-timeout", "60s"))
        wait_for_log(waiter, "waiting for a writer to replace")
        rebuilt = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h4"))  # a writer: quarantines, rebuilds
        assert rebuilt.returncode == 0 and rebuilt.summary["result"] == "built", rebuilt.stderr
        out, _ = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, waiter.log.read_text()
        assert json.loads(out.strip().splitlines()[-1])["result"] == "waited"
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
