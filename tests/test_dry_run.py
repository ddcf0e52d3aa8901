"""``--dry-run`` always wins: every combination of the other flags of ``gc``, ``rm`` and ``verify --fix`` leaves the
volume byte for byte, mode for mode and mtime for mtime as it was, on a volume where each of them, run for real,
removes or quarantines something."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import cmd_init_args, entries, env_for, run_trtwarm, trtwarm_argv
from trtwarm.cli.main import main
from trtwarm.cli.demo import make_model
from trtwarm.key import sanitize

GC_FLAGS = (["--yes"], ["--json"], ["--max-age", "0s"], ["--max-bytes", "0"], ["--keep-per-model", "1"],
            ["--quarantine-grace", "0s"], ["--max-remove", "1"], ["--lock-mode", "lease"])
RM_FLAGS = (["--yes"], ["--force"], ["--json"], ["--lock-mode", "lease"])


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every path under *root*: kind, mode, size, mtime and content digest (files) or target (links)."""
    out: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        body = os.readlink(path) if path.is_symlink() else (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir")
        out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, body)
    return out


def powerset(flags: tuple[list[str], ...]) -> list[list[str]]:
    return [[word for flag in combo for word in flag] for n in range(len(flags) + 1)
            for combo in itertools.combinations(flags, n)]


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three entries (one in use, one corrupt), all old; an old quarantined entry; a dead builder's staging."""
    root = tmp_path_factory.mktemp("dry")
    model, cache = make_model(root / "m" / "mlp.onnx"), root / "cache"
    for tag in ("a", "b", "c"):
        run = subprocess.run(trtwarm_argv(*cmd_init_args(model, cache, root / f"h-{tag}", "--key-extra",
                                                         f"tag={tag}")), capture_output=True, text=True,
                             env=env_for(), check=False)
        assert run.returncode == 0, run.stderr
    old = time.time() - 90 * 86400
    for path in [*(cache / ".uses").iterdir(), *(cache / ".leases").rglob("*.json")]:
        os.utime(path, (old, old))
    os.utime(next((cache / ".leases").rglob("*.json")), None)  # one entry is in use right now
    engine = entries(cache)[1] / "engine.plan"
    engine.write_bytes(b"X" + engine.read_bytes()[1:])  # corrupt, same size: only verify's hashing sees it
    (cache / ".quarantine" / "old--0123456789abcdef.20200101T000000Z.corrupt.ab12").mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (cache / ".staging" / f"0123456789abcdef.{sanitize(os.uname().nodename, 32).replace('.', '-')}.{dead.pid}.b0"
     ).mkdir()
    return cache


def _run_all(cache: Path, command: list[str], combos: list[list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(cache)
    for flags in combos:
        argv = [*command, "--cache-dir", str(cache), *flags, "--dry-run"]
        code = main(argv, environ={})
        capsys.readouterr()
        assert code in (0, 8), (argv, code)  # verify: 8 = problems found
        assert snapshot(cache) == before, f"{' '.join(argv)} changed the volume"


def test_gc_dry_run_wins_over_every_combination_of_flags(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    combos = powerset(GC_FLAGS)
    assert len(combos) == 256
    _run_all(volume, ["gc"], combos, capsys)


def test_rm_dry_run_wins_over_every_combination_of_flags(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = [p.name for p in entries(volume)]
    selectors = [[names[0]], [names[1].rpartition("--")[2]], names]  # a name, a key prefix, every entry
    _run_all(volume, ["rm"], [[*sel, *flags] for sel in selectors for flags in powerset(RM_FLAGS)], capsys)


def test_verify_dry_run_fixes_and_records_nothing(volume: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run_all(volume, ["verify"], powerset((["--fix"], ["--json"])), capsys)
    assert not (volume / ".last-verify.json").exists()


def test_the_same_flags_without_dry_run_do_change_the_volume(volume: Path, tmp_path: Path) -> None:
    # on a copy: proves the volume above gave every dry run something to remove, quarantine or record
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(volume, copy, symlinks=True)
    before = snapshot(copy)
    run = run_trtwarm("gc", "--cache-dir", str(copy), "--max-age", "0s", "--quarantine-grace", "0s", "--dry-run",
                      "--yes")
    assert run.returncode == 0 and "nothing removed: --dry-run" in run.stdout, run.stderr
    assert snapshot(copy) == before
    run = run_trtwarm("gc", "--cache-dir", str(copy), "--max-age", "0s", "--quarantine-grace", "0s", "--yes")
    assert run.returncode == 0, run.stderr
    assert len(entries(copy)) == 1  # the one in use stays
    assert not any((copy / ".quarantine").iterdir()) and not any((copy / ".staging").iterdir())
    run = run_trtwarm("rm", *[p.name for p in entries(copy)], "--cache-dir", str(copy), "--yes", "--force")
    assert run.returncode == 0 and entries(copy) == [], run.stderr
