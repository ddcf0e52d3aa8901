"""Signed manifests and the trust policy, with real keys, real processes and a third-party DSSE verifier."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, run_trtwarm

from trtwarm.cli.demo import make_model


def keypair(tmp_path: Path, name: str, kind: str = "ed25519") -> tuple[Path, Path]:
    """``trtwarm keys generate --out tmp/NAME``: (private, public)."""
    done = run_trtwarm("keys", "generate", "--out", str(tmp_path / name), "--type", kind, "--json")
    assert done.returncode == 0, done.stderr
    return tmp_path / f"{name}.key", tmp_path / f"{name}.pub"


def policy(tmp_path: Path, mode: str, *pubs: Path, models: list[str] | None = None) -> Path:
    """A policy file trusting *pubs* (by file, relative to the policy) for *models* (all when None)."""
    keys = [{"name": p.stem, "public_key_file": p.name, **({"models": models} if models else {})} for p in pubs]
    path = tmp_path / f"policy-{mode}-{'-'.join(p.stem for p in pubs)}.json"
    path.write_text(json.dumps({"mode": mode, "keys": keys}))
    return path


def sig(entry: Path) -> dict:
    return json.loads((entry / "manifest.sig.json").read_text())


def test_keys_generate_is_private_and_never_overwrites(tmp_path: Path) -> None:
    private, public = keypair(tmp_path, "ci")
    assert os.stat(private).st_mode & 0o777 == 0o600 and b"PUBLIC KEY" in public.read_bytes()
    before = private.read_bytes()
    again = run_trtwarm("keys", "generate", "--out", str(tmp_path / "ci"))
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr and "hint:" in again.stderr
    assert "Traceback" not in again.stderr and private.read_bytes() == before


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_a_signed_entry_verifies_with_third_party_tools(model: Path, cache: Path, tmp_path: Path, kind: str) -> None:
    """securesystemslib (the DSSE reference implementation) and openssl verify what trtwarm signed."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    private, public = keypair(tmp_path, "ci", kind)
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--signing-key", str(private)),
                        env={"TRTWARM_CI_JOB": "https://ci.example/job/42", "POD_NAME": "prebuild-x"})
    assert built.returncode == 0, built.stderr
    [entry] = entries(cache)
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", str(public), "-outform", "DER"], capture_output=True,
                         check=True).stdout
    keyid = hashlib.sha256(der).hexdigest()  # the key id as the README says to compute it
    envelope = Envelope.from_dict(sig(entry))
    assert set(envelope.verify([SSlibKey.from_crypto(load_pem_public_key(public.read_bytes()), keyid)], 1)) == {keyid}
    statement = json.loads(envelope.payload)
    manifest = json.loads((entry / "manifest.json").read_text())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [{"name": f["path"], "digest": {"sha256": f["sha256"]}} for f in manifest["files"]]
    assert statement["predicate"]["key_document"] == manifest["key_document"]
    assert statement["predicate"]["built_by"] == {"pod": "prebuild-x", "namespace": None, "node": None,
                                                  "ci_job": "https://ci.example/job/42"}
    assert str(tmp_path) not in envelope.payload.decode()  # nothing host-path-specific is signed
    for item in statement["subject"]:  # and the digests are the files'
        assert hashlib.sha256((entry / item["name"]).read_bytes()).hexdigest() == item["digest"]["sha256"]
    # openssl, on the DSSE pre-authentication encoding built as the DSSE spec defines it
    payload_type = b"application/vnd.in-toto+json"
    (tmp_path / "pae.bin").write_bytes(b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(envelope.payload),
                                                                   envelope.payload))
    (tmp_path / "sig.der").write_bytes(base64.b64decode(sig(entry)["signatures"][0]["sig"]))
    pae, signature = str(tmp_path / "pae.bin"), str(tmp_path / "sig.der")
    command = (["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(public), "-rawin", "-in", pae, "-sigfile",
                signature] if kind == "ed25519" else
               ["openssl", "dgst", "-sha256", "-verify", str(public), "-signature", signature, pae])
    checked = subprocess.run(command, capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and "Verified" in checked.stdout + checked.stderr, checked.stdout + checked.stderr


def _tamper(entry: Path, payload: bytes) -> None:
    """Replace the engine and rewrite the manifest to match it: what anyone who can write the volume can do."""
    doc = json.loads((entry / "manifest.json").read_text())
    engine = entry / doc["engine_file"]
    engine.write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    doc.update(engine_sha256=digest, engine_bytes=len(payload))
    for item in doc["files"]:
        if item["role"] == "engine":
            item.update(sha256=digest, bytes=len(payload))
    (entry / "manifest.json").write_text(json.dumps(doc))


def test_a_rewritten_manifest_is_refused_under_enforce(model: Path, cache: Path, tmp_path: Path) -> None:
    private, public = keypair(tmp_path, "ci")
    enforce = policy(tmp_path, "enforce", public)
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    assert run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(enforce)).returncode == 0
    _tamper(entry, b"not an engine: code someone wants the GPU server to run")
    assert run_trtwarm("verify", "--cache-dir", str(cache)).returncode == 0  # digests alone cannot tell
    consumer = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--verify", "load",
                                          "--trust-policy", str(enforce)))
    assert consumer.returncode == 7, consumer.stderr
    assert "signed statement does not match manifest.json" in consumer.stderr and "hint:" in consumer.stderr
    assert "does not load" not in consumer.stderr  # refused before the builder loaded a byte of it
    assert json.loads((tmp_path / "h2" / "engine.json").read_text())["ready"] is False
    assert entries(cache) == [entry]  # a consumer leaves it for a builder: nothing moved or lost
    builder = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h3", "--trust-policy", str(enforce),
                                         "--signing-key", str(private)))
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert "quarantin" in builder.stderr
    [rebuilt] = entries(cache)
    assert b"someone" not in (rebuilt / json.loads((rebuilt / "manifest.json").read_text())["engine_file"]).read_bytes()
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h4", "--read-only", "--trust-policy", str(enforce)))
    assert again.returncode == 0 and again.summary["result"] == "hit", again.stderr


def test_a_signature_from_an_untrusted_key_is_refused(model: Path, cache: Path, tmp_path: Path) -> None:
    _trusted_private, trusted = keypair(tmp_path, "ci")
    stranger, _stranger_public = keypair(tmp_path, "stranger")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--signing-key", str(stranger))).returncode == 0
    refused = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy",
                                         str(policy(tmp_path, "enforce", trusted))))
    assert refused.returncode == 7 and "not signed by a trusted key" in refused.stderr, refused.stderr
    building = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h3", "--signing-key", str(stranger),
                                          "--trust-policy", str(policy(tmp_path, "enforce", trusted))))
    assert building.returncode == 2 and "is not trusted for" in building.stderr  # it would sign what no one trusts


def test_key_scope_limits_a_key_to_its_models(model: Path, cache: Path, tmp_path: Path) -> None:
    private, public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--signing-key", str(private))).returncode == 0
    scoped = policy(tmp_path, "enforce", public, models=["resnet*"])  # this model is "mlp"
    refused = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy", str(scoped)))
    assert refused.returncode == 7, refused.stderr
    ours = policy(tmp_path, "enforce", public, models=["mlp*"])
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h3", "--read-only", "--trust-policy",
                                      str(ours))).summary["result"] == "hit"


def test_rotation_with_two_keys(tmp_path: Path, cache: Path) -> None:
    old_private, old = keypair(tmp_path, "old")
    new_private, new = keypair(tmp_path, "new")
    first, second = make_model(tmp_path / "m" / "first.onnx"), make_model(tmp_path / "m" / "second.onnx", seed=1)
    assert run_trtwarm(*cmd_init_args(first, cache, tmp_path / "h1", "--signing-key", str(old_private))).returncode == 0
    assert run_trtwarm(*cmd_init_args(second, cache, tmp_path / "h2", "--signing-key",
                                      str(new_private))).returncode == 0
    both = policy(tmp_path, "enforce", old, new)
    for model, handoff in ((first, "h3"), (second, "h4")):  # during rotation both keys are trusted
        hit = run_trtwarm(*cmd_init_args(model, cache, tmp_path / handoff, "--read-only", "--trust-policy", str(both)))
        assert hit.returncode == 0 and hit.summary["result"] == "hit", hit.stderr
    [old_entry] = [e for e in entries(cache) if e.name.startswith("first")]
    blind = run_trtwarm("sign", old_entry.name, "--key", str(new_private), "--cache-dir", str(cache))
    assert blind.returncode == 8 and "that this command cannot check (pass --trust-policy" in blind.stdout
    dry = run_trtwarm("sign", old_entry.name, "--key", str(new_private), "--cache-dir", str(cache), "--dry-run",
                      "--trust-policy", str(both))
    assert dry.returncode == 0 and "would sign" in dry.stdout and len(sig(old_entry)["signatures"]) == 1
    key = json.loads((old_entry / "manifest.json").read_text())["key"]
    signed = run_trtwarm("sign", key[:12], "--key", str(new_private), "--cache-dir", str(cache), "--json",
                         env={"TRTWARM_TRUST_POLICY": str(both)})
    assert signed.returncode == 0, signed.stderr
    assert json.loads(signed.stdout)["entries"][0]["result"] == "signed"
    assert len(sig(old_entry)["signatures"]) == 2  # re-signed by the new key; the old signature kept
    only_new = policy(tmp_path, "enforce", new)  # the old key is retired (or revoked): the policy drops it
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(only_new), "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["problems"] == [], verify.stdout
    hit = run_trtwarm(*cmd_init_args(first, cache, tmp_path / "h5", "--read-only", "--trust-policy", str(only_new)))
    assert hit.returncode == 0 and hit.summary["result"] == "hit", hit.stderr


def test_warn_serves_and_logs_off_ignores(model: Path, cache: Path, tmp_path: Path) -> None:
    _private, public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")).returncode == 0  # unsigned
    warn = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--trust-policy",
                                      str(policy(tmp_path, "warn", public))))
    assert warn.returncode == 0 and warn.summary["result"] == "hit", warn.stderr
    assert "unsigned (no manifest.sig.json); serving it anyway" in warn.stderr
    off = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h3", "--trust-policy",
                                     str(policy(tmp_path, "enforce", public)), "--trust-mode", "off"))
    assert off.returncode == 0 and off.summary["result"] == "hit" and "unsigned" not in off.stderr
    listed = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(policy(tmp_path, "warn", public)))
    assert listed.returncode == 0 and "untrusted" in listed.stdout  # reported, not counted, in warn mode


def test_verify_under_enforce_finds_and_quarantines_unsigned(model: Path, cache: Path, tmp_path: Path) -> None:
    _private, public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")).returncode == 0
    enforce = str(policy(tmp_path, "enforce", public))
    found = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", enforce, "--json")
    assert found.returncode == 8
    [problem] = json.loads(found.stdout)["problems"]
    assert problem["kind"] == "untrusted" and problem["detail"] == "unsigned (no manifest.sig.json)"
    dry = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", enforce, "--fix", "--dry-run")
    assert dry.returncode == 8 and len(entries(cache)) == 1
    fixed = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", enforce, "--fix")
    assert fixed.returncode == 0 and entries(cache) == [] and len(list((cache / ".quarantine").iterdir())) == 1


_PEM_ITEM = '"name": "k", "public_key_file": "k.pub"'


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "cannot read the trust policy"),
    ("[" * 100000, "cannot read the trust policy"),
    ('{"mode": "strict", "keys": []}', "mode: 'strict' is not one of enforce, warn, off"),
    ('{"mode": "enforce", "keys": [{"name": "k"}]}', "needs exactly one of public_key"),
    ('{"mode": "enforce", "keys": [{"name": "k", "public_key_file": "absent.pub"}]}', "cannot read public key"),
    ('{"mode": "enforce", "keys": [{"name": "k", "public_key": "hello"}]}', "is not a PEM public key"),
    # the strict schema (docs/trust.md): nothing misspelt or missing turns trust off or widens a key's scope
    ('{"Mode": "enforce", "keys": [{%s}]}' % _PEM_ITEM, "unknown field 'Mode' (did you mean 'mode'?)"),
    ('{"keys": [{%s}]}' % _PEM_ITEM, "mode: is required"),
    ('{"mode": "enforce", "keys": [{%s, "model": ["resnet*"]}]}' % _PEM_ITEM,
     "keys[0]: unknown field 'model' (did you mean 'models'?)"),
    ('{"mode": "enforce", "keys": [{%s, "models": []}]}' % _PEM_ITEM, "keys[0].models: is empty"),
    ('{"mode": "enforce", "keys": [{%s, "key_prefixes": []}]}' % _PEM_ITEM, "keys[0].key_prefixes: is empty"),
    ('{"mode": "enforce", "keys": [{%s, "models": "resnet*"}]}' % _PEM_ITEM, "keys[0].models: must be a list"),
    ('{"mode": "enforce", "keys": [{%s, "key_prefixes": ["xyz"]}]}' % _PEM_ITEM, "is not 1 to 64 hex digits"),
    ('{"mode": "enforce", "keys": [{%s}], "comment": "x"}' % _PEM_ITEM, "unknown field 'comment'"),
    ('{"mode": "enforce", "keys": []}', "keys: must be a non-empty list"),
    ('{"mode": "enforce"}', "keys: is required"),
    ('{"mode": true, "keys": [{%s}]}' % _PEM_ITEM, "mode: 'True' is not one of"),
    ('{"mode": "enforce", "keys": [{%s}, {%s}]}' % (_PEM_ITEM, _PEM_ITEM), "the name 'k' is used twice"),
    ('{"mode": "enforce", "keys": [{%s, "public_key": "x"}]}' % _PEM_ITEM, "not both"),
    ('{"mode": "enforce", "keys": [{"name": 7, "public_key_file": "k.pub"}]}', "keys[0].name: is required"),
    ('{"mode": "enforce", "keys": ["k.pub"]}', "keys[0]: must be an object, not str"),
])
def test_a_bad_policy_is_a_clear_configuration_error(model: Path, cache: Path, tmp_path: Path, content: str,
                                                     message: str) -> None:
    _private, public = keypair(tmp_path, "k")
    bad = tmp_path / "policy.json"
    bad.write_text(content)
    done = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--trust-policy", str(bad)))
    assert done.returncode == 2 and message in done.stderr and "hint:" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not cache.exists()  # refused before the cache was looked at
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(bad))
    assert verify.returncode == 2 and message in verify.stderr, verify.stderr


def test_sign_refuses_a_damaged_entry_and_an_unknown_one(model: Path, cache: Path, tmp_path: Path) -> None:
    private, _public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")).returncode == 0
    [entry] = entries(cache)
    engine = entry / json.loads((entry / "manifest.json").read_text())["engine_file"]
    engine.write_bytes(engine.read_bytes()[:-1] + b"!")
    refused = run_trtwarm("sign", entry.name, "--key", str(private), "--cache-dir", str(cache))
    assert refused.returncode == 8 and "refused" in refused.stdout and "SHA-256" in refused.stdout
    assert not (entry / "manifest.sig.json").exists()
    unknown = run_trtwarm("sign", "deadbeefdeadbeef", "--key", str(private), "--cache-dir", str(cache))
    assert unknown.returncode == 2 and "no entry matches" in unknown.stderr
    nokey = run_trtwarm("sign", entry.name, "--cache-dir", str(cache))
    assert nokey.returncode == 2 and "no signing key" in nokey.stderr


def test_a_rewritten_statement_under_the_old_signature_is_refused(model: Path, cache: Path, tmp_path: Path) -> None:
    """The writer also rewrites the signed statement to match its engine, but cannot sign it."""
    from trtwarm.trust.envelope import payload_bytes, statement

    private, public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    _tamper(entry, b"another engine")
    manifest, envelope = json.loads((entry / "manifest.json").read_text()), sig(entry)
    envelope["payload"] = base64.b64encode(payload_bytes(statement(manifest, manifest["files"]))).decode()
    (entry / "manifest.sig.json").write_text(json.dumps(envelope))
    refused = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--read-only", "--trust-policy",
                                         str(policy(tmp_path, "enforce", public))))
    assert refused.returncode == 7 and "the signature does not verify" in refused.stderr, refused.stderr


def test_enforce_without_a_signing_key_waits_and_says_why(model: Path, cache: Path, tmp_path: Path) -> None:
    _private, public = keypair(tmp_path, "ci")
    waited = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--trust-policy",
                                        str(policy(tmp_path, "enforce", public)), "--lock-timeout", "1s"))
    assert waited.returncode == 5, waited.stderr
    assert "trust policy enforce, no --signing-key: waiting for a builder with a trusted signing key" in waited.stderr
    assert "--read-only" not in waited.stderr  # this Pod was not started --read-only: the message says the real reason
    assert "no signed engine for" in waited.stderr and "give this Pod --signing-key" in waited.stderr
    assert entries(cache) == []  # it built nothing it would itself refuse


@pytest.mark.parametrize("verify", ["stamp", "digest"])
def test_a_signature_verified_before_on_this_node_is_trusted_only_for_the_same_bytes_and_keys(
        model: Path, cache: Path, tmp_path: Path, verify: str) -> None:
    """Under a trust policy, init records each signature it verified in the node-local stamp directory (with
    ``--verify stamp`` and ``digest`` alike); a later hit with the same manifest, envelope and trusted keys skips the
    check, and any change is checked afresh (README, Trust)."""
    private, public = keypair(tmp_path, "ci")
    _stranger_private, stranger = keypair(tmp_path, "stranger")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    stamps = tmp_path / "node-stamps"
    consumer = ("--read-only", "--verify", verify, "--stamp-dir", str(stamps), "--trust-policy")

    def hit(trusted: Path, handoff: str):  # noqa: ANN202
        return run_trtwarm(*cmd_init_args(model, cache, tmp_path / handoff, *consumer, str(trusted)))

    first = hit(policy(tmp_path, "enforce", public), "h1")
    assert first.summary["result"] == "hit" and "verified before" not in first.stderr, first.stderr
    assert len(list(stamps.glob("sig-*.json"))) == 1
    second = hit(policy(tmp_path, "enforce", public), "h2")
    assert second.summary["result"] == "hit" and "signature verified before on this node" in second.stderr
    revoked = hit(policy(tmp_path, "enforce", stranger), "h3")  # the ci key rotated out: its record means nothing
    assert revoked.returncode == 7 and "not signed by a trusted key" in revoked.stderr, revoked.stderr
    _tamper(entry, b"not an engine")
    altered = hit(policy(tmp_path, "enforce", public), "h4")
    assert altered.returncode == 7 and "signed statement does not match manifest.json" in altered.stderr
    assert entries(cache) == [entry]  # a read-only consumer moves nothing


def test_an_entry_a_volume_writer_slips_in_during_a_build_is_checked_not_handed_over(model: Path, cache: Path,
                                                                                    tmp_path: Path) -> None:
    """Under enforce, a builder whose publish finds the name taken (here by an unsigned entry a writer of the volume
    copied in while it built) hands over nothing it did not check: the intruder is refused and replaced."""
    from conftest import spawn, wait_for_log

    private, public = keypair(tmp_path, "ci")
    gate, source = tmp_path / "gate", tmp_path / "source"
    command = f"sh -c 'while [ -e {gate} ]; do sleep 0.05; done; cp {source} {{output}}'"

    def args(where: str, *extra: str) -> list[str]:
        argv = cmd_init_args(model, tmp_path / where, tmp_path / f"h-{where}", *extra)
        argv[argv.index("--build-command") + 1] = command
        return argv

    source.write_bytes(b"EVIL" * 1000)  # the intruder: the same key, other bytes, no signature
    assert run_trtwarm(*args("rogue")).returncode == 0
    [rogue] = entries(tmp_path / "rogue")
    source.write_bytes(b"GOOD" * 1000)
    gate.touch()
    builder = spawn(args("cache", "--signing-key", str(private), "--trust-policy",
                         str(policy(tmp_path, "enforce", public))))
    wait_for_log(builder, "running build command")
    subprocess.run(["cp", "-a", str(rogue), str(cache / "entries" / rogue.name)], check=True)
    gate.unlink()
    assert builder.wait(60) == 0, builder.log.read_text()  # type: ignore[attr-defined]
    handed = (tmp_path / "h-cache" / "engine").resolve().read_bytes()
    assert handed == b"GOOD" * 1000, "the unsigned entry was handed over"
    assert "unsigned" in builder.log.read_text()  # type: ignore[attr-defined]


def test_ls_shows_a_re_signed_entry_as_ok_without_another_verify(model: Path, cache: Path, tmp_path: Path) -> None:
    """verify (enforce) finds the entry unsigned, ls shows that finding; `trtwarm sign` fixes it, and ls says so at
    once instead of repeating the old finding until the next verify."""
    private, public = keypair(tmp_path, "ci")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1")).returncode == 0
    enforce = str(policy(tmp_path, "enforce", public))
    assert run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", enforce).returncode == 8
    [before] = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)
    assert before["status"] == "damaged" and "(found by trtwarm verify)" in before["problem"]
    signed = run_trtwarm("sign", before["name"], "--key", str(private), "--cache-dir", str(cache))
    assert signed.returncode == 0, signed.stderr
    after = run_trtwarm("ls", "--cache-dir", str(cache), "--json")
    assert after.returncode == 0, after.stderr
    assert [(r["status"], r["problem"]) for r in json.loads(after.stdout)] == [("ok", None)]


def test_a_consumer_imports_the_verifier_while_it_waits_not_after_the_publish(tmp_path: Path) -> None:
    """A Pod of a storm that waits for a signed entry (here: enforce without a signing key, with a node-local stamp
    directory that already exists, so the lookup itself does not preload) has the verifier imported before the entry
    appears: after the publish, every waiter would pay that import at once."""
    from conftest import spawn, wait_for_log

    model, cache = make_model(tmp_path / "m.onnx"), tmp_path / "cache"
    private, public = keypair(tmp_path, "ci")
    enforce = policy(tmp_path, "enforce", public)
    gate, stamps = tmp_path / "gate", tmp_path / "stamps"
    gate.touch()
    stamps.mkdir(mode=0o700)
    command = f"sh -c 'while [ -e {gate} ]; do sleep 0.05; done; cp {{model}} {{output}}'"
    common = ["--build-command", command, "--trust-policy", str(enforce), "--handoff", "link"]
    builder = spawn(cmd_init_args(model, cache, tmp_path / "hb", *common, "--signing-key", str(private)))
    wait_for_log(builder, "building")
    consumer = spawn(cmd_init_args(model, cache, tmp_path / "hc", *common, "--stamp-dir", str(stamps)),
                     env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        wait_for_log(consumer, "waiting for a builder with a trusted signing key")
        wait_for_log(consumer, "cryptography.hazmat.primitives.asymmetric.ed25519")  # before anything is published
        assert not entries(cache)
    finally:
        gate.unlink()
    out, _ = consumer.communicate(timeout=120)
    assert consumer.returncode == 0 and json.loads(out.strip().splitlines()[-1])["result"] == "waited"
    assert builder.wait(timeout=120) == 0
