"""Bad input: a clear one-line error, the right exit code, no traceback, nothing half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Run, cmd_init_args, debris, entries, ort_init_args, run_trtwarm
from trtwarm.cli.demo import make_model


def assert_clean_failure(run: Run, code: int, words: str, cache: Path | None = None) -> None:
    assert run.returncode == code, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr
    assert words.lower() in run.stderr.lower(), run.stderr
    assert "hint:" in run.stderr
    if cache is not None:
        assert entries(cache) == [] and debris(cache) == []


@pytest.mark.parametrize(("content", "words"), [
    (None, "does not exist"),
    ("dir", "not a regular file"),
    (b"", "empty"),
    (b"\x00garbage\xff" * 100, "not an onnx"),
    (b"hello world, not a model\n", "not an onnx"),
])
def test_unusable_model_exits_3(tmp_path: Path, cache: Path, content: bytes | str | None, words: str) -> None:
    path = tmp_path / "model.onnx"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    run = run_trtwarm(*ort_init_args(path, cache, tmp_path / "h"))
    assert_clean_failure(run, 3, words, cache)


def test_missing_external_data_exits_3(tmp_path: Path, cache: Path) -> None:
    model = make_model(tmp_path / "m" / "ext.onnx", external=True)
    (model.parent / "ext.weights").unlink()
    assert_clean_failure(run_trtwarm(*ort_init_args(model, cache, tmp_path / "h")), 3, "missing", cache)


def test_truncated_external_data_exits_3(tmp_path: Path, cache: Path) -> None:
    model = make_model(tmp_path / "m" / "ext.onnx", external=True)
    weights = model.parent / "ext.weights"
    weights.write_bytes(weights.read_bytes()[:100])
    assert_clean_failure(run_trtwarm(*ort_init_args(model, cache, tmp_path / "h")), 3, "truncated", cache)


@pytest.mark.parametrize(("shape", "words"), [
    ("pixels=1x16:8x16:32x16", "does not have"),
    ("input=1x16:8x16", "malformed"),
    ("input=1x16:eightx16:32x16", "malformed"),
    ("input=8x16:1x16:32x16", "min <= opt <= max"),
    ("input=1x16:8x16:4x16", "min <= opt <= max"),
    ("input=1x15:8x15:32x15", "fixed to 16"),
    ("input=1x16x1:8x16x1:32x16x1", "rank"),
])
def test_bad_shape_exits_2(model: Path, cache: Path, tmp_path: Path, shape: str, words: str) -> None:
    run = run_trtwarm("init", "--builder", "onnxruntime", "--model", str(model), "--cache-dir", str(cache),
                      "--handoff-dir", str(tmp_path / "h"), "--shape", shape)
    assert_clean_failure(run, 2, words, cache)


def test_unknown_builder_exits_2(model: Path, cache: Path, tmp_path: Path) -> None:
    run = run_trtwarm("init", "--builder", "tvm", "--model", str(model), "--cache-dir", str(cache))
    assert_clean_failure(run, 2, "unknown builder", cache)


def test_tensorrt_builder_without_tensorrt_exits_2_with_install_hint(model: Path, cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    if shutil.which("trtexec"):
        pytest.skip("TensorRT is installed here")
    run = run_trtwarm("init", "--model", str(model), "--cache-dir", str(cache), "--handoff-dir", str(tmp_path / "h"))
    assert_clean_failure(run, 2, "tensorrt", cache)
    assert "pip install 'trtwarm[tensorrt]'" in run.stderr


def test_cache_dir_that_is_a_file_exits_6(model: Path, tmp_path: Path) -> None:
    target = tmp_path / "cachefile"
    target.write_text("not a dir")
    run = run_trtwarm(*ort_init_args(model, target, tmp_path / "h"))
    assert_clean_failure(run, 6, "not a directory")
    assert target.read_text() == "not a dir"


def test_cache_dir_that_cannot_be_created_exits_6(model: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    run = run_trtwarm(*ort_init_args(model, tmp_path / "file" / "cache", tmp_path / "h"))
    assert_clean_failure(run, 6, "not a directory")


def test_foreign_layout_version_is_refused_not_rewritten(model: Path, cache: Path, tmp_path: Path) -> None:
    cache.mkdir()
    (cache / "VERSION").write_text("99\n")
    assert_clean_failure(run_trtwarm(*ort_init_args(model, cache, tmp_path / "h")), 6, "layout version")
    assert (cache / "VERSION").read_text() == "99\n"


def test_failing_build_command_exits_4_with_its_output(model: Path, cache: Path, tmp_path: Path) -> None:
    args = cmd_init_args(model, cache, tmp_path / "h")
    args[args.index("--build-command") + 1] = "sh -c 'echo parser error at node 7 >&2; exit 3' {output}"
    term = tmp_path / "term"
    term.write_text("")
    run = run_trtwarm(*args, env={"TRTWARM_TERMINATION_LOG": str(term)})
    assert_clean_failure(run, 4, "exited with status 3", cache)
    assert "parser error at node 7" in run.stderr and "parser error at node 7" in term.read_text()
    report = json.loads((tmp_path / "h" / "engine.json").read_text())  # what the sidecar reads: not ready, why
    assert report["ready"] is False and report["result"] == "error" and report["exit_code"] == 4
    assert not (tmp_path / "h" / "engine").exists()


def test_build_command_that_writes_nothing_exits_4(model: Path, cache: Path, tmp_path: Path) -> None:
    args = cmd_init_args(model, cache, tmp_path / "h")
    args[args.index("--build-command") + 1] = "sh -c 'echo {output} > /dev/null'"
    assert_clean_failure(run_trtwarm(*args), 4, "wrote no engine", cache)


def test_build_command_without_version_exits_2(model: Path, cache: Path, tmp_path: Path) -> None:
    args = cmd_init_args(model, cache, tmp_path / "h")
    del args[args.index("--builder-version"):args.index("--builder-version") + 2]
    assert_clean_failure(run_trtwarm(*args), 2, "--builder-version", cache)


@pytest.mark.parametrize("name", ["../../etc", "..", "a/b\\c d$(reboot).onnx", "ÜNICODE ☃"])
def test_hostile_model_names_stay_inside_the_cache(tmp_path: Path, cache: Path, name: str) -> None:
    model = make_model(tmp_path / "m" / "model.onnx")
    run = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h", "--name", name))
    assert run.returncode == 0, run.stderr
    [entry] = entries(cache)
    assert entry.parent == cache / "entries"
    assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in entry.name)
    assert not entry.name.startswith(".")


def test_a_hand_off_directory_on_the_cache_volume_is_refused_and_nothing_is_written_there(
        model: Path, cache: Path, tmp_path: Path) -> None:
    """Its ``engine`` link decides what the server loads, so a volume writer must not control it: exit 2, and not
    even the failure record lands there."""
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h")).returncode == 0  # a cache to aim at
    run = run_trtwarm(*cmd_init_args(model, cache, cache / "handoff"))
    assert_clean_failure(run, 2, "is on the cache volume")
    assert not (cache / "handoff").exists() and json.loads(run.stdout)["exit_code"] == 2


@pytest.mark.parametrize(("argv", "words"), [
    (["--progress-interval", "0"], "--progress-interval '0' is zero"),
    (["--lock-timeout", "0s"], "--lock-timeout '0s' is zero"),
    (["--events-timeout", "0"], "--events-timeout '0' is zero"),
    (["--lock-timeout=-5s"], "invalid duration --lock-timeout '-5s'"),
    (["--progress-interval", "99999999999d"], "longer than"),
])
def test_an_interval_or_timeout_of_zero_is_refused_with_exit_2(model: Path, cache: Path, tmp_path: Path,
                                                               argv: list[str], words: str) -> None:
    """`--progress-interval 0` once printed 44,930 lines in 5 s: a busy loop, never what was meant."""
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", *argv), timeout=30)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not cache.exists()  # refused before anything was created


@pytest.mark.parametrize(("argv", "words"), [
    (["sidecar", "--scan-interval", "0"], "--scan-interval '0' is zero"),
    (["sidecar", "--lease-interval", "0s"], "--lease-interval '0s' is zero"),
    (["sidecar", "--gc-interval", "0m", "--gc-max-age", "1d"], "--gc-interval '0m' is zero"),
    (["sidecar", "--gc-interval", "1h", "--gc-keep-per-model", "0"], "--gc-keep-per-model 0 would remove every"),
    (["gc", "--keep-per-model", "0", "--yes"], "--keep-per-model 0 would remove every entry no Pod holds"),
])
def test_sidecar_and_gc_values_that_cannot_mean_anything_exit_2(model: Path, cache: Path, tmp_path: Path,
                                                                argv: list[str], words: str) -> None:
    """Nothing is removed and no busy loop starts: the sidecar exits at once instead of serving."""
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"))
    assert built.returncode == 0, built.stderr
    run = run_trtwarm(*argv, "--cache-dir", str(cache), "--handoff-dir", str(tmp_path / "h"), timeout=30) \
        if argv[0] == "sidecar" else run_trtwarm(*argv, "--cache-dir", str(cache), timeout=30)
    assert run.returncode == 2 and words in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len(list((cache / "entries").iterdir())) == 1
