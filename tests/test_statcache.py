"""Repeat key resolution reads the stat cache instead of re-hashing; a changed file is never served from it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from trtwarm.cli.demo import make_model
from trtwarm.volume.statcache import RACY_SECONDS, inspect_model, record_path


def settle(*paths: Path) -> None:
    """Let the files age past the racy window (ctime cannot be set back, so this really waits)."""
    newest = max(max(p.stat().st_mtime, p.stat().st_ctime) for p in paths)
    time.sleep(max(0.0, newest + RACY_SECONDS + 0.1 - time.time()))


def test_second_resolution_comes_from_the_stat_cache(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m.onnx", external=True)
    settle(model, tmp_path / "m.weights")
    first, memo1 = inspect_model(model, tmp_path / "stat")
    second, memo2 = inspect_model(model, tmp_path / "stat")
    assert (memo1, memo2) == (False, True)
    assert first == second and first.external[0].location == "m.weights"


def test_rewrite_with_same_size_and_mtime_is_rehashed(tmp_path: Path) -> None:
    """Restoring the old mtime does not fool it: the rewrite changed ctime."""
    model = make_model(tmp_path / "m.onnx", external=True)
    weights = tmp_path / "m.weights"
    settle(model, weights)
    before, _ = inspect_model(model, tmp_path / "stat")
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    after, memo = inspect_model(model, tmp_path / "stat")
    assert memo is False
    assert after.external[0].sha256 != before.external[0].sha256


def test_replaced_model_file_is_rehashed(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m.onnx", seed=1)
    settle(model)
    before, _ = inspect_model(model, tmp_path / "stat")
    make_model(tmp_path / "new.onnx", seed=2).replace(model)  # a new inode under the old name
    after, memo = inspect_model(model, tmp_path / "stat")
    assert memo is False and after.onnx.sha256 != before.onnx.sha256


def test_a_record_nested_too_deeply_is_ignored_not_a_crash(tmp_path: Path) -> None:
    """Anyone who can write the volume can write its ``.statcache``: a record nested 100,000 deep (which Python's
    json turns into a RecursionError, once exit 1 for every init of the model) is ignored and rewritten."""
    model = make_model(tmp_path / "m.onnx")
    settle(model)
    first, _ = inspect_model(model, tmp_path / "stat")
    record = record_path(tmp_path / "stat", model)
    for junk in (b"[" * 100_000 + b"]" * 100_000, b'{"facts": 1, "facts": 2}', b'{"stamps": NaN}'):
        record.write_bytes(junk)
        again, memo = inspect_model(model, tmp_path / "stat")
        assert memo is False and again == first
    assert inspect_model(model, tmp_path / "stat")[1] is True  # the record was rewritten


def test_freshly_written_model_is_not_memoised(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m.onnx")
    inspect_model(model, tmp_path / "stat")
    assert inspect_model(model, tmp_path / "stat")[1] is False
