"""The Pod-private hand-off (``--handoff copy``, the default under an enforced trust policy): the server loads this
Pod's copy of the verified bytes, so a write to the shared volume after the check never reaches it; the sidecar's
readiness checks each handed-over file's identity, not only its size."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, run_trtwarm
from test_sidecar import SidecarProc, get
from test_trust import keypair, policy

from trtwarm.errors import EntryInvalid, UnsafeVolume
from trtwarm.init.handcopy import CopyChanged, copy_entry
from trtwarm.sidecar.metrics import engine_ready
from trtwarm.volume.stamps import RACY_SECONDS
from trtwarm.volume.verified import Dir, check_files

REPEAT = "repeating this node's record of the hit"


def _rewrite_same_size(path: Path) -> bytes:
    """An attacker's in-place rewrite of the same size, mtime restored: the new bytes."""
    before, data = path.stat(), bytearray(path.read_bytes())
    data[0] ^= 0xFF
    with open(path, "r+b") as handle:
        handle.write(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return bytes(data)


def _report(handoff: Path) -> dict:
    return json.loads((handoff / "engine.json").read_text())


def test_enforce_copies_the_verified_bytes_and_a_later_rewrite_of_the_volume_never_reaches_the_server(
        model: Path, cache: Path, tmp_path: Path) -> None:
    private, public = keypair(tmp_path, "ci")
    trust = ["--trust-policy", str(policy(tmp_path, "enforce", public)), "--signing-key", str(private)]
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", *trust)).returncode == 0
    handoff = tmp_path / "h"
    run = run_trtwarm(*cmd_init_args(model, cache, handoff, *trust))
    assert run.returncode == 0 and run.summary["result"] == "hit", run.stderr
    report = _report(handoff)
    link = Path(os.readlink(handoff / "engine"))
    assert report["handoff"] == "copy" and link.parent.parent == handoff / "copies" and report["path"] == str(link)
    assert [p.name for p in (handoff / "copies").iterdir()] == [link.parent.name], "no copy left pending"
    volume_engine = entries(cache)[0] / "engine.plan"
    verified = volume_engine.read_bytes()
    _rewrite_same_size(volume_engine)
    assert (handoff / "engine").read_bytes() == verified, "the server reads the bytes that were checked"
    assert engine_ready(_report(handoff)) == (True, f"ready: {report['name']}")
    again = run_trtwarm(*cmd_init_args(model, cache, handoff, *trust))  # the next start sees the rewrite
    assert "SHA-256 does not match" in again.stderr and again.summary["result"] == "built", again.stderr
    assert len(list((handoff / "copies").iterdir())) == 1, "the earlier copy is removed once the link moved on"


def test_link_is_the_default_without_enforce_and_readiness_sees_a_same_size_rewrite(model: Path, cache: Path,
                                                                                     tmp_path: Path) -> None:
    handoff = tmp_path / "h"
    assert run_trtwarm(*cmd_init_args(model, cache, handoff)).returncode == 0
    report = _report(handoff)
    assert report["handoff"] == "link" and not (handoff / "copies").exists()
    assert engine_ready(report)[0]
    _rewrite_same_size(Path(report["path"]))
    ready, why = engine_ready(_report(handoff))
    assert not ready and "rewritten or replaced after it was handed over" in why


def test_handoff_copy_on_request_and_its_variable(model: Path, cache: Path, tmp_path: Path) -> None:
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--handoff", "copy")).returncode == 0
    assert _report(tmp_path / "h1")["handoff"] == "copy"
    enforce_link = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2"), env={"TRTWARM_HANDOFF": "link"})
    assert enforce_link.returncode == 0 and _report(tmp_path / "h2")["handoff"] == "link"
    bad = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h3", "--handoff", "hardlink"))
    assert bad.returncode == 2 and "--handoff" in bad.stderr


def test_a_copy_that_does_not_hash_to_the_manifest_leaves_nothing(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "engine.plan").write_bytes(b"x" * 100_000)
    good = {"path": "engine.plan", "role": "engine", "sha256": hashlib.sha256(b"x" * 100_000).hexdigest(),
            "bytes": 100_000}
    with Dir.open(tmp_path, entry) as directory:
        verified = check_files(directory, [good])
        with Dir.open(tmp_path.parent, tmp_path) as into:
            assert verified.copy_into(into, [good]) is None  # checked as copied, from the descriptor
            with pytest.raises(UnsafeVolume, match="made by someone else"):
                into.create("engine.plan", 0o644)  # never over an existing file
    assert (tmp_path / "engine.plan").read_bytes() == b"x" * 100_000
    bad = dict(good, sha256="0" * 64)
    with Dir.open(tmp_path, entry) as directory:
        unchecked = check_files(directory, [bad], checker=lambda fd, _row: fd)
    with pytest.raises(CopyChanged, match="changed on the volume after it was verified"):
        copy_entry(tmp_path / "h", "k" * 64, unchecked, [bad])
    assert list((tmp_path / "h" / "copies").iterdir()) == []
    (entry / "link").symlink_to(entry / "engine.plan")
    with Dir.open(tmp_path, entry) as directory, pytest.raises(EntryInvalid, match="is a symlink"):
        directory.open_file("link")  # never through a link


def test_a_copy_mode_repeat_copies_again_and_never_hands_over_altered_bytes(model: Path, cache: Path,
                                                                            tmp_path: Path) -> None:
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0")).returncode == 0
    time.sleep(RACY_SECONDS + 0.2)
    handoff = tmp_path / "h"
    args = cmd_init_args(model, cache, handoff, "--verify", "stamp", "--handoff", "copy")
    for _ in range(2):
        assert run_trtwarm(*args).returncode == 0
    before = Path(os.readlink(handoff / "engine"))
    third = run_trtwarm(*args)
    assert REPEAT in third.stderr and third.returncode == 0, third.stderr
    after = Path(os.readlink(handoff / "engine"))
    assert after != before and after.parent.parent == handoff / "copies" and not before.exists()
    engine = entries(cache)[0] / "engine.plan"
    assert after.read_bytes() == engine.read_bytes()
    assert engine_ready(_report(handoff))[0]
    _rewrite_same_size(engine)
    fourth = run_trtwarm(*args)
    assert REPEAT not in fourth.stderr and fourth.summary["result"] == "built", fourth.stderr
    assert Path(os.readlink(handoff / "engine")).read_bytes() == engine.read_bytes()


def test_the_sidecar_is_not_ready_on_a_linked_engine_rewritten_in_place(model: Path, cache: Path,
                                                                         tmp_path: Path) -> None:
    handoff = tmp_path / "h"
    assert run_trtwarm(*cmd_init_args(model, cache, handoff, "--handoff", "link")).returncode == 0
    _rewrite_same_size(Path(_report(handoff)["path"]))
    side = SidecarProc(cache, handoff)
    try:
        status, body = get(side.url + "/readyz")
    finally:
        side.stop()
    assert status == 503 and "rewritten or replaced after it was handed over" in body, body
