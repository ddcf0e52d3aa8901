"""The threat model of docs/trust.md, one test (at least) per row: each plays the attacker of its row with real
processes, real files and real keys, and asserts what trtwarm detects, prevents, or (honestly) does not."""

from __future__ import annotations

import base64
import hashlib
import json
import os
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


def _rewrite(entry: Path, payload: bytes = EVIL) -> None:
    """Rewrite the engine and the manifest consistently (re-hashed), leaving the old signature: no key needed."""
    doc = json.loads((entry / "manifest.json").read_text())
    (entry / doc["engine_file"]).write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    doc.update(engine_sha256=digest, engine_bytes=len(payload))
    for item in doc["files"]:
        if item["role"] == "engine":
            item.update(sha256=digest, bytes=len(payload))
    (entry / "manifest.json").write_text(json.dumps(doc))


def test_sign_does_not_launder_a_rewritten_entry(model: Path, cache: Path, tmp_path: Path) -> None:
    """Row "a volume writer, then an operator following the hint": the consumer's hint says rebuild, and `trtwarm
    sign` refuses an entry whose signature is over another manifest, unless the loud override names the bytes."""
    private, public = keypair(tmp_path, "ci")
    enforce = policy(tmp_path, "enforce", public)
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    before = sig(entry)
    _rewrite(entry)
    consumer = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--read-only", "--trust-policy", str(enforce)))
    assert consumer.returncode == 7 and "rebuild it" in consumer.stderr, consumer.stderr
    assert "or sign it" not in consumer.stderr and "`trtwarm sign` the entry" not in consumer.stderr
    laundered = run_trtwarm("sign", entry.name, "--key", str(private), "--cache-dir", str(cache))
    assert laundered.returncode == 8 and "over other content" in laundered.stdout, laundered.stdout
    assert "rebuild it" in laundered.stderr and sig(entry) == before  # nothing written
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy", str(enforce)))
    assert again.returncode == 7 and _handed_over(tmp_path / "h2") is None
    vouched = run_trtwarm("sign", entry.name, "--key", str(private), "--cache-dir", str(cache),
                          "--i-vouch-for-these-bytes")
    digest = hashlib.sha256(EVIL).hexdigest()
    assert vouched.returncode == 0 and "vouching for these bytes" in vouched.stderr, vouched.stderr
    assert f"sha256:{digest}" in vouched.stderr  # the log names what was vouched for
    assert len(sig(entry)["signatures"]) == 1  # the old signature over other content was dropped


def test_concurrent_signers_lose_no_signature(tmp_path: Path, cache: Path) -> None:
    """Row "two operators sign at once": 8 entries x 6 concurrent `trtwarm sign` processes, each with its own key;
    every envelope ends with all 6 signatures (a read-modify-write under the entry's lock)."""
    from conftest import env_for, trtwarm_argv

    signers = [keypair(tmp_path, f"k{i}") for i in range(6)]
    trusted = policy(tmp_path, "enforce", *(pub for _key, pub in signers))
    for i in range(8):
        seeded = make_model(tmp_path / "m" / f"m{i}.onnx", seed=i)
        built = run_trtwarm(*cmd_init_args(seeded, cache, tmp_path / f"h{i}"))
        assert built.returncode == 0, built.stderr
    names = [e.name for e in entries(cache)]
    assert len(names) == 8
    procs = [subprocess.Popen(trtwarm_argv("sign", *names, "--key", str(key), "--cache-dir", str(cache),
                                           "--trust-policy", str(trusted)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for())
             for key, _pub in signers]
    outcomes = [(p.wait(120), *p.communicate()) for p in procs]
    assert all(rc == 0 for rc, _out, _err in outcomes), outcomes
    counts = [len(sig(e)["signatures"]) for e in entries(cache)]
    assert counts == [6] * 8, counts
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(trusted), "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["problems"] == [], verify.stdout


def _envelope_garbage(good: dict) -> dict[str, object]:
    item = good["signatures"][0]
    return {
        "keyid a list": {**good, "signatures": [{"keyid": [item["keyid"]], "sig": item["sig"]}]},
        "keyid an object": {**good, "signatures": [{"keyid": {"id": item["keyid"]}, "sig": item["sig"]}]},
        "sig a number": {**good, "signatures": [{"keyid": item["keyid"], "sig": 12}]},
        "payload not base64": {**good, "payload": "%%% not base64 %%%"},
        "signatures not a list": {**good, "signatures": {"0": item}},
        "signatures of strings": {**good, "signatures": ["sig"]},
        "too many signatures": {**good, "signatures": [{"keyid": "x", "sig": "AA=="}] * 10000},
        "envelope a list": [good],
        "envelope null": None,
        "huge number": {**good, "payloadType": 10 ** 4000},
        "huge sig": {**good, "signatures": [{"keyid": item["keyid"], "sig": "A" * 500000}]},
    }


def test_a_malformed_envelope_is_untrusted_never_a_crash(model: Path, cache: Path, tmp_path: Path) -> None:
    """Row "a volume writer, garbage in manifest.sig.json": init exits 7 with a reason, verify and show report it
    untrusted; sign drops malformed signature items (and re-signs) or refuses a malformed envelope; a file nested
    too deeply for a JSON parser likewise."""
    private, public = keypair(tmp_path, "ci")
    enforce = str(policy(tmp_path, "enforce", public))
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    good = sig(entry)
    cases = {name: json.dumps(doc) for name, doc in _envelope_garbage(good).items()}
    cases["nested too deep"] = "[" * 200000 + "]" * 200000
    for i, (name, text) in enumerate(cases.items()):
        (entry / "manifest.sig.json").write_text(text)
        init = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"c{i}", "--read-only", "--trust-policy", enforce))
        assert init.returncode == 7 and "Traceback" not in init.stderr, (name, init.stderr)
        assert "refuses entry" in init.stderr, (name, init.stderr)
        verify = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", enforce, "--json")
        assert verify.returncode != 0 and "Traceback" not in verify.stderr, (name, verify.stderr)
        assert [p["kind"] for p in json.loads(verify.stdout)["problems"]] == ["untrusted"], (name, verify.stdout)
        show = run_trtwarm("show", entry.name, "--cache-dir", str(cache), "--trust-policy", enforce)
        assert show.returncode == 0 and "NOT trusted" in show.stdout, (name, show.stdout, show.stderr)
        signed = run_trtwarm("sign", entry.name, "--key", str(private), "--cache-dir", str(cache))
        assert "Traceback" not in signed.stderr and signed.returncode in (0, 8), (name, signed.stderr)
        if signed.returncode == 0:  # malformed items beside a well-formed envelope: dropped, never written back
            assert "dropping" in signed.stderr and sig(entry)["signatures"] == good["signatures"], name
        else:  # the envelope itself is garbage: refused, left for a rebuild
            assert "malformed" in signed.stdout or "not JSON" in signed.stdout, (name, signed.stdout)
    (entry / "manifest.sig.json").write_text(json.dumps(good))
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "ok", "--read-only", "--trust-policy",
                                      enforce)).summary["result"] == "hit"


def test_ecdsa_uses_the_curves_hash_and_interoperates(model: Path, cache: Path, tmp_path: Path) -> None:
    """P-384 signs with SHA-384: securesystemslib verifies trtwarm's envelope and trtwarm verifies one that
    securesystemslib signed; an old P-384 envelope signed with SHA-256 still verifies; URL-safe base64 is read."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    from trtwarm.trust.envelope import PAYLOAD_TYPE, pae

    private, public = keypair(tmp_path, "p384", "ecdsa-p384")
    enforce = str(policy(tmp_path, "enforce", public))
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    good = sig(entry)
    keyid = good["signatures"][0]["keyid"]
    sslib_key = SSlibKey.from_crypto(load_pem_public_key(public.read_bytes()), keyid)
    assert sslib_key.scheme == "ecdsa-sha2-nistp384"
    assert set(Envelope.from_dict(good).verify([sslib_key], 1)) == {keyid}  # the interoperable pairing
    # securesystemslib signs the same statement: trtwarm's consumer accepts it
    crypto_key = load_pem_private_key(private.read_bytes(), None)
    theirs = Envelope(base64.b64decode(good["payload"]), PAYLOAD_TYPE, {})
    theirs.sign(CryptoSigner(crypto_key, sslib_key))
    (entry / "manifest.sig.json").write_text(json.dumps(theirs.to_dict()))
    hit = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--read-only", "--trust-policy", enforce))
    assert hit.returncode == 0 and hit.summary["result"] == "hit", hit.stderr
    # an envelope of trtwarm 0.1: P-384 with SHA-256, the signature in URL-safe base64 without padding
    old = crypto_key.sign(pae(PAYLOAD_TYPE, base64.b64decode(good["payload"])), ec.ECDSA(hashes.SHA256()))
    (entry / "manifest.sig.json").write_text(json.dumps({**good, "signatures": [
        {"keyid": keyid, "sig": base64.urlsafe_b64encode(old).decode().rstrip("=")}]}))
    legacy = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy", enforce))
    assert legacy.returncode == 0 and legacy.summary["result"] == "hit", legacy.stderr


def test_a_replayed_old_signed_entry_is_served(model: Path, cache: Path, tmp_path: Path) -> None:
    """Row "replay": an entry a trusted key once signed for this key, put back, is a genuine build for this key:
    served (not detected; the threat model says so). Revocation is per key: drop the key, the replay is refused."""
    import shutil

    private, public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    shutil.copytree(entry, tmp_path / "saved")
    shutil.rmtree(entry)
    shutil.copytree(tmp_path / "saved", entry)
    replayed = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--read-only", "--trust-policy",
                                          str(policy(tmp_path, "enforce", public))))
    assert replayed.returncode == 0 and replayed.summary["result"] == "hit"
    _other_private, other = keypair(tmp_path, "ci-2027")
    revoked = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy",
                                         str(policy(tmp_path, "enforce", other))))
    assert revoked.returncode == 7


def test_a_misspelt_policy_fails_closed(model: Path, cache: Path, tmp_path: Path) -> None:
    """Row "a careless operator": `"Mode"` for `"mode"` and `"model"` for `"models"` used to turn trust off or
    widen a key to every model. After a good start, a bad policy hands over nothing (the old hand-off is cleared)."""
    private, public = keypair(tmp_path, "ci")
    handoff = tmp_path / "h"
    assert run_trtwarm(*cmd_init_args(model, cache, handoff, "--signing-key", str(private))).returncode == 0
    assert _handed_over(handoff) is not None
    for bad in ({"Mode": "enforce", "keys": [{"name": "ci", "public_key_file": public.name}]},
                {"mode": "enforce", "keys": [{"name": "ci", "public_key_file": public.name, "model": ["x*"]}]},
                {"mode": "enforce", "keys": [{"name": "ci", "public_key_file": public.name, "models": []}]}):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        done = run_trtwarm(*cmd_init_args(model, cache, handoff, "--read-only", "--trust-policy", str(path)))
        assert done.returncode == 2 and "nothing is trusted or served" in done.stderr, done.stderr
        assert _handed_over(handoff) is None and not json.loads((handoff / "engine.json").read_text())["ready"]


def test_a_policy_field_given_twice_fails_closed(model: Path, cache: Path, tmp_path: Path) -> None:
    """Row "a careless operator": ``"mode": "enforce", ..., "mode": "off"`` was read last-wins, i.e. off, and the
    unsigned entry below was served. A key given twice in any object of the policy is refused (exit 2)."""
    _private, public = keypair(tmp_path, "ci")
    handoff = tmp_path / "h"
    assert run_trtwarm(*cmd_init_args(model, cache, handoff)).returncode == 0  # unsigned: enforce refuses it
    key = json.dumps({"name": "ci", "public_key_file": public.name})
    for text in (f'{{"mode": "enforce", "keys": [{key}], "mode": "off"}}',
                 f'{{"mode": "enforce", "keys": [{key[:-1]}, "models": ["x*"], "models": ["*"]}}]}}'):
        path = tmp_path / "twice.json"
        path.write_text(text)
        done = run_trtwarm(*cmd_init_args(model, cache, handoff, "--read-only", "--trust-policy", str(path)))
        assert done.returncode == 2 and "given twice" in done.stderr, done.stderr
        assert "nothing is trusted or served" in done.stderr and "Traceback" not in done.stderr
        assert _handed_over(handoff) is None


def _configmap_volume(where: Path, files: dict[str, bytes]) -> Path:
    """*files* laid out as the kubelet mounts a ConfigMap or Secret volume: each name a link to ``..data/<name>``,
    ``..data`` a link to a timestamped directory holding the files."""
    stamped = where / "..2026_12_06_00_00_00.000000001"
    stamped.mkdir(parents=True)
    for name, data in files.items():
        (stamped / name).write_bytes(data)
        (where / name).symlink_to(f"..data/{name}")
    (where / "..data").symlink_to(stamped.name)
    return where


def test_a_policy_and_keys_mounted_from_a_configmap_are_read(model: Path, cache: Path, tmp_path: Path) -> None:
    """The chart mounts the policy and its keys from a ConfigMap, and the signing key from a Secret: every file
    there is a link into ``..data``. The policy was read without following links (as a file of the volume is) and
    every init under the chart's policy exited 2. Read now (links followed: the operator's files); a FIFO put where
    a key belongs fails closed (exit 2) at once instead of waiting for a writer."""
    private, public = keypair(tmp_path, "ci")
    doc = {"mode": "enforce", "keys": [{"name": "ci", "public_key_file": "ci.pub"}]}
    trust = _configmap_volume(tmp_path / "trust", {"policy.json": json.dumps(doc).encode(), "ci.pub":
                                                   public.read_bytes()})
    signing = _configmap_volume(tmp_path / "signing", {"ci.key": private.read_bytes()})
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--trust-policy", str(trust / "policy.json"),
                                       "--signing-key", str(signing / "ci.key")))
    assert built.returncode == 0 and built.summary["result"] == "built", built.stderr
    hit = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--read-only", "--trust-policy",
                                     str(trust / "policy.json")))
    assert hit.returncode == 0 and hit.summary["result"] == "hit", hit.stderr
    os.mkfifo(tmp_path / "fifo.pub")
    (tmp_path / "fifo.json").write_text(json.dumps({"mode": "enforce", "keys": [{"name": "ci", "public_key_file":
                                                                                 "fifo.pub"}]}))
    fifo = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy",
                                      str(tmp_path / "fifo.json")), timeout=60)
    assert fifo.returncode == 2 and "fifo.pub" in fifo.stderr and _handed_over(tmp_path / "h2") is None, fifo.stderr
