"""The repeat hit: a node's record of a verified stamped hit is repeated only while everything it rests on holds."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, run_trtwarm

from trtwarm.init.fasthit import POD_OWN, start_of
from trtwarm.volume.stamps import RACY_SECONDS

REPEAT = "repeating this node's record of the hit"
POD = {"POD_NAME": "infer-7d9f-abc12", "POD_NAMESPACE": "ml"}


def _built(model: Path, cache: Path, tmp_path: Path, *extra: str) -> Path:
    """Build, then let the files age past the racy window (a younger file is neither stamped nor recorded)."""
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", *extra)).summary["result"] == "built"
    time.sleep(RACY_SECONDS + 0.2)  # not a timing assertion: young files are deliberately not vouched for
    return entries(cache)[0]


def _start(model: Path, cache: Path, tmp_path: Path, *extra: str, env: dict[str, str] | None = None):  # noqa: ANN202
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--verify", "stamp", *extra), env=env or POD)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run


def _recorded(model: Path, cache: Path, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> Path:
    """A stamped hit that hashes (and stamps), then one that vouches by stamp and records: the record's path."""
    assert "1 hashed" in _start(model, cache, tmp_path, *extra, env=env).stderr
    second = _start(model, cache, tmp_path, *extra, env=env)
    assert "1 file(s) by stamp, 0 hashed" in second.stderr and REPEAT not in second.stderr
    records = list((tmp_path / "h" / "stamps").glob("hit-*.json"))
    assert len(records) == 1, "a hit vouched for by stamps leaves one record on the node"
    return records[0]


def test_the_third_start_repeats_the_hit_with_the_same_hand_off_lease_and_log(model: Path, cache: Path,
                                                                              tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path)
    full = json.loads((tmp_path / "h" / "engine.json").read_text())
    use = cache / ".uses" / full["key"]
    os.utime(use, (1, 1))
    third = _start(model, cache, tmp_path)
    assert REPEAT in third.stderr and "1 file(s) by stamp, 0 hashed" in third.stderr
    assert third.summary["result"] == "hit" and third.summary["path"] == str(entry / "engine.plan")
    repeated = json.loads((tmp_path / "h" / "engine.json").read_text())
    assert {k: v for k, v in repeated.items() if k != "seconds"} == {k: v for k, v in full.items() if k != "seconds"}
    assert os.readlink(tmp_path / "h" / "engine") == str(entry / "engine.plan")
    assert json.loads((tmp_path / "h" / "engine.prev.json").read_text())["ready"] is True  # set aside, as always
    lease = json.loads((cache / ".leases" / full["key"] / "ml.infer-7d9f-abc12.json").read_text())
    assert (lease["pod"], lease["namespace"], lease["name"]) == ("infer-7d9f-abc12", "ml", entry.name)
    assert use.stat().st_mtime > 1, "the last use is marked for gc, as on every hit"


def test_another_pod_of_the_deployment_repeats_it_under_its_own_lease(model: Path, cache: Path,
                                                                      tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path)
    sibling = {**POD, "POD_NAME": "infer-7d9f-xyz34", "HOSTNAME": "infer-7d9f-xyz34", "POD_IP": "10.1.2.3"}
    run = _start(model, cache, tmp_path, env=sibling)
    assert REPEAT in run.stderr
    key = run.summary["key"]
    leases = [p.name for p in (cache / ".leases").glob(f"{key}*/*.json")]
    assert "ml.infer-7d9f-xyz34.json" in leases and "ml.infer-7d9f-abc12.json" in leases


def test_the_pods_own_variables_are_left_out_of_the_start_and_nothing_else() -> None:
    env = {"POD_NAME": "a", "HOSTNAME": "a", "POD_NAMESPACE": "ml", "TRTWARM_VERIFY": "stamp", "NODE_NAME": "n1"}
    key = bytes(32)
    start = start_of(["--model", "m.onnx"], env, key)
    sibling = start_of(["--model", "m.onnx"], {**env, **dict.fromkeys(POD_OWN, "b")}, key)
    assert start == sibling and set(start) == {"args", "cwd", "env_sha256"}
    for changed in ({**env, "NODE_NAME": "n2"}, {**env, "X": ""}, {k: v for k, v in env.items() if k != "NODE_NAME"}):
        assert start_of(["--model", "m.onnx"], changed, key) != start
    assert start_of(["--model", "m.onnx"], env, bytes([1] * 32)) != start, "the digest is keyed by the node's salt"


def _rewrite_in_place(path: Path) -> None:
    """The same bytes written again, mtime restored: only ctime tells."""
    before, data = path.stat(), path.read_bytes()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_touched_model_or_an_altered_engine_resolves_in_full(model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path)
    _rewrite_in_place(model)  # same bytes: same key, but the record cannot know that without hashing
    run = _start(model, cache, tmp_path)
    assert REPEAT not in run.stderr and run.summary["result"] == "hit"
    engine = entry / "engine.plan"
    data = bytearray(engine.read_bytes())
    data[0] ^= 0xFF
    before = engine.stat()
    engine.write_bytes(bytes(data))
    os.utime(engine, ns=(before.st_atime_ns, before.st_mtime_ns))
    altered = _start(model, cache, tmp_path)
    assert REPEAT not in altered.stderr and altered.summary["result"] == "built", altered.stderr
    assert "engine SHA-256 does not match the manifest" in altered.stderr


def test_a_file_slipped_into_the_entry_resolves_in_full(model: Path, cache: Path, tmp_path: Path) -> None:
    entry = _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path)
    (entry / "extra.bin").write_bytes(b"not listed in the manifest")
    run = _start(model, cache, tmp_path)
    assert REPEAT not in run.stderr and run.summary["result"] == "built", run.stderr


def test_another_start_resolves_in_full(model: Path, cache: Path, tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path)
    other = _start(model, cache, tmp_path, "--lock-timeout", "5m")
    assert REPEAT not in other.stderr and other.summary["result"] == "hit"
    moved = _start(model, cache, tmp_path, env={**POD, "TRTWARM_LOG_FORMAT": "json"})
    assert REPEAT not in moved.stderr
    again = _start(model, cache, tmp_path, env={**POD, "TRTWARM_LOG_FORMAT": "json"})  # recorded by the one before
    lines = [json.loads(line) for line in again.stderr.splitlines()]
    assert any(REPEAT in line["msg"] for line in lines) and {line["logger"] for line in lines} <= {"trtwarm",
                                                                                                 "trtwarm.init.warm"}


def test_an_unsafe_stamp_directory_or_a_garbage_record_resolves_in_full(model: Path, cache: Path,
                                                                        tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    record = _recorded(model, cache, tmp_path)
    record.write_text("{not json")
    run = _start(model, cache, tmp_path)
    assert REPEAT not in run.stderr and run.summary["result"] == "hit"
    assert json.loads(record.read_text())["schema"] == 1, "the full init records the hit again"
    os.chmod(record.parent, 0o777)
    unsafe = _start(model, cache, tmp_path)
    assert REPEAT not in unsafe.stderr and "ignoring stamps" in unsafe.stderr
    os.chmod(record.parent, 0o700)
    os.chmod(record, 0o666)
    writable = _start(model, cache, tmp_path)
    assert REPEAT not in writable.stderr


def test_stamps_past_their_age_end_the_repeats(model: Path, cache: Path, tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path, "--stamp-max-age", "6s")
    assert REPEAT in _start(model, cache, tmp_path, "--stamp-max-age", "6s").stderr
    time.sleep(6)  # not a timing assertion: the stamps (and so the record) must be past their age
    run = _start(model, cache, tmp_path, "--stamp-max-age", "6s")
    assert REPEAT not in run.stderr and "1 hashed" in run.stderr


def test_events_to_send_resolve_in_full(model: Path, cache: Path, tmp_path: Path) -> None:
    _built(model, cache, tmp_path)
    _recorded(model, cache, tmp_path)
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    run = _start(model, cache, tmp_path, env={**POD, "KUBECONFIG": str(config)})
    assert REPEAT not in run.stderr  # the full init sends EngineCacheHit (here: says it cannot)


def test_a_repeat_on_a_read_only_volume_warns_as_the_full_init_does(model: Path, cache: Path,
                                                                    tmp_path: Path) -> None:
    mnt = tmp_path / "ro"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount tmpfs here (needs root / CAP_SYS_ADMIN): {exc}")
    try:
        volume = mnt / "cache"
        _built(model, volume, tmp_path)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)
        _recorded(model, volume, tmp_path, "--read-only")
        repeat = _start(model, volume, tmp_path, "--read-only")
        assert REPEAT in repeat.stderr and repeat.summary["result"] == "hit"
        assert "no in-use lease on" in repeat.stderr and "read-only" in repeat.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


def _signed(model: Path, cache: Path, tmp_path: Path) -> tuple[list[str], Path]:
    keys = tmp_path / "keys"
    keys.mkdir()
    assert run_trtwarm("keys", "generate", "--out", str(keys / "ci")).returncode == 0
    policy = keys / "policy.json"
    policy.write_text(json.dumps({"mode": "enforce", "keys": [{"name": "ci", "public_key_file": "ci.pub"}]}))
    _built(model, cache, tmp_path, "--signing-key", str(keys / "ci.key"))
    return ["--trust-policy", str(policy), "--read-only"], keys


def test_under_a_trust_policy_a_changed_key_file_ends_the_repeats(model: Path, cache: Path, tmp_path: Path) -> None:
    trust, keys = _signed(model, cache, tmp_path)
    _recorded(model, cache, tmp_path, *trust)
    assert REPEAT in _start(model, cache, tmp_path, *trust).stderr
    assert run_trtwarm("keys", "generate", "--out", str(tmp_path / "other")).returncode == 0
    (keys / "ci.pub").write_bytes((tmp_path / "other.pub").read_bytes())  # the policy now trusts another key
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--verify", "stamp", *trust, "--lock-timeout",
                                     "1s"), env=POD)
    assert REPEAT not in run.stderr and run.returncode != 0, run.stderr  # refused: nothing trusted signed it
    assert "Traceback" not in run.stderr


def test_a_hit_that_warned_while_looking_up_is_not_recorded(model: Path, cache: Path, tmp_path: Path) -> None:
    _built(model, cache, tmp_path)  # unsigned
    keys = tmp_path / "keys"
    keys.mkdir()
    assert run_trtwarm("keys", "generate", "--out", str(keys / "ci")).returncode == 0
    policy = keys / "policy.json"
    policy.write_text(json.dumps({"mode": "warn", "keys": [{"name": "ci", "public_key_file": "ci.pub"}]}))
    for _ in range(3):
        run = _start(model, cache, tmp_path, "--trust-policy", str(policy))
        assert REPEAT not in run.stderr and "WARNING" in run.stderr  # the warning about the unsigned entry, each time
    assert not list((tmp_path / "h" / "stamps").glob("hit-*.json"))


def test_an_onnxruntime_hit_repeats_pinned_by_its_installed_distribution(model: Path, cache: Path,
                                                                         tmp_path: Path) -> None:
    from conftest import ort_init_args

    from trtwarm.builders.base import dist_witnesses

    pinned = dist_witnesses("onnxruntime")
    assert pinned is not None and pinned[0].name == "METADATA" and pinned[0].parent.parent in pinned[1:]
    assert Path.cwd() in pinned, "every directory on sys.path: a distribution found earlier there changes the key"
    assert run_trtwarm(*ort_init_args(model, cache, tmp_path / "h0")).summary["result"] == "built"
    time.sleep(RACY_SECONDS + 0.2)
    runs = [run_trtwarm(*ort_init_args(model, cache, tmp_path / "h", "--verify", "stamp")) for _ in range(3)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    assert REPEAT not in runs[1].stderr and REPEAT in runs[2].stderr
    record = json.loads(next((tmp_path / "h" / "stamps").glob("hit-*.json")).read_text())
    assert str(pinned[0]) in [w[0] for w in record["witnesses"]]
    assert record["device"]["choice"] == "cpu"  # the CPU provider: the node's CPU, pinned by its boot id


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("trtwarm.node.gpu", fromlist=["detect"]).detect(),
                    reason="no NVIDIA GPU visible through NVML on this machine")
def test_on_a_gpu_the_repeat_reads_the_device_through_nvml_again(model: Path, cache: Path, tmp_path: Path) -> None:
    extra = ("--device", "gpu")
    _built(model, cache, tmp_path, *extra)
    _recorded(model, cache, tmp_path, *extra)
    record_path = next((tmp_path / "h" / "stamps").glob("hit-*.json"))
    record = json.loads(record_path.read_text())
    assert record["device"]["choice"] == "gpu" and record["device"]["fields"]["kind"] != "cpu"
    assert REPEAT in _start(model, cache, tmp_path, *extra).stderr
    record["device"]["fields"]["product"] = "nvidia-other"  # as if CUDA now showed this container another GPU
    record_path.write_text(json.dumps(record))
    os.chmod(record_path, 0o600)
    run = _start(model, cache, tmp_path, *extra)
    assert REPEAT not in run.stderr and run.summary["result"] == "hit"


def _forge_statcache(cache: Path, victim: Path, donor: Path) -> Path:
    """What a writer of the volume can do: memoise *victim*'s stat identity with *donor*'s digest and facts."""
    from trtwarm.volume.statcache import identity, record_path

    donor_record = json.loads(record_path(cache / ".statcache", donor).read_text())
    stamps = {"": identity(victim.stat())}
    forged = record_path(cache / ".statcache", victim)
    forged.write_text(json.dumps({"model": str(victim), "stamps": stamps, "facts": donor_record["facts"]}))
    return forged


def test_a_forged_volume_stat_cache_ends_the_repeats_once_removed(model: Path, cache: Path, tmp_path: Path) -> None:
    from trtwarm.cli.demo import make_model

    other = make_model(tmp_path / "models" / "other.onnx", hidden=24)
    time.sleep(RACY_SECONDS + 0.2)
    assert run_trtwarm(*cmd_init_args(other, cache, tmp_path / "h1", "--name", "m")).summary["result"] == "built"
    time.sleep(RACY_SECONDS + 0.2)  # its engine too must age before it is stamped
    forged = _forge_statcache(cache, model, other)  # no trust policy: the volume's writers are trusted anyway
    _recorded(model, cache, tmp_path, "--name", "m")
    forged.unlink()  # the record rested on it: the repeat must not outlive the cleanup
    run = _start(model, cache, tmp_path, "--name", "m")
    assert REPEAT not in run.stderr and run.summary["result"] == "built", run.stderr


def test_under_a_trust_policy_the_volume_stat_cache_is_not_believed(model: Path, cache: Path, tmp_path: Path) -> None:
    from trtwarm.cli.demo import make_model

    trust, keys = _signed(model, cache, tmp_path)  # model's engine, signed
    other = make_model(tmp_path / "models" / "other.onnx", hidden=24)
    time.sleep(RACY_SECONDS + 0.2)
    signing = ("--signing-key", str(keys / "ci.key"))
    assert run_trtwarm(*cmd_init_args(other, cache, tmp_path / "h1", *signing)).summary["result"] == "built"
    own = _start(model, cache, tmp_path, *trust).summary["key"]  # this node's stamp directory now exists
    _forge_statcache(cache, model, other)  # pair model's stat identity with other's (also signed) engine
    run = _start(model, cache, tmp_path, *trust)
    assert run.summary["key"] == own and run.summary["result"] == "hit", run.stderr  # memoised on the node
    fresh = _start(model, cache, tmp_path, *trust, "--stamp-dir", str(tmp_path / "new-node"))  # no memo of its own:
    assert fresh.summary["key"] == own and fresh.summary["result"] == "hit", fresh.stderr  # the volume's, checked
    assert "names digests its files do not have" in fresh.stderr


def test_under_a_trust_policy_the_node_memoises_the_model_from_the_volume_without_parsing_it(
        model: Path, cache: Path, tmp_path: Path) -> None:
    trust, _keys = _signed(model, cache, tmp_path)
    assert _start(model, cache, tmp_path, *trust).summary["result"] == "hit"  # this node's stamp directory now exists
    second = _start(model, cache, tmp_path, *trust, env={**POD, "PYTHONPROFILEIMPORTTIME": "1"})
    assert second.summary["result"] == "hit"
    imported = {line.rsplit("|", 1)[1].strip() for line in second.stderr.splitlines() if line.startswith("import time")}
    assert "onnx" not in imported, "the volume's record, its digests checked, spares parsing the model (onnx: 0.5 s)"
    assert len(list((tmp_path / "h" / "stamps" / "statcache").glob("*.json"))) == 1  # and is memoised on the node


def test_under_a_trust_policy_the_volumes_word_on_inputs_ends_once_the_volume_is_put_right(
        model: Path, cache: Path, tmp_path: Path) -> None:
    from trtwarm.volume.statcache import record_path

    trust, _keys = _signed(model, cache, tmp_path)
    assert _start(model, cache, tmp_path, *trust).summary["result"] == "hit"  # this node's stamp directory now exists
    record = record_path(cache / ".statcache", model)
    honest = record.read_text()
    forged = json.loads(honest)
    forged["facts"]["inputs"][0]["name"] = "renamed"  # the digests still hold: only the volume's word is wrong
    record.write_text(json.dumps(forged))
    shaped = ("--verify", "stamp", "--shape", "input=1x16:8x16:32x16", *trust)
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", *shaped), env=POD)
    assert run.returncode == 2 and "renamed" in run.stderr, run.stderr  # the model, says the volume, has no 'input'
    record.write_text(honest)  # put right on the volume: the node's copy of the forged word is not believed
    after = _start(model, cache, tmp_path, *trust)
    assert "dynamic input 'input'" in after.stderr and "renamed" not in after.stderr, after.stderr


def test_a_volume_stat_cache_record_cannot_send_the_init_outside_the_models_directory(
        model: Path, cache: Path, tmp_path: Path) -> None:
    from trtwarm.fs.info import identity
    from trtwarm.volume.statcache import record_path

    trust, _keys = _signed(model, cache, tmp_path)
    assert _start(model, cache, tmp_path, *trust).summary["result"] == "hit"  # the volume memoises the model
    record = record_path(cache / ".statcache", model)
    forged = json.loads(record.read_text())
    forged["facts"]["external"] = [{"location": "/dev/zero", "sha256": "0" * 64, "bytes": 1 << 40}]
    forged["stamps"]["/dev/zero"] = identity(os.stat("/dev/zero"))  # its stamps match: only the location is wrong
    record.write_text(json.dumps(forged))
    for node in (tmp_path / "h" / "stamps", tmp_path / "new-node"):  # the node's first record; a node without one
        run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--stamp-dir", str(node), *trust), env=POD,
                          timeout=60)  # not hashing /dev/zero forever: the record is ignored
        assert run.returncode == 0 and run.summary["result"] == "hit", run.stderr
        assert "names files outside the model's directory" in run.stderr
