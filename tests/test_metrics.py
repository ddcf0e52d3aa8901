"""The scrape-time collector on real hand-off dirs and volumes written by real ``trtwarm init`` runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cmd_init_args, run_trtwarm

from trtwarm.sidecar.metrics import RESULTS, VolumeWatcher, registry
from trtwarm.volume.layout import Layout


def sample(reg, metric: str, **labels: str) -> float | None:  # noqa: ANN001
    return reg.get_sample_value(metric, labels)


def collect(handoff: Path, cache: Path | None = None):  # noqa: ANN201
    watcher = None
    if cache is not None:
        watcher = VolumeWatcher(Layout(cache))
        watcher.refresh()
    return registry(handoff, watcher)


def test_before_init_every_series_exists_at_zero(tmp_path: Path) -> None:
    reg, _ = collect(tmp_path / "handoff")
    assert [sample(reg, "trtwarm_init_total", result=r) for r in RESULTS] == [0.0] * len(RESULTS)
    assert sample(reg, "trtwarm_engine_ready") == 0.0
    for name in ("init_duration_seconds", "build_duration_seconds", "lock_wait_seconds", "verify_duration_seconds"):
        assert sample(reg, f"trtwarm_{name}_count") == 0.0
        assert sample(reg, f"trtwarm_{name}_bucket", le="+Inf") == 0.0
    assert sample(reg, "trtwarm_exporter_scrape_errors_total") == 0.0


def test_after_a_build_the_pod_reports_built_with_one_observation_each(model: Path, cache: Path,
                                                                        tmp_path: Path) -> None:
    handoff = tmp_path / "h"
    run = run_trtwarm(*cmd_init_args(model, cache, handoff, seconds=0.3))
    assert run.returncode == 0, run.stderr
    reg, _ = collect(handoff, cache)
    assert sample(reg, "trtwarm_init_total", result="built") == 1.0
    assert sample(reg, "trtwarm_init_total", result="hit") == 0.0
    assert sample(reg, "trtwarm_engine_ready") == 1.0
    assert sample(reg, "trtwarm_engine_size_bytes") == model.stat().st_size
    assert sample(reg, "trtwarm_build_duration_seconds_count") == 1.0
    assert sample(reg, "trtwarm_build_duration_seconds_sum") >= 0.3
    assert sample(reg, "trtwarm_build_duration_seconds_bucket", le="0.25") == 0.0
    assert sample(reg, "trtwarm_build_duration_seconds_bucket", le="0.5") == 1.0
    info = json.loads((handoff / "engine.json").read_text())
    assert sample(reg, "trtwarm_engine_info", key=info["key"][:16], name=info["name"], builder="command",
                  builder_version="test-1", device=f"cpu-{info['device']['arch']}", precision="model") == 1.0
    assert sample(reg, "trtwarm_cache_entries") == 1.0
    assert sample(reg, "trtwarm_cache_size_bytes") > model.stat().st_size


def test_a_hit_observes_no_build_and_a_removed_engine_is_not_ready(model: Path, cache: Path, tmp_path: Path) -> None:
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")).returncode == 0
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2")).returncode == 0
    reg, _ = collect(tmp_path / "h2")
    assert sample(reg, "trtwarm_init_total", result="hit") == 1.0
    assert sample(reg, "trtwarm_build_duration_seconds_count") == 0.0
    assert sample(reg, "trtwarm_lock_wait_seconds_count") == 0.0
    assert sample(reg, "trtwarm_verify_duration_seconds_count") == 1.0
    engine = Path(json.loads((tmp_path / "h2" / "engine.json").read_text())["path"])
    engine.unlink()
    reg, _ = collect(tmp_path / "h2")
    assert sample(reg, "trtwarm_engine_ready") == 0.0


def test_a_failed_init_counts_error_and_is_not_ready(model: Path, cache: Path, tmp_path: Path) -> None:
    args = cmd_init_args(model, cache, tmp_path / "h")
    args[args.index("--build-command") + 1] = "sh -c 'exit 3' {output}"
    assert run_trtwarm(*args).returncode == 4
    reg, _ = collect(tmp_path / "h")
    assert sample(reg, "trtwarm_init_total", result="error") == 1.0
    assert sample(reg, "trtwarm_engine_ready") == 0.0
    assert sample(reg, "trtwarm_init_duration_seconds_count") == 0.0


@pytest.mark.parametrize("content", [b"", b"{\"ready\": tr", b"\x00\xff garbage", b"[1, 2]",
                                     b'{"ready": true, "result": "hit", "seconds": "soon", "path": 7}'])
def test_partial_or_garbage_engine_json_still_serves_metrics_with_ready_0(tmp_path: Path, content: bytes) -> None:
    handoff = tmp_path / "h"
    handoff.mkdir()
    (handoff / "engine.json").write_bytes(content)
    reg, _ = collect(handoff)
    assert sample(reg, "trtwarm_engine_ready") == 0.0
    assert sample(reg, "trtwarm_init_total", result="built") == 0.0


def test_volume_summary_counts_entries_quarantine_and_builds(model: Path, cache: Path, tmp_path: Path) -> None:
    for tag in ("a", "b", "c"):
        assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / tag, "--key-extra", f"t={tag}")).returncode == 0
    bad = next((cache / "entries").iterdir())
    (bad / "engine.plan").write_bytes(b"truncated")
    assert run_trtwarm("verify", "--cache-dir", str(cache), "--fix").returncode == 0
    reg, _ = collect(tmp_path / "a", cache)
    assert sample(reg, "trtwarm_cache_entries") == 2.0
    assert sample(reg, "trtwarm_cache_quarantined_entries") == 1.0
    assert sample(reg, "trtwarm_cache_builds_in_progress") == 0.0
    assert 0.0 <= sample(reg, "trtwarm_cache_oldest_use_age_seconds") < 120
    assert [sample(reg, "trtwarm_cache_evictions_total", reason=r) for r in ("age", "size", "quarantine")] == [0.0] * 3


def test_an_unusable_volume_still_answers_and_counts_the_error(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "entries").write_text("a file where the entries directory should be")
    reg, _ = collect(tmp_path / "h", cache)
    assert sample(reg, "trtwarm_exporter_scrape_errors_total") == 1.0
    assert sample(reg, "trtwarm_engine_ready") == 0.0
    assert sample(reg, "trtwarm_cache_entries") is None  # unknown is absent, not a made-up 0
