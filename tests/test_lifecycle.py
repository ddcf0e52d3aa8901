"""Lifecycle commands on volumes filled by real ``trtwarm init`` runs: ls, stats, verify, gc, rm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, gated_build, run_trtwarm, wait_until

from trtwarm.key import sanitize
from trtwarm.volume.entry import check_entry

DAY = 86400.0


def build(model: Path, cache: Path, tmp_path: Path, tag: str, *extra: str) -> dict:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{tag}", "--key-extra", f"tag={tag}", *extra))
    assert run.returncode == 0, run.stderr
    return run.summary


def age_leases(cache: Path, seconds: float = 3600) -> None:
    """Make every lease as old as a Pod that died *seconds* ago (leases' mtime is their heartbeat)."""
    for lease in (cache / ".leases").rglob("*.json"):
        old = time.time() - seconds
        os.utime(lease, (old, old))


def set_last_use(cache: Path, key16: str, days_ago: float) -> None:
    """Record a last use *days_ago* (what a hit then would have left in ``.uses/``)."""
    marker = next(p for p in (cache / ".uses").iterdir() if p.name.startswith(key16))
    when = time.time() - days_ago * DAY
    os.utime(marker, (when, when))


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file()}


def dead_staging(cache: Path, key16: str) -> Path:
    """A staging directory as a builder on this host leaves it when SIGKILLed (its pid is gone)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = cache / ".staging" / f"{key16}.{sanitize(os.uname().nodename, 32).replace('.', '-')}.{dead.pid}.beef"
    path.mkdir(parents=True)
    return path


def names(cache: Path) -> set[str]:
    return {p.name for p in entries(cache)}


@pytest.fixture
def three(model: Path, cache: Path, tmp_path: Path) -> list[dict]:
    """Three entries used 40, 20 and 1 days ago, their Pods long gone."""
    built = [build(model, cache, tmp_path, t) for t in ("old", "mid", "new")]
    for summary, days in zip(built, (40, 20, 1)):
        set_last_use(cache, summary["key"], days)
    age_leases(cache)
    return built


def test_gc_max_age_removes_only_entries_unused_for_longer(three: list[dict], cache: Path) -> None:
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--max-age", "30d", "--yes")
    assert run.returncode == 0, run.stderr
    assert names(cache) == {three[1]["name"], three[2]["name"]}
    assert "age" in run.stdout


def test_gc_byte_budget_evicts_least_recently_used_by_recorded_use_not_atime(three: list[dict], cache: Path) -> None:
    oldest = Path(three[0]["path"])
    os.utime(oldest, (time.time(), oldest.stat().st_mtime))  # a backup tool read it just now: atime means nothing
    one = max(json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout), key=lambda r: r["bytes"])
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--max-bytes", str(one["bytes"]), "--yes", "--json")
    doc = json.loads(run.stdout)
    assert [a["name"] for a in doc["removed"]] == [three[0]["name"], three[1]["name"]]
    assert {a["reason"] for a in doc["removed"]} == {"size"}
    assert names(cache) == {three[2]["name"]}


def test_gc_keeps_entries_with_a_fresh_lease(model: Path, cache: Path, tmp_path: Path) -> None:
    live = build(model, cache, tmp_path, "live")  # its init just took a lease, as its sidecar would keep doing
    set_last_use(cache, live["key"], 90)
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--max-age", "1d", "--max-bytes", "0", "--yes")
    assert run.returncode == 0
    assert names(cache) == {live["name"]}
    assert "keep " + live["name"] + ": in use: leased by" in run.stdout


def test_dry_run_and_non_interactive_without_yes_change_nothing(three: list[dict], cache: Path) -> None:
    before = tree(cache)
    dry = run_trtwarm("gc", "--cache-dir", str(cache), "--max-age", "1s", "--max-bytes", "0", "--dry-run")
    assert dry.returncode == 0 and "plan: remove 3" in dry.stdout
    asked = subprocess.run([sys.executable, "-m", "trtwarm", "gc", "--cache-dir", str(cache), "--max-age", "1s"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    assert asked.returncode == 0 and "pass --yes" in asked.stdout
    assert tree(cache) == before


def test_gc_never_touches_a_build_in_progress(model: Path, cache: Path, tmp_path: Path) -> None:
    proc, gate = gated_build(model, cache, tmp_path)
    wait_until(lambda: (cache / ".staging").is_dir() and any((cache / ".staging").iterdir()), what="build started")
    listing = run_trtwarm("ls", "--cache-dir", str(cache))
    assert "building" in listing.stdout and "1 building" in listing.stdout
    gc = run_trtwarm("gc", "--cache-dir", str(cache), "--max-age", "0s", "--max-bytes", "0", "--yes")
    assert gc.returncode == 0
    gate.unlink()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["result"] == "built"
    check_entry(entries(cache)[0], None)


def test_concurrent_hits_during_gc_never_hand_over_a_removed_engine(model: Path, cache: Path, tmp_path: Path) -> None:
    first = build(model, cache, tmp_path, "race")
    for i in range(20):
        age_leases(cache)
        set_last_use(cache, first["key"], 90)
        handoff = tmp_path / f"race-{i}"
        args = cmd_init_args(model, cache, handoff, "--key-extra", "tag=race")
        init = subprocess.Popen([sys.executable, "-m", "trtwarm", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        gc = subprocess.run([sys.executable, "-m", "trtwarm", "gc", "--cache-dir", str(cache), "--max-age", "1d",
                             "--yes"], capture_output=True, text=True, check=False)
        out, err = init.communicate(timeout=60)
        assert init.returncode == 0 and gc.returncode == 0, err + gc.stderr
        # waited: the init missed while the entry sat in .trash, then found it under the key's lock after gc put it
        # back on seeing the init's lease. Any of the three hands over a whole engine.
        assert json.loads(out.strip().splitlines()[-1])["result"] in ("hit", "built", "waited")
        engine = handoff / "engine"
        assert engine.resolve().is_file(), f"round {i}: the hand-off points at a removed engine"
        check_entry(engine.resolve().parent, None)
    assert not (cache / ".trash").exists() or not any((cache / ".trash").iterdir())


def test_quarantined_entries_go_after_the_grace_period_and_stale_staging_with_them(three: list[dict], cache: Path,
                                                                                    tmp_path: Path) -> None:
    q = cache / ".quarantine"
    q.mkdir(exist_ok=True)
    (q / "old.20260101T000000Z.corrupt.ab12").mkdir()
    (q / "old.20260101T000000Z.corrupt.ab12" / "engine.plan").write_bytes(b"x" * 100)
    fresh = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (q / f"new.{fresh}.corrupt.cd34").mkdir()
    staging = dead_staging(cache, three[0]["key"])
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--yes", "--json")
    removed = {(a["name"], a["reason"]) for a in json.loads(run.stdout)["removed"]}
    assert removed == {("old.20260101T000000Z.corrupt.ab12", "quarantine"), (staging.name, "staging")}
    assert [p.name for p in q.iterdir()] == [f"new.{fresh}.corrupt.cd34"]
    assert len(entries(cache)) == 3


def test_keep_per_model_keeps_the_most_recently_used(three: list[dict], cache: Path) -> None:
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--keep-per-model", "1", "--yes", "--json")
    assert {a["reason"] for a in json.loads(run.stdout)["removed"]} == {"count"}
    assert names(cache) == {three[2]["name"]}


def flip(entry: Path) -> None:
    engine = entry / "engine.plan"
    data = bytearray(engine.read_bytes())
    data[len(data) // 2] ^= 0xFF
    engine.write_bytes(bytes(data))


FAULTS = {
    "corrupt": flip,
    "truncated": lambda e: (e / "engine.plan").write_bytes((e / "engine.plan").read_bytes()[:-7]),
    "orphaned": lambda e: (e / "manifest.json").unlink(),
    "bad-manifest": lambda e: (e / "manifest.json").write_bytes(b"{garbage"),
}


def test_verify_finds_each_planted_fault_and_fix_repairs_it(model: Path, cache: Path, tmp_path: Path) -> None:
    built = {kind: build(model, cache, tmp_path, kind) for kind in [*FAULTS, "good"]}
    for kind, plant in FAULTS.items():
        plant(Path(built[kind]["path"]).parent)
    dead_staging(cache, built["good"]["key"])
    clean_before = run_trtwarm("verify", "--cache-dir", str(cache), "--json")
    assert clean_before.returncode == 8
    found = {(Path(p["path"]).name, p["kind"]) for p in json.loads(clean_before.stdout)["problems"]}
    assert {(built[k]["name"], k) for k in FAULTS} <= found
    assert any(kind == "stale-staging" for _, kind in found)
    assert built["good"]["name"] not in {name for name, _ in found}
    fixed = run_trtwarm("verify", "--cache-dir", str(cache), "--fix")
    assert fixed.returncode == 0, fixed.stdout
    assert names(cache) == {built["good"]["name"]}
    assert len(list((cache / ".quarantine").iterdir())) == len(FAULTS)
    assert not any((cache / ".staging").iterdir())
    assert run_trtwarm("verify", "--cache-dir", str(cache)).returncode == 0


def test_rm_by_name_and_key_prefix_and_unknown_selector(three: list[dict], cache: Path) -> None:
    run = run_trtwarm("rm", "--cache-dir", str(cache), three[0]["name"], three[1]["key"][:12], "--yes")
    assert run.returncode == 0, run.stderr
    assert names(cache) == {three[2]["name"]}
    missing = run_trtwarm("rm", "--cache-dir", str(cache), "nope", "--yes")
    assert missing.returncode == 2 and "no entry matches nope" in missing.stderr and "Traceback" not in missing.stderr


def test_ls_and_stats_report_use_size_and_status(three: list[dict], model: Path, cache: Path, tmp_path: Path) -> None:
    live = build(model, cache, tmp_path, "live")
    rows = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json", "--sort", "used").stdout)
    assert [r["name"] for r in rows] == [live["name"], three[2]["name"], three[1]["name"], three[0]["name"]]
    assert {"key", "name", "path", "engine_bytes", "status", "last_used_ts", "pods", "builder"} <= set(rows[0])
    assert len(rows[0]["pods"]) == 1 and rows[1]["pods"] == []
    text = run_trtwarm("ls", "--cache-dir", str(cache)).stdout
    assert "4 entries" in text and "1 in use" in text
    stats = json.loads(run_trtwarm("stats", "--cache-dir", str(cache), "--json").stdout)
    assert stats["entries"] == 4 and stats["in_use"] == 1 and stats["bytes"] == sum(r["bytes"] for r in rows)
    assert stats["by_builder"] == {"commandtest-1": {"entries": 4, "bytes": stats["bytes"]}}
    assert time.time() - stats["oldest_use_ts"] > 39 * DAY


def test_staging_of_a_killed_builder_not_yet_reaped_is_stale(three: list[dict], cache: Path) -> None:
    zombie = subprocess.Popen(["true"])  # exits at once; not waited for, so it stays a zombie meanwhile
    wait_until(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] == "Z", what="zombie")
    host = sanitize(os.uname().nodename, 32).replace(".", "-")
    staging = cache / ".staging" / f"{three[0]['key']}.{host}.{zombie.pid}.dead"
    staging.mkdir(parents=True)
    try:
        run = run_trtwarm("gc", "--cache-dir", str(cache), "--yes", "--json")
        assert [a["reason"] for a in json.loads(run.stdout)["removed"]] == ["staging"]
        assert not staging.exists()
    finally:
        zombie.wait()


def test_an_entry_path_or_a_completed_name_with_its_slash_selects_the_entry(model: Path, cache: Path,
                                                                           tmp_path: Path) -> None:
    """What shell completion and `ls` paths give: ``<cache>/entries/NAME`` and ``NAME/`` name that entry."""
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"))
    name = built.summary["name"]
    for selector in (str(cache / "entries" / name), name + "/", str(cache / "entries" / name) + "/"):
        shown = run_trtwarm("show", selector, "--cache-dir", str(cache), "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == name, shown.stderr
    key = tmp_path / "k"
    assert run_trtwarm("keys", "generate", "--out", str(key)).returncode == 0
    signed = run_trtwarm("sign", name + "/", "--key", str(tmp_path / "k.key"), "--cache-dir", str(cache), "--json")
    assert signed.returncode == 0 and '"signed"' in signed.stdout, signed.stderr


def test_a_hand_edited_key_document_of_another_shape_is_damaged_not_a_crash(model: Path, cache: Path,
                                                                           tmp_path: Path) -> None:
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"))
    manifest = Path(built.summary["path"]).parent / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["key_document"].update(builder="x", build=["not", "a", "mapping"], device=7)
    manifest.write_text(json.dumps(doc))
    for argv, code in ((["ls"], 8), (["ls", "--json"], 8), (["stats"], 0), (["show", built.summary["name"]], 8)):
        run = run_trtwarm(*argv, "--cache-dir", str(cache))
        assert run.returncode == code and "Traceback" not in run.stderr and "unexpected" not in run.stderr, run.stderr
    assert "damaged: manifest.json's key_document.builder is str, not an object" in run.stdout
    assert "- (no readable key document)" in run.stdout  # show: no init command line to offer


def test_keep_per_model_keeps_n_of_each_configuration_not_of_each_model_name(model: Path, cache: Path,
                                                                            tmp_path: Path) -> None:
    """An fp16 and an int8 engine of one model serve different Pods: keeping 1 per model keeps one of each (the
    newest of each configuration), and drops only the older build of the same configuration."""
    built = {t: build(model, cache, tmp_path, t, "--precision", p)
             for t, p in (("fp16-old", "fp16"), ("fp16-new", "fp16"), ("int8", "int8"))}
    for tag, days in (("fp16-old", 9), ("fp16-new", 1), ("int8", 5)):
        set_last_use(cache, built[tag]["key"], days)
    age_leases(cache)
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--keep-per-model", "1", "--yes", "--json")
    assert run.returncode == 0, run.stderr
    assert names(cache) == {built["fp16-new"]["name"], built["int8"]["name"]}


def test_gc_keeps_the_staging_directory_of_a_key_whose_build_is_alive(model: Path, cache: Path,
                                                                     tmp_path: Path) -> None:
    """A staging directory whose pid this host cannot see (a Pod sharing the hostname, in its own PID namespace)
    is not taken for dead while its key's build lock has a live owner; once the build is over it is."""
    proc, gate = gated_build(model, cache, tmp_path)
    staging = cache / ".staging"
    wait_until(lambda: staging.is_dir() and any(staging.iterdir()), timeout=60, what="the build started")
    [live] = list(staging.iterdir())
    unseen = staging / f"{live.name.split('.')[0]}.{live.name.split('.')[1]}.999999999.beef"
    unseen.mkdir()  # the same key's build directory of a pid this host cannot see
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--yes")
    assert run.returncode == 0 and unseen.is_dir() and live.is_dir(), run.stdout + run.stderr
    gate.unlink()
    assert proc.wait(60) == 0, proc.stderr.read()  # type: ignore[union-attr]
    wait_until(lambda: not run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout.count('"building"'),
               timeout=30, what="the build's owner record gone")
    if unseen.is_dir():  # the builder's own sweep after its publish may have removed it already
        assert run_trtwarm("gc", "--cache-dir", str(cache), "--yes").returncode == 0
    assert not unseen.exists()
