"""What a review of the merged features found, as an attacker who can write the hand-off directory (the server's
container shares it), a seed tier, the volume or Triton's repository: each with real files, links and FIFOs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import entries, ort_init_args, run_trtwarm


def _signed(model: Path, cache: Path, tmp_path: Path) -> Path:
    """A cache with one entry signed by a new key; the enforce policy trusting it: the policy's path."""
    assert run_trtwarm("keys", "generate", "--out", str(tmp_path / "k")).returncode == 0
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"mode": "enforce", "keys": [{"name": "k", "public_key_file": "k.pub"}]}))
    built = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h0", "--signing-key", str(tmp_path / "k.key")))
    assert built.returncode == 0, built.stderr
    return policy


def _victim(tmp_path: Path) -> tuple[Path, set[str]]:
    victim = tmp_path / "victim"
    (victim / "keep-me").mkdir(parents=True)
    (victim / "keep-me" / "data").write_text("precious")
    (victim / "also.txt").write_text("precious")
    return victim, {str(p.relative_to(victim)) for p in victim.rglob("*")}


def test_a_seed_tier_on_a_writable_mount_is_copied_under_enforce_not_linked(model: Path, tmp_path: Path) -> None:
    """A seed tier is handed over in place only on a read-only mount (an image volume): a writable one could be
    rewritten after the check, so under enforce the server gets this Pod's verified copy."""
    seed = tmp_path / "seed"
    policy = _signed(model, seed, tmp_path)
    run = run_trtwarm(*ort_init_args(model, tmp_path / "empty", tmp_path / "h", "--trust-policy", str(policy),
                                     "--read-only", "--seed-cache", str(seed)))
    assert run.returncode == 0 and run.summary["result"] == "hit", run.stderr
    engine = os.readlink(tmp_path / "h" / "engine")
    assert engine.startswith(str(tmp_path / "h" / "copies")), engine  # not a link into the writable seed tier
    (next((seed / "entries").iterdir()) / "model.ort.onnx").write_bytes(b"rewritten after the check")
    assert Path(engine).read_bytes() != b"rewritten after the check"


def test_a_link_at_the_handoff_copies_is_refused_and_the_shared_cache_survives(model: Path, tmp_path: Path) -> None:
    """A writer of the hand-off directory points ``copies`` at the shared cache's entries: the copy and the pruning
    of earlier copies must never follow it (they deleted every entry of the volume)."""
    cache = tmp_path / "cache"
    policy = _signed(model, cache, tmp_path)
    before = entries(cache)
    handoff = tmp_path / "h"
    handoff.mkdir()
    (handoff / "copies").symlink_to(cache / "entries")
    run = run_trtwarm(*ort_init_args(model, cache, handoff, "--trust-policy", str(policy), "--read-only"))
    assert run.returncode == 9, run.stderr
    assert "copies" in run.stderr and "symlink" in run.stderr and "Traceback" not in run.stderr
    assert entries(cache) == before
    victim, tree = _victim(tmp_path)
    (handoff / "copies").unlink()
    (handoff / "copies").symlink_to(victim)
    assert run_trtwarm(*ort_init_args(model, cache, handoff, "--trust-policy", str(policy),
                                      "--read-only")).returncode == 9
    assert {str(p.relative_to(victim)) for p in victim.rglob("*")} == tree


@pytest.mark.parametrize("where", ["manifest", "version"])
def test_a_fifo_on_the_volume_never_blocks_a_reader(model: Path, tmp_path: Path, where: str) -> None:
    """``mkfifo`` by a writer of the volume: opening it for reading would wait for a writer forever. Every reader
    answers, within seconds: the entry is damaged, the volume unusable."""
    cache = tmp_path / "cache"
    assert run_trtwarm(*ort_init_args(model, cache, tmp_path / "h0")).returncode == 0
    (entry,) = (cache / "entries").iterdir()
    target = entry / "manifest.json" if where == "manifest" else cache / "VERSION"
    target.unlink()
    os.mkfifo(target)
    for args in (["ls", "--cache-dir", str(cache)], ["verify", "--cache-dir", str(cache)],
                 ["show", entry.name, "--cache-dir", str(cache)], ort_init_args(model, cache, tmp_path / "h1")):
        run = run_trtwarm(*args, timeout=60)
        assert run.returncode != 1 and "Traceback" not in run.stderr, (args[0], run.stderr)
        if where == "version":
            assert run.returncode == 6, (args[0], run.stderr)


def test_a_link_in_the_triton_repository_is_refused(model: Path, tmp_path: Path) -> None:
    victim, tree = _victim(tmp_path)
    repo = tmp_path / "triton"
    repo.mkdir()
    (repo / "demo").symlink_to(victim)
    run = run_trtwarm(*ort_init_args(model, tmp_path / "cache", tmp_path / "h", "--triton-repo", str(repo),
                                     "--triton-model", "demo"))
    assert run.returncode == 9 and "Traceback" not in run.stderr, run.stderr
    assert {str(p.relative_to(victim)) for p in victim.rglob("*")} == tree


def test_a_nul_in_a_matrix_row_is_a_usage_error(tmp_path: Path) -> None:
    matrix = tmp_path / "m.json"
    matrix.write_text(json.dumps({"models": [{"model": "\u0000x"}]}))
    run = run_trtwarm("prewarm", "--matrix", str(matrix), "--remote", "s3://bucket/p", "--cache-dir",
                      str(tmp_path / "c"))
    assert run.returncode == 2 and "NUL" in run.stderr, run.stderr
