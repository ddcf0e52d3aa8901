"""A bad entry is never handed over: it is quarantined, the init rebuilds and exits 0."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import entries, ort_init_args, run_trtwarm


def flip_byte(entry: Path) -> None:
    engine = entry / "model.ort.onnx"
    data = bytearray(engine.read_bytes())
    data[len(data) // 2] ^= 0xFF
    engine.write_bytes(bytes(data))


def truncate(entry: Path) -> None:
    engine = entry / "model.ort.onnx"
    engine.write_bytes(engine.read_bytes()[:-10])


def garbage_manifest(entry: Path) -> None:
    (entry / "manifest.json").write_bytes(b"\x00{not json")


def truncated_manifest(entry: Path) -> None:
    text = (entry / "manifest.json").read_text()
    (entry / "manifest.json").write_text(text[: len(text) // 2])


def huge_manifest(entry: Path) -> None:
    doc = json.loads((entry / "manifest.json").read_text())
    doc["padding"] = "x" * (2 << 20)
    (entry / "manifest.json").write_text(json.dumps(doc))


def missing_manifest(entry: Path) -> None:
    (entry / "manifest.json").unlink()


def other_key(entry: Path) -> None:
    doc = json.loads((entry / "manifest.json").read_text())
    doc["key"] = "0" * 64
    (entry / "manifest.json").write_text(json.dumps(doc))


def symlinked_engine(entry: Path) -> None:
    engine = entry / "model.ort.onnx"
    outside = entry.parent.parent.parent / "elsewhere.onnx"
    outside.write_bytes(engine.read_bytes())
    engine.unlink()
    os.symlink(outside, engine)


def engine_is_directory(entry: Path) -> None:
    engine = entry / "model.ort.onnx"
    engine.unlink()
    engine.mkdir()


def manifest_escapes(entry: Path) -> None:
    doc = json.loads((entry / "manifest.json").read_text())
    doc["engine_file"] = "../../../etc/passwd"
    (entry / "manifest.json").write_text(json.dumps(doc))


FAULTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "flipped byte": (flip_byte, "sha-256"),
    "truncated engine": (truncate, "truncated"),
    "garbage manifest": (garbage_manifest, "not valid json"),
    "truncated manifest": (truncated_manifest, "not valid json"),
    "huge manifest": (huge_manifest, "larger than"),
    "missing manifest": (missing_manifest, "missing"),
    "manifest for another key": (other_key, "does not hash to its key"),  # its key document names the real one
    "engine replaced by a symlink": (symlinked_engine, "symlink"),
    "engine is a directory": (engine_is_directory, "not a regular file"),
    "manifest names a path outside": (manifest_escapes, "outside the entry"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_bad_entry_is_quarantined_and_rebuilt(model: Path, cache: Path, tmp_path: Path, fault: str) -> None:
    damage, reason = FAULTS[fault]
    first = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h1"))
    assert first.returncode == 0, first.stderr
    [entry] = entries(cache)
    damage(entry)
    again = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h2"))
    assert again.returncode == 0, again.stderr
    assert again.summary["result"] == "built"
    assert reason in again.stderr.lower() and "quarantin" in again.stderr
    [quarantined] = list((cache / ".quarantine").iterdir())
    assert quarantined.name.startswith(entry.name)
    [rebuilt] = entries(cache)
    engine = tmp_path / "h2" / "engine"
    assert engine.resolve().is_file() and not (rebuilt / "model.ort.onnx").is_symlink()
    manifest = json.loads((rebuilt / "manifest.json").read_text())
    assert manifest["engine_bytes"] == engine.stat().st_size


def test_load_verification_rejects_an_engine_that_does_not_load(model: Path, cache: Path, tmp_path: Path) -> None:
    """A digest-consistent but unloadable engine (manifest rewritten to match) fails --verify load."""
    import hashlib

    assert run_trtwarm(*ort_init_args(model, cache, tmp_path / "h1")).returncode == 0
    [entry] = entries(cache)
    engine = entry / "model.ort.onnx"
    engine.write_bytes(b"not a model at all")
    doc = json.loads((entry / "manifest.json").read_text())
    doc.update(engine_sha256=hashlib.sha256(engine.read_bytes()).hexdigest(), engine_bytes=engine.stat().st_size)
    [listed] = [f for f in doc["files"] if f["role"] == "engine"]  # manifest schema 2 lists it again
    listed.update(sha256=doc["engine_sha256"], bytes=doc["engine_bytes"])
    (entry / "manifest.json").write_text(json.dumps(doc))
    digest_only = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h2"))
    assert digest_only.summary["result"] == "hit"  # the digest check alone cannot know
    checked = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h3", "--verify", "load"))
    assert checked.returncode == 0, checked.stderr
    assert checked.summary["result"] == "built" and "does not load" in checked.stderr
