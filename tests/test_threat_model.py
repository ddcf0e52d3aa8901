"""The threat model of docs/trust.md, one test (at least) per row: each plays the attacker of its row with real
processes, real files and real keys, and asserts what trtwarm detects, prevents, or (honestly) does not."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

from conftest import cmd_init_args, entries, run_trtwarm
from test_trust import keypair, policy, sig

from trtwarm.cli.demo import make_model

EVIL = b"EVIL: code someone wants the GPU server to run" * 64


def _forge(entry: Path, private: Path, name: str | None = None, payload: bytes = EVIL) -> None:
    """What a holder of *private* with write access to the volume can do: replace the engine, rewrite the manifest
    consistently (optionally under another entry *name*), and sign the result with that key (library calls: the
    attacker needs no trtwarm command)."""
    from trtwarm.trust import envelope, keys

    doc = json.loads((entry / "manifest.json").read_text())
    (entry / doc["engine_file"]).write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    doc.update(engine_sha256=digest, engine_bytes=len(payload), name=name or doc["name"])
    for item in doc["files"]:
        if item["role"] == "engine":
            item.update(sha256=digest, bytes=len(payload))
    (entry / "manifest.json").write_text(json.dumps(doc))
    key, keyid = keys.load_private(private)
    signed = envelope.sign(envelope.statement(doc, doc["files"]), key, keyid)
    (entry / "manifest.sig.json").write_text(json.dumps(signed))


def _handed_over(handoff: Path) -> bytes | None:
    link = handoff / "engine"
    return link.resolve().read_bytes() if link.exists() else None


def test_a_key_scoped_to_other_models_cannot_vouch_through_the_suffix_lookup(tmp_path: Path, cache: Path) -> None:
    """Row "a holder of a key scoped to other models": the resnet-scoped key signs an engine of bert's cache key
    under the name ``resnet-anything_...--<bert key16>``; the bert consumer's suffix lookup must not take it."""
    resnet_private, resnet_public = keypair(tmp_path, "resnet-team")
    bert = make_model(tmp_path / "models" / "bert.onnx")
    built = run_trtwarm(*cmd_init_args(bert, cache, tmp_path / "h0", "--name", "resnet-anything"))
    assert built.returncode == 0, built.stderr
    [entry] = entries(cache)
    assert entry.name.startswith("resnet-anything_")
    _forge(entry, resnet_private)
    scoped = policy(tmp_path, "enforce", resnet_public, models=["resnet*"])
    consumer = run_trtwarm(*cmd_init_args(bert, cache, tmp_path / "h1", "--read-only", "--trust-policy", str(scoped),
                                          "--lock-timeout", "1s"))
    assert _handed_over(tmp_path / "h1") is None, "the resnet-scoped key vouched for bert's engine"
    assert consumer.returncode == 5, consumer.stderr  # a miss: the read-only consumer waited for a builder
    assert "Traceback" not in consumer.stderr
    assert entries(cache) == [entry]  # a consumer moves nothing


def test_a_directory_that_is_not_the_signed_name_is_untrusted(tmp_path: Path, cache: Path) -> None:
    """The same forgery moved under the bert consumer's own entry name: directory, manifest and signature
    disagree; the consumer refuses it (exit 7) and ``verify --trust-policy`` reports it."""
    resnet_private, resnet_public = keypair(tmp_path, "resnet-team")
    bert = make_model(tmp_path / "models" / "bert.onnx")
    assert run_trtwarm(*cmd_init_args(bert, cache, tmp_path / "h0")).returncode == 0
    [entry] = entries(cache)
    assert entry.name.startswith("bert_")
    _forge(entry, resnet_private, name="resnet-anything" + entry.name[len("bert"):])
    scoped = policy(tmp_path, "enforce", resnet_public, models=["resnet*"])
    consumer = run_trtwarm(*cmd_init_args(bert, cache, tmp_path / "h1", "--read-only", "--trust-policy", str(scoped),
                                          "--lock-timeout", "1s"))
    assert _handed_over(tmp_path / "h1") is None, consumer.stderr
    assert consumer.returncode == 7 and "is not the name the entry was signed under" in consumer.stderr, consumer.stderr
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(scoped), "--json")
    assert verify.returncode != 0, verify.stdout
    [problem] = json.loads(verify.stdout)["problems"]
    assert problem["kind"] == "untrusted" and "is not the name the entry was signed under" in problem["detail"], problem
