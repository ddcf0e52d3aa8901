"""Manifest schema 2: every file of an entry is listed, hashed and checked, on hit and by ``trtwarm verify``.

ONNX Runtime writes ``model.ort.data`` (the external initializers) beside ``model.ort.onnx`` for a model whose
weights are external data; before schema 2 a corrupt ``model.ort.data`` was handed over as a verified hit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, ort_init_args, run_trtwarm

from trtwarm.cli.demo import make_model


@pytest.fixture
def ext_model(tmp_path: Path) -> Path:
    """A generated model with its weights in external data (``ext.weights``)."""
    return make_model(tmp_path / "models" / "ext.onnx", external=True)


def _built(model: Path, cache: Path, handoff: Path) -> Path:
    first = run_trtwarm(*ort_init_args(model, cache, handoff))
    assert first.returncode == 0, first.stderr
    [entry] = entries(cache)
    return entry


def test_every_file_of_an_ort_entry_is_listed(ext_model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(ext_model, cache, tmp_path / "h1")
    manifest = json.loads((entry / "manifest.json").read_text())
    on_disk = sorted(p.name for p in entry.iterdir() if p.name != "manifest.json")
    assert on_disk == ["model.ort.data", "model.ort.onnx"]  # what ORT writes for external initializers
    assert manifest["schema"] == 2
    assert [(f["path"], f["role"], f["bytes"]) for f in manifest["files"]] == [
        ("model.ort.data", "data", (entry / "model.ort.data").stat().st_size),
        ("model.ort.onnx", "engine", (entry / "model.ort.onnx").stat().st_size)]
    assert manifest["engine_file"] == "model.ort.onnx"  # schema-1 readers still find the engine
    report = json.loads((tmp_path / "h1" / "engine.json").read_text())
    assert sorted(Path(p).name for p in report["files"]) == ["model.ort.data", "model.ort.onnx"]


def test_corrupt_side_file_is_caught_by_verify_and_on_hit(ext_model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(ext_model, cache, tmp_path / "h1")
    data = entry / "model.ort.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size: only the digest can tell
    data.write_bytes(bytes(raw))
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--json")
    assert verify.returncode == 8
    [problem] = json.loads(verify.stdout)["problems"]
    assert problem["kind"] == "corrupt" and "model.ort.data" in problem["detail"]
    again = run_trtwarm(*ort_init_args(ext_model, cache, tmp_path / "h2", "--verify", "load"))
    assert again.returncode == 0, again.stderr
    assert again.summary["result"] == "built"
    assert "model.ort.data SHA-256 does not match" in again.stderr and "quarantin" in again.stderr
    [quarantined] = list((cache / ".quarantine").iterdir())
    assert (quarantined / "model.ort.data").read_bytes() == bytes(raw)  # kept for inspection, not lost
    assert run_trtwarm("verify", "--cache-dir", str(cache)).returncode == 0


def test_an_unlisted_file_is_damage(ext_model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(ext_model, cache, tmp_path / "h1")
    (entry / "plugin.so").write_bytes(b"\x7fELF dropped in by someone")
    [row] = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)  # the manifest-reading scan
    assert (row["status"], row["problem"]) == ("damaged", "unlisted file plugin.so (not in manifest.json)")
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--json")
    assert verify.returncode == 8 and "unlisted file plugin.so" in verify.stdout
    again = run_trtwarm(*ort_init_args(ext_model, cache, tmp_path / "h2"))
    assert again.returncode == 0 and again.summary["result"] == "built", again.stderr
    assert "unlisted file plugin.so" in again.stderr


def _as_schema_1(entry: Path) -> None:
    """Rewrite the manifest as trtwarm before schema 2 wrote it: no files list."""
    doc = json.loads((entry / "manifest.json").read_text())
    doc["schema"] = 1
    del doc["files"]
    (entry / "manifest.json").write_text(json.dumps(doc))


def test_schema_1_entry_of_one_file_is_still_a_hit(model: Path, cache: Path, tmp_path: Path) -> None:
    first = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    assert first.returncode == 0, first.stderr
    [entry] = entries(cache)
    _as_schema_1(entry)
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2"))
    assert again.returncode == 0 and again.summary["result"] == "hit", again.stderr
    assert run_trtwarm("verify", "--cache-dir", str(cache)).returncode == 0


def test_schema_1_entry_with_a_side_file_is_rebuilt(ext_model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(ext_model, cache, tmp_path / "h1")
    _as_schema_1(entry)  # its model.ort.data was never hashed: it cannot be verified
    again = run_trtwarm(*ort_init_args(ext_model, cache, tmp_path / "h2"))
    assert again.returncode == 0 and again.summary["result"] == "built", again.stderr
    assert "schema-1 manifest does not cover model.ort.data" in again.stderr
    [rebuilt] = entries(cache)
    assert json.loads((rebuilt / "manifest.json").read_text())["schema"] == 2
    assert len(list((cache / ".quarantine").iterdir())) == 1  # the old one is kept, not lost


def test_a_manifest_listing_a_path_outside_the_entry_is_refused(model: Path, cache: Path, tmp_path: Path) -> None:
    first = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    assert first.returncode == 0, first.stderr
    [entry] = entries(cache)
    doc = json.loads((entry / "manifest.json").read_text())
    doc["files"].append({"path": "../../models/mlp.onnx", "role": "data", "bytes": 1, "sha256": "0" * 64})
    (entry / "manifest.json").write_text(json.dumps(doc))
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2"))
    assert again.returncode == 0 and again.summary["result"] == "built", again.stderr
    assert "unsafe path '../../models/mlp.onnx'" in again.stderr


def test_readiness_checks_every_file(ext_model: Path, cache: Path, tmp_path: Path) -> None:
    from trtwarm.init import handoff
    from trtwarm.sidecar.metrics import engine_ready

    entry = _built(ext_model, cache, tmp_path / "h1")
    assert engine_ready(handoff.read(tmp_path / "h1"))[0]
    with open(entry / "model.ort.data", "r+b") as handle:
        handle.truncate(10)
    ready, why = engine_ready(handoff.read(tmp_path / "h1"))
    assert not ready and "model.ort.data is 10 bytes" in why
