"""One damaged entry is that entry's problem: ``ls``, ``verify`` and ``gc`` report it and go on with the rest; ``ls``
shows damage the way ``verify`` finds it without hashing (manifest and size checks, plus the last verification's
findings) and says how to check deeply."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Run, cmd_init_args, entries, env_for, run_trtwarm, trtwarm_argv

NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]  # root, but chmod applies to it


def build(model: Path, cache: Path, tmp_path: Path, tag: str) -> str:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{tag}", "--key-extra", f"tag={tag}"))
    assert run.returncode == 0, run.stderr
    return str(run.summary["name"])


def run_no_dac(*args: str) -> Run:
    proc = subprocess.run([*NO_DAC, *trtwarm_argv(*args)], capture_output=True, text=True, env=env_for(),
                          timeout=120, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def damaged(model: Path, cache: Path, tmp_path: Path) -> dict[str, str]:
    """Two good entries, one unreadable (chmod 000), a file and a symlink loop where entries should be."""
    names = {tag: build(model, cache, tmp_path, tag) for tag in ("good1", "good2", "locked")}
    (cache / "entries" / names["locked"]).chmod(0)
    (cache / "entries" / "stray--0123456789abcdef").write_text("a file, not an entry\n")
    (cache / "entries" / "loop--fedcba9876543210").symlink_to("loop--fedcba9876543210")
    yield names
    (cache / "entries" / names["locked"]).chmod(0o755)


def _status(listing: list[dict], name: str) -> tuple[str, str | None]:
    row = next(r for r in listing if r["name"] == name)
    return row["status"], row["problem"]


def test_ls_verify_gc_go_on_past_unreadable_and_foreign_entries(cache: Path, damaged: dict[str, str]) -> None:
    ls = run_no_dac("ls", "--cache-dir", str(cache), "--json")
    assert ls.returncode == 8 and "3 of the entries listed are damaged" in ls.stderr, ls.stderr  # the rest answered
    rows = json.loads(ls.stdout)
    assert _status(rows, damaged["good1"]) == ("ok", None) and _status(rows, damaged["good2"]) == ("ok", None)
    assert _status(rows, damaged["locked"]) == ("damaged", "its directory is unreadable (Permission denied)")
    assert _status(rows, "stray--0123456789abcdef") == ("damaged", "not a directory")
    assert _status(rows, "loop--fedcba9876543210") == ("damaged", "a symbolic link, not a directory")

    verify = run_no_dac("verify", "--cache-dir", str(cache), "--json")
    assert verify.returncode == 8 and "Traceback" not in verify.stderr, verify.stderr
    report = json.loads(verify.stdout)
    assert report["checked"] == 5
    assert sorted(Path(p["path"]).name for p in report["problems"]) == sorted(
        [damaged["locked"], "stray--0123456789abcdef", "loop--fedcba9876543210"])

    gc = run_no_dac("gc", "--cache-dir", str(cache), "--max-age", "30d", "--yes")
    assert gc.returncode == 0 and "Traceback" not in gc.stderr, gc.stderr
    assert sorted(p.name for p in entries(cache)) == sorted([*damaged.values(), "stray--0123456789abcdef",
                                                             "loop--fedcba9876543210"])
    # moving a directory needs write permission on it: this user can quarantine the file and the link only, and
    # the repair it was asked for failed on the volume: exit 6, naming the entry, after fixing what it could
    fixed = run_no_dac("verify", "--cache-dir", str(cache), "--fix")
    assert fixed.returncode == 6 and "2 fixed" in fixed.stdout, fixed.stdout + fixed.stderr
    assert f"cannot repair {cache / 'entries' / damaged['locked']}: permission denied" in fixed.stderr
    assert "hint: " in fixed.stderr
    (cache / "entries" / damaged["locked"]).chmod(0o755)  # the operator fixes the mode: the entry is whole again
    fixed = run_no_dac("verify", "--cache-dir", str(cache), "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert sorted(p.name for p in entries(cache)) == sorted(damaged.values())
    assert len(list((cache / ".quarantine").iterdir())) == 2


def test_ls_shows_truncation_at_once_and_corruption_after_verify(model: Path, cache: Path, tmp_path: Path) -> None:
    corrupt, truncated, good = (build(model, cache, tmp_path, tag) for tag in ("corrupt", "truncated", "good"))
    engine = cache / "entries" / corrupt / "engine.plan"
    engine.write_bytes(b"X" + engine.read_bytes()[1:])  # same size: only hashing finds it
    (cache / "entries" / truncated / "engine.plan").write_bytes(b"short")

    ls = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "name,status")
    assert ls.returncode == 8 and "1 of the entries listed is damaged" in ls.stderr, ls.stderr
    line = {row.split()[0]: row for row in ls.stdout.splitlines() if row.startswith("mlp")}
    assert "damaged: engine file is 5 bytes" in line[truncated] and "(truncated)" in line[truncated]
    assert line[corrupt].rstrip().endswith("ok") and line[good].rstrip().endswith("ok")
    assert "`trtwarm verify` re-hashes every file (never run here)" in ls.stdout

    assert run_trtwarm("verify", "--cache-dir", str(cache)).returncode == 8
    ls = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "name,status")
    line = {row.split()[0]: row for row in ls.stdout.splitlines() if row.startswith("mlp")}
    assert "damaged: engine SHA-256 does not match the manifest (corrupt) (found by trtwarm verify)" in line[corrupt]
    assert line[good].rstrip().endswith("ok") and "re-hashes every file (last run " in ls.stdout
    assert json.loads(run_trtwarm("stats", "--cache-dir", str(cache), "--json").stdout)["damaged"] >= 1

    # the damaged entry is quarantined and rebuilt by the next init: the old finding no longer applies to it
    rebuilt = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h-again", "--key-extra", "tag=corrupt",
                                         "--verify", "digest"))
    assert rebuilt.returncode == 0 and rebuilt.summary["result"] == "built", rebuilt.stderr
    rows = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)
    assert _status(rows, corrupt) == ("ok", None)


def test_init_says_when_it_creates_a_new_cache_root(model: Path, cache: Path, tmp_path: Path) -> None:
    first = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    assert first.returncode == 0 and f"created a new trtwarm cache in {cache}" in first.stderr, first.stderr
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--key-extra", "x=1"))
    assert again.returncode == 0 and "created a new trtwarm cache" not in again.stderr


def test_a_hit_keeps_the_previous_handoff_as_engine_prev_json(model: Path, cache: Path, tmp_path: Path) -> None:
    handoff = tmp_path / "h"
    assert run_trtwarm(*cmd_init_args(model, cache, handoff)).returncode == 0
    first = (handoff / "engine.json").read_text()
    assert run_trtwarm(*cmd_init_args(model, cache, handoff)).returncode == 0
    assert (handoff / "engine.prev.json").read_text() == first
    assert json.loads((handoff / "engine.json").read_text())["result"] == "hit"
    assert os.path.realpath(handoff / "engine") == json.loads(first)["path"]
