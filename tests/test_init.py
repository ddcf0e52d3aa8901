"""``trtwarm init`` end to end with the onnxruntime builder: build, hit, hand-off, idempotency."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import entries, ort_init_args, run_trtwarm


def test_first_start_builds_and_second_start_hits(model: Path, cache: Path, tmp_path: Path) -> None:
    first = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h1"))
    assert first.returncode == 0, first.stderr
    assert first.summary["result"] == "built"
    second = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h2"))
    assert second.returncode == 0, second.stderr
    assert second.summary["result"] == "hit"
    assert second.summary["path"] == first.summary["path"]
    assert len(entries(cache)) == 1


def test_handoff_points_the_inference_container_at_a_verified_engine(model: Path, cache: Path, tmp_path: Path) -> None:
    handoff = tmp_path / "handoff"
    run = run_trtwarm(*ort_init_args(model, cache, handoff, "--verify", "load"))
    assert run.returncode == 0, run.stderr
    report = json.loads((handoff / "engine.json").read_text())
    assert report["result"] == "built" and report["ready"] is True
    assert set(report["seconds"]) == {"key", "wait", "build", "verify", "total"}
    assert report["builder"]["name"] == "onnxruntime" and report["device"]["kind"] == "cpu"
    engine = handoff / "engine"
    assert engine.is_symlink() and os.path.isabs(os.readlink(engine))
    assert engine.resolve() == Path(report["path"]).resolve()
    manifest = json.loads((Path(report["path"]).parent / "manifest.json").read_text())
    assert manifest["key"] == report["key"] and manifest["engine_bytes"] == engine.stat().st_size
    import onnxruntime as ort
    import numpy as np

    out = ort.InferenceSession(str(engine)).run(None, {"input": np.ones((3, 16), "float32")})
    assert out[0].shape == (3, 4)


def test_restart_is_idempotent_hit_and_rewrites_handoff(model: Path, cache: Path, tmp_path: Path) -> None:
    handoff = tmp_path / "handoff"
    assert run_trtwarm(*ort_init_args(model, cache, handoff)).returncode == 0
    again = run_trtwarm(*ort_init_args(model, cache, handoff))
    assert again.returncode == 0 and again.summary["result"] == "hit"
    assert json.loads((handoff / "engine.json").read_text())["result"] == "hit"


def test_termination_message_is_written_when_the_log_exists(model: Path, cache: Path, tmp_path: Path) -> None:
    term = tmp_path / "termination-log"
    term.write_text("")
    run = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h"), env={"TRTWARM_TERMINATION_LOG": str(term)})
    assert run.returncode == 0
    doc = json.loads(term.read_text())
    assert doc["result"] == "built" and len(term.read_bytes()) <= 4096


def test_a_long_error_with_a_build_log_still_fits_the_termination_message(tmp_path: Path) -> None:
    """Kubernetes keeps 4 KiB of a termination message: the log tail goes first, then the error is cut (this once
    looped forever when the error alone was longer than the limit, and the failing init never exited)."""
    from trtwarm.init.handoff import termination_message

    term = tmp_path / "termination-log"
    term.write_text("")
    termination_message(term, {"result": "error", "exit_code": 4, "error": "E" * 9000, "log_tail": "L" * 9000})
    doc = json.loads(term.read_text())
    assert len(term.read_bytes()) <= 4096 and doc["exit_code"] == 4 and doc["error"].startswith("EEEE")
    termination_message(term, {"result": "error", "error": "short", "log_tail": "first\n" + "L" * 9000 + "\nlast"})
    doc = json.loads(term.read_text())
    assert doc["error"] == "short" and doc["log_tail"].endswith("\nlast") and len(term.read_bytes()) <= 4096


def test_flags_can_come_from_environment(model: Path, cache: Path, tmp_path: Path) -> None:
    env = {"TRTWARM_MODEL": str(model), "TRTWARM_CACHE_DIR": str(cache), "TRTWARM_BUILDER": "onnxruntime",
           "TRTWARM_HANDOFF_DIR": str(tmp_path / "h"), "TRTWARM_SHAPE": "input=1x16:8x16:32x16"}
    run = run_trtwarm("init", env=env)
    assert run.returncode == 0, run.stderr
    assert run.summary["result"] == "built"


def test_ls_json_lists_ready_entries(model: Path, cache: Path, tmp_path: Path) -> None:
    built = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h"))
    listing = run_trtwarm("ls", "--cache-dir", str(cache), "--json")
    rows = json.loads(listing.stdout)
    assert [r["path"] for r in rows] == [built.summary["path"]]
    assert {"key", "name", "path", "engine_bytes", "created", "builder", "device"} <= set(rows[0])


def test_demo_builds_then_hits(tmp_path: Path) -> None:
    run = run_trtwarm("demo", "--workdir", str(tmp_path / "demo"))
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("run ")]
    assert "built" in lines[0] and "hit" in lines[1]
