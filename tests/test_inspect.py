"""What an on-call engineer reads: ``show``, ``ls`` filters and columns, ``key --explain``, ``rm``/``gc`` answers,
and ``warm --list``, on volumes filled by real ``trtwarm init`` runs (issue 16)."""

from __future__ import annotations

import json
import shlex
import signal
import time
from pathlib import Path

import pytest
from conftest import (cmd_init_args, copy_command, debris, entries, gated_build, ort_init_args, run_trtwarm, spawn,
                      wait_for_log, wait_until)

from trtwarm.cli.demo import make_model


def build(model: Path, cache: Path, tmp_path: Path, tag: str, *extra: str) -> dict:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{tag}", "--key-extra", f"tag={tag}", *extra))
    assert run.returncode == 0, run.stderr
    return run.summary


def cmd_flags(model: Path, cache: Path, *extra: str) -> list[str]:
    """The key flags of :func:`conftest.cmd_init_args` (for ``key``)."""
    return ["--builder", "command", "--builder-version", "test-1", "--build-command", copy_command(), "--device",
            "cpu", "--model", str(model), "--cache-dir", str(cache), *extra]


@pytest.fixture
def long_model(tmp_path: Path) -> Path:
    """A model with a long name, so the default ``ls`` table has to fit."""
    return make_model(tmp_path / "models" / "a-rather-long-model-name-for-the-table.onnx")


def test_show_by_upper_case_prefix_name_or_model_prints_the_whole_entry(model: Path, cache: Path,
                                                                        tmp_path: Path) -> None:
    built = build(model, cache, tmp_path, "a", "--shape", "input=1x16:8x16:32x16")
    name = built["name"]
    for selector in (built["key"][:10].upper(), name, name.rpartition("--")[0], "mlp"):
        run = run_trtwarm("show", selector, "--cache-dir", str(cache))
        assert run.returncode == 0, (selector, run.stderr)
        assert run.stdout.startswith(f"entry        {name}\n")
    text = run.stdout
    manifest = json.loads((entries(cache)[0] / "manifest.json").read_text())
    assert "engine.plan  " in text and f"sha256 {manifest['engine_sha256']}" in text
    assert "signature    unsigned" in text
    assert "built        " in text and f"pid {manifest['built_by']['pid']}" in text
    assert "expires in " in text  # the init's own lease, with its expiry
    assert '"key_document"' not in text and '"model": {' in text  # the key document, in full


@pytest.mark.parametrize("builder", ["command", "onnxruntime"])
def test_show_init_line_resolves_to_the_same_key(model: Path, cache: Path, tmp_path: Path, builder: str) -> None:
    if builder == "command":
        built = build(model, cache, tmp_path, "b", "--shape", "input=1x16:8x16:32x16", "--precision", "model")
    else:  # its key names ONNX Runtime's provider (CPUExecutionProvider), the flag trtwarm's word for it
        built = run_trtwarm(*ort_init_args(model, cache, tmp_path / "o")).summary
    shown = json.loads(run_trtwarm("show", built["key"][:8], "--cache-dir", str(cache), "--json").stdout)
    argv = shlex.split(shown["init_command"])
    assert argv[:2] == ["trtwarm", "init"]
    argv[argv.index("--model") + 1] = str(model)  # the one thing show cannot know: where the model file is
    key = run_trtwarm("key", *argv[2:], "--json")
    assert key.returncode == 0, key.stderr
    assert json.loads(key.stdout)["key"] == shown["key"] and shown["key"].startswith(built["key"])


def test_show_says_which_entries_an_ambiguous_or_unknown_selector_means(model: Path, cache: Path,
                                                                        tmp_path: Path) -> None:
    one, two = build(model, cache, tmp_path, "x"), build(model, cache, tmp_path, "y")
    both = run_trtwarm("show", "mlp", "--cache-dir", str(cache))
    assert both.returncode == 2 and "matches 2 entries" in both.stderr
    assert one["name"] in both.stderr and two["name"] in both.stderr and "hint: give a longer key prefix" in both.stderr
    none = run_trtwarm("show", "deadbeef00", "--cache-dir", str(cache))
    assert none.returncode == 2 and "no entry matches 'deadbeef00'" in none.stderr and "hint:" in none.stderr


def test_show_verify_finds_a_corrupt_engine_and_a_signature_file_is_reported(model: Path, cache: Path,
                                                                             tmp_path: Path) -> None:
    built = build(model, cache, tmp_path, "c")
    entry = entries(cache)[0]
    ok = run_trtwarm("show", built["key"][:12], "--cache-dir", str(cache), "--verify")
    assert ok.returncode == 0 and "verification ok: manifest, size and SHA-256 match" in ok.stdout
    (entry / "manifest.sig.json").write_text('{"payloadType": "x", "signatures": []}')
    engine = entry / "engine.plan"
    engine.write_bytes(bytes(len(engine.read_bytes())))  # same size, other bytes
    bad = run_trtwarm("show", built["key"][:12], "--cache-dir", str(cache), "--verify")
    assert bad.returncode == 8 and "failed: engine SHA-256 does not match" in bad.stdout
    assert "signature    signed by no key (not checked: pass --trust-policy)" in bad.stdout
    as_json = json.loads(run_trtwarm("show", built["key"][:12], "--cache-dir", str(cache), "--verify", "--json").stdout)
    assert as_json["status"] == "damaged" and as_json["verified_now"].startswith("failed")  # one story, not "ok"


def test_ls_default_fits_120_columns_in_the_json_vocabulary(long_model: Path, cache: Path, tmp_path: Path) -> None:
    build(long_model, cache, tmp_path, "w", "--shape", "input=1x16:8x16:32x16")
    table = run_trtwarm("ls", "--cache-dir", str(cache))
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 120, table.stdout
    row = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)[0]
    assert row["shapes"] == "input=8x16" and row["status"] == "ok"
    for word in (row["key"][:16], row["builder"], row["device"], row["shapes"], "ok"):
        assert word in table.stdout, word
    assert "input-8x16" not in table.stdout  # the name's spelling is not the table's
    wide = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "name,status")
    assert wide.stdout.splitlines()[1].split() == [row["name"], "ok"]
    bad = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "name,colour")
    assert bad.returncode == 2 and "unknown column colour" in bad.stderr and "hint: choose from name," in bad.stderr


def test_ls_filters_by_model_builder_device_and_status(model: Path, long_model: Path, cache: Path,
                                                       tmp_path: Path) -> None:
    short, long_ = build(model, cache, tmp_path, "s"), build(long_model, cache, tmp_path, "l")

    def listed(*flags: str) -> set[str]:
        run = run_trtwarm("ls", "--cache-dir", str(cache), "--json", *flags)
        assert run.returncode == 0, run.stderr
        return {r["name"] for r in json.loads(run.stdout)}

    assert listed("--model", "mlp") == {short["name"]}
    assert listed("--model", "a-rather*") == {long_["name"]}
    assert listed("--builder", "command") == listed("--device", "cpu") == {short["name"], long_["name"]}
    assert listed("--builder", "tensorrt") == set()
    assert listed("--status", "in-use") == {short["name"], long_["name"]}  # each init's own lease
    assert listed("--status", "damaged") == set()
    text = run_trtwarm("ls", "--cache-dir", str(cache), "--builder", "tensorrt").stdout
    assert "(filtered by --builder tensorrt, from the flags or their TRTWARM_* variables; 2 on the volume)" in text
    # a variable left set in the shell filters as silently as a flag: the note names it
    text = run_trtwarm("ls", "--cache-dir", str(cache), env={"TRTWARM_MODEL": "/elsewhere/m.onnx"}).stdout
    assert "0 entries" in text and "filtered by --model /elsewhere/m.onnx" in text, text


def test_ls_json_lists_a_build_in_progress(model: Path, cache: Path, tmp_path: Path) -> None:
    proc, gate = gated_build(model, cache, tmp_path)
    try:
        wait_until(lambda: (cache / ".staging").is_dir() and any((cache / ".staging").iterdir()), what="build")
        rows = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)
        assert [r["status"] for r in rows] == ["building"] and rows[0]["name"].startswith("mlp_")
        assert rows[0]["owner"]["pid"] == proc.pid
        only = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json", "--status", "building").stdout)
        assert [(r["key"], r["status"]) for r in only] == [(r["key"], r["status"]) for r in rows]
    finally:
        gate.unlink()
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_explain_takes_the_pods_init_flags_and_ranks_entries_by_fewest_differences(model: Path, cache: Path,
                                                                                   tmp_path: Path) -> None:
    near = build(model, cache, tmp_path, "near")
    far = build(model, cache, tmp_path, "far", "--precision", "fp16")
    pod_flags = ["--handoff-dir", str(tmp_path / "pod"), "--lock-timeout", "5m", "--lock-mode", "flock", "--verify",
                 "load", "--read-only", "--progress-interval", "30s", "--events-timeout", "1s", "--triton-repo",
                 str(tmp_path / "triton"), "--triton-model", "mlp", "--log-format", "json"]
    run = run_trtwarm("key", "--explain", "--json", *cmd_flags(model, cache, "--key-extra", "tag=new"), *pod_flags)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["result"] == "miss"
    assert [n["entry"] for n in report["nearest"]] == [near["name"], far["name"]]
    assert [n["differing"] for n in report["nearest"]] == [1, 2]
    assert report["nearest"][0]["fields"] == [{"field": "build.extra.tag", "entry": "near", "this": "new"}]
    hit = run_trtwarm("key", "--explain", "--json", *cmd_flags(model, cache, "--key-extra", "tag=near"), *pod_flags)
    assert json.loads(hit.stdout)["result"] == "hit" and json.loads(hit.stdout)["entry"] == near["name"]
    assert not (tmp_path / "pod").exists() and not (tmp_path / "triton").exists()  # explaining changes nothing


def test_explain_prints_a_changed_digest_in_full(tmp_path: Path, cache: Path) -> None:
    old = make_model(tmp_path / "v1" / "mlp.onnx", external=True, seed=1)
    new = make_model(tmp_path / "v2" / "mlp.onnx", external=True, seed=2)
    build(old, cache, tmp_path, "t")
    run = run_trtwarm("key", "--explain", *cmd_flags(new, cache, "--key-extra", "tag=t"))
    facts = [json.loads(d) for d in run.stdout.split("model.external_data[0].sha256\n")[1].split("\n")[:2]
             for d in [d.split(": ", 1)[1]]]
    assert all(len(f) == 64 for f in facts) and facts[0] != facts[1]


def test_rm_by_name_without_key_and_upper_case_prefix_and_the_force_hint(model: Path, cache: Path,
                                                                        tmp_path: Path) -> None:
    one, two = build(model, cache, tmp_path, "p"), build(model, cache, tmp_path, "q")
    kept = run_trtwarm("rm", one["name"].rpartition("--")[0], "--cache-dir", str(cache), "--yes")
    assert kept.returncode == 0
    assert f"keep {one['name']}: in use: leased by" in kept.stdout and "expires in" in kept.stdout
    assert "hint: an entry in use is kept; pass --force" in kept.stdout
    assert len(entries(cache)) == 2
    gone = run_trtwarm("rm", two["key"][:10].upper(), "--cache-dir", str(cache), "--yes", "--force")
    assert gone.returncode == 0 and "removed 1" in gone.stdout
    assert [p.name for p in entries(cache)] == [one["name"]]


def test_gc_without_a_policy_says_what_it_does(model: Path, cache: Path, tmp_path: Path) -> None:
    build(model, cache, tmp_path, "g")
    run = run_trtwarm("gc", "--cache-dir", str(cache), "--dry-run")
    assert run.returncode == 0
    assert "no policy given (--max-age, --max-bytes, --keep-per-model)" in run.stdout
    assert "hint: e.g. trtwarm gc --max-age 30d" in run.stdout


def test_warm_list_prewarms_each_model_with_a_line_and_a_summary(model: Path, cache: Path, tmp_path: Path) -> None:
    other = make_model(tmp_path / "models" / "other.onnx", seed=3)
    listing = tmp_path / "models.json"
    listing.write_text(json.dumps({
        "defaults": {"builder": "command", "builder-version": "t1", "build-command": copy_command(), "device": "cpu"},
        "models": [{"model": str(model)}, {"model": str(other), "key_extra": ["calib=v2"]},
                   {"model": str(tmp_path / "missing.onnx")}, {"model": str(model)}]}))
    run = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(cache))
    assert run.returncode == 3, run.stderr  # the first failure's exit code; the others still ran
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"[1/4] {model}: built in ") and lines[1].startswith(f"[2/4] {other}: built in ")
    assert lines[2].startswith("[3/4] ") and "error (exit 3)" in lines[2] and "does not exist" in lines[2]
    assert lines[3].startswith(f"[4/4] {model}: hit in ")
    assert "ENTRY OR ERROR" in run.stdout and "3 of 4 ready" in run.stdout
    assert len(entries(cache)) == 2
    as_json = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(cache), "--json")
    results = json.loads(as_json.stdout)  # standard output is the list alone: the progress lines went to stderr
    assert [r["result"] for r in results] == ["hit", "hit", "error", "hit"] and "[3/4] " in as_json.stderr


def test_warm_list_rejects_what_is_no_init_flag(model: Path, cache: Path, tmp_path: Path) -> None:
    listing = tmp_path / "models.json"
    listing.write_text(json.dumps([{"model": str(model), "colour": "blue"}]))
    run = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(cache))
    assert run.returncode == 2 and "'colour' is not an init flag" in run.stdout
    listing.write_text("{not json")
    bad = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(cache))
    assert bad.returncode == 2 and "is not valid JSON" in bad.stderr and "hint: e.g. [{" in bad.stderr


def test_warm_list_reads_yaml_when_pyyaml_is_there(model: Path, cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("yaml", reason="PyYAML is not installed (YAML lists need it; JSON does not)")
    listing = tmp_path / "models.yaml"
    listing.write_text(f"- model: {model}\n  builder: command\n  builder-version: t1\n  device: cpu\n"
                       f"  build-command: \"{copy_command()}\"\n")
    run = run_trtwarm("warm", "--list", str(listing), "--cache-dir", str(cache), "--json")
    assert run.returncode == 0, run.stderr
    assert [r["result"] for r in json.loads(run.stdout.splitlines()[-1])] == ["built"]


def test_ls_says_why_an_entry_is_damaged_in_the_table_and_the_json(model: Path, cache: Path, tmp_path: Path) -> None:
    garbage, truncated = build(model, cache, tmp_path, "g"), build(model, cache, tmp_path, "t")
    by_name = {p.name: p for p in entries(cache)}
    (by_name[garbage["name"]] / "manifest.json").write_text("{not json")
    engine = by_name[truncated["name"]] / "engine.plan"
    engine.write_bytes(engine.read_bytes()[:100])
    rows = {r["name"]: r for r in json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)}
    assert rows[garbage["name"]]["status"] == rows[truncated["name"]]["status"] == "damaged"
    assert rows[garbage["name"]]["problem"] == "manifest.json is not valid JSON"
    assert "(truncated)" in rows[truncated["name"]]["problem"]
    table = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "key,status").stdout
    assert f"{truncated['key']}  damaged: engine file is 100 bytes" in table


def test_show_checks_a_real_signature_against_a_trust_policy(model: Path, cache: Path, tmp_path: Path) -> None:
    keys = run_trtwarm("keys", "generate", "--out", str(tmp_path / "ci"))
    assert keys.returncode == 0, keys.stderr
    policy, other = tmp_path / "policy.json", tmp_path / "other.json"
    for path, models in ((policy, ["mlp*"]), (other, ["resnet*"])):
        path.write_text(json.dumps({"mode": "enforce", "keys": [
            {"name": "ci", "public_key_file": str(tmp_path / "ci.pub"), "models": models}]}))
    built = build(model, cache, tmp_path, "s", "--signing-key", str(tmp_path / "ci.key"), "--trust-policy", str(policy))
    kid = keys.stdout.split("key id")[1].split()[0][:16]

    def signature(*flags: str) -> str:
        run = run_trtwarm("show", built["key"], "--cache-dir", str(cache), *flags)
        assert run.returncode == 0, run.stderr
        return next(line for line in run.stdout.splitlines() if line.startswith("signature"))

    assert signature() == f"signature    signed by {kid} (not checked: pass --trust-policy)"
    assert signature("--trust-policy", str(policy)) == f"signature    signed by trusted key {kid} ({policy})"
    assert signature("--trust-policy", str(other)).startswith(f"signature    NOT trusted by {other}: ")


def test_an_entry_of_a_dynamic_model_built_without_shapes_reads_unshaped_not_static(model: Path, cache: Path,
                                                                                   tmp_path: Path) -> None:
    """Its name says ``unshaped`` (the builder chose the shapes); ``ls`` and ``show`` must not call it static."""
    built = build(model, cache, tmp_path, "u")  # mlp.onnx has a dynamic batch, and no --shape here
    assert "_unshaped--" in built["name"]
    [row] = json.loads(run_trtwarm("ls", "--json", "--cache-dir", str(cache)).stdout)
    assert row["shapes"] == "unshaped"
    shown = run_trtwarm("show", built["key"][:12], "--cache-dir", str(cache)).stdout
    assert "static" not in shown and "unshaped" in shown


def test_ls_all_lists_a_quarantined_entry_in_the_same_words_as_the_others(model: Path, cache: Path,
                                                                         tmp_path: Path) -> None:
    build(model, cache, tmp_path, "q", "--shape", "input=1x16:8x16:32x16")
    engine = entries(cache)[0] / "engine.plan"
    engine.write_bytes(bytes(len(engine.read_bytes())))  # corrupt: the next init quarantines it and builds again
    assert build(model, cache, tmp_path, "q", "--shape", "input=1x16:8x16:32x16")["result"] == "built"
    rows = json.loads(run_trtwarm("ls", "--all", "--json", "--cache-dir", str(cache)).stdout)
    ok, gone = (next(r for r in rows if r["status"] == s) for s in ("ok", "quarantined"))
    assert [gone[k] for k in ("builder", "device", "precision", "shapes")] == \
        [ok[k] for k in ("builder", "device", "precision", "shapes")] == [ok["builder"], ok["device"], "model",
                                                                          "input=8x16"]
    assert "corrupt" in (gone["problem"] or "") or "sha" in (gone["problem"] or "").lower()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_whole_warm_list(model: Path, cache: Path, tmp_path: Path, sig: int, code: int) -> None:
    """SIGTERM during the first model's build stops the build and the list: the next model never starts, nothing is
    left in staging, and the exit is the signal's (not the first model's error, then the next model built)."""
    other = make_model(tmp_path / "models" / "other.onnx", seed=5)
    listing = tmp_path / "models.json"
    build = "sh -c 'echo started; sleep 300' {output}"
    listing.write_text(json.dumps({
        "defaults": {"builder": "command", "builder-version": "t1", "build-command": build, "device": "cpu"},
        "models": [{"model": str(model)}, {"model": str(other)}]}))
    handoff = tmp_path / "handoff"
    proc = spawn(["warm", "--list", str(listing), "--cache-dir", str(cache), "--handoff-dir", str(handoff)])
    wait_for_log(proc, "[build] started")
    start = time.monotonic()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    text = proc.log.read_text()  # type: ignore[attr-defined]
    assert proc.returncode == code, text
    assert time.monotonic() - start < 5, text
    assert "Traceback" not in text and "[2/2]" not in out + text and text.count("[build] started") == 1
    assert debris(cache) == [] and entries(cache) == []
