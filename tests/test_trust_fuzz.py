"""Hypothesis fuzz tests of the trust parsers: any JSON a volume, a store or an operator can put in a signature
envelope, a signed statement or a trust policy gives a verdict or a ConfigError, never another exception."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtwarm.errors import ConfigError
from trtwarm.trust import envelope, keys, schema
from trtwarm.trust.policy import Gate, Policy, TrustedKey
from trtwarm.volume.entry import Entry

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                  max_size=4), max_leaves=20)
B64ISH = st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
                   st.binary(max_size=40).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")))
SIG_ITEM = st.one_of(JSON, st.fixed_dictionaries({"keyid": st.one_of(JSON, st.text(max_size=64)),
                                                  "sig": st.one_of(JSON, B64ISH)}))
ENVELOPE = st.one_of(JSON, st.fixed_dictionaries({
    "payloadType": st.one_of(st.just(envelope.PAYLOAD_TYPE), JSON),
    "payload": st.one_of(B64ISH, JSON),
    "signatures": st.one_of(st.lists(SIG_ITEM, max_size=5), JSON)}))


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str, bytes]:
    """A real Ed25519 key: (private key, key id, public PEM)."""
    where = tmp_path_factory.mktemp("keys")
    kid = keys.generate(where / "k.key", where / "k.pub")
    return keys.load_private(where / "k.key")[0], kid, (where / "k.pub").read_bytes()


def _manifest() -> dict:
    from trtwarm.key import key_of

    doc = {"schema": 1, "model": {"sha256": "0" * 64, "bytes": 1, "external_data": []}, "builder": {"name": "c"},
           "device": {"kind": "cpu"}, "build": {}}
    key = key_of(doc)
    digest = "a" * 64
    return {"schema": 2, "key": key, "key_document": doc, "name": f"m_cpu_c_model_static--{key[:16]}",
            "engine_file": "e.plan", "engine_sha256": digest, "engine_bytes": 3,
            "files": [{"path": "e.plan", "role": "engine", "bytes": 3, "sha256": digest}]}


@FUZZ
@given(doc=ENVELOPE)
def test_any_envelope_is_a_verdict(doc: object, signer: tuple[object, str, bytes], tmp_path: Path) -> None:
    _private, kid, pem = signer
    manifest = _manifest()
    expected = envelope.statement(manifest, manifest["files"])
    with pytest.raises(envelope.BadSignature):
        envelope.verify(doc, expected, {kid: keys.load_public(pem)})
    gate = Gate(Policy("enforce", (TrustedKey("k", kid, pem),)), "enforce")
    ok, reason = gate.status(Entry(tmp_path / manifest["name"], manifest), doc if doc else {"x": 1}, model="m")
    assert ok is False and isinstance(reason, str) and reason


@FUZZ
@given(payload=JSON)
def test_a_validly_signed_statement_that_is_not_the_manifests_is_refused(
        payload: object, signer: tuple[object, str, bytes]) -> None:
    """The statement is parsed only after its signature verified, and must equal the one rebuilt from the
    manifest: a trusted key's signature over any other JSON vouches for nothing."""
    private, kid, pem = signer
    manifest = _manifest()
    expected = envelope.statement(manifest, manifest["files"])
    signed = envelope.sign(payload, private, kid)  # type: ignore[arg-type]
    if payload == expected:
        return
    with pytest.raises(envelope.BadSignature, match="does not match manifest.json|is not JSON"):  # NaN: not JSON
        envelope.verify(signed, expected, {kid: keys.load_public(pem)})
    assert envelope.verify(envelope.sign(expected, private, kid), expected, {kid: keys.load_public(pem)}) == kid


@FUZZ
@given(items=st.lists(SIG_ITEM, max_size=6))
def test_sign_keeps_only_well_formed_items(items: list, signer: tuple[object, str, bytes]) -> None:
    private, kid, _pem = signer
    manifest = _manifest()
    doc = envelope.statement(manifest, manifest["files"])
    old = {"payloadType": envelope.PAYLOAD_TYPE, "payload": base64.b64encode(envelope.payload_bytes(doc)).decode(),
           "signatures": items}
    new = envelope.sign(doc, private, kid, old)
    assert all(isinstance(s, dict) and set(s) == {"keyid", "sig"} and isinstance(s["keyid"], str)
               and isinstance(s["sig"], str) for s in new["signatures"])
    assert [s["keyid"] for s in new["signatures"]].count(kid) == 1
    envelope.parse(json.loads(json.dumps(new)))  # what sign writes parses


POLICY_FIELDS = st.sampled_from([*schema.POLICY_FIELDS, "Mode", "key", "comment"])
KEY_FIELDS = st.sampled_from([*schema.KEY_FIELDS, "model", "Models", "public-key", "scope"])
KEY_ITEM = st.one_of(JSON, st.dictionaries(KEY_FIELDS, st.one_of(JSON, st.just("k.pub"), st.just(["resnet*"]),
                                                                 st.just([]), st.just(["1f2e"])), max_size=5))
POLICY = st.one_of(JSON, st.dictionaries(POLICY_FIELDS, st.one_of(
    JSON, st.sampled_from(["enforce", "warn", "off", "strict"]), st.lists(KEY_ITEM, max_size=3)), max_size=3))


@FUZZ
@given(doc=POLICY, mode_given=st.booleans())
def test_any_policy_is_parsed_or_refused_naming_a_field(doc: object, mode_given: bool, tmp_path: Path) -> None:
    (tmp_path / "k.pub").write_bytes(b"not a key")
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(doc))
    try:
        spec = schema.parse(doc, str(path), mode_given)
    except ConfigError as exc:
        assert "trust policy" in exc.message and exc.hint
        with pytest.raises(ConfigError):
            Policy.load(path, mode_given)
        return
    assert spec.keys
    assert spec.mode in ("enforce", "warn", "off") or (spec.mode is None and mode_given)
    for k in spec.keys:  # what passed has exactly one key source and no empty scope
        assert (k.public_key is None) != (k.public_key_file is None)
    with pytest.raises(ConfigError):  # the named key file holds no key: refused at load, still a ConfigError
        Policy.load(path, mode_given)


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(["key", "name", "key_document", "files", "engine_file", "built_by"]),
                               JSON, max_size=3))
def test_any_manifest_beside_a_good_envelope_is_a_verdict(changes: dict, signer: tuple[object, str, bytes],
                                                          tmp_path: Path) -> None:
    """The statement is rebuilt from whatever manifest.json holds (``show --trust-policy`` reads any): a verdict,
    and a changed manifest is never trusted under the envelope signed for the original."""
    private, kid, pem = signer
    manifest = _manifest()
    good = envelope.sign(envelope.statement(manifest, manifest["files"]), private, kid)
    changed = {**manifest, **changes}
    gate = Gate(Policy("enforce", (TrustedKey("k", kid, pem),)), "enforce")
    name = changed["name"] if isinstance(changed.get("name"), str) and changed["name"] else "x"
    ok, reason = gate.status(Entry(tmp_path / name, changed), good)
    assert isinstance(reason, str) and reason
    if ok:  # trusted only where every signed field is unchanged (built_by's unsigned fields may differ)
        original = envelope.statement(manifest, manifest["files"])
        assert envelope.statement(changed, changed["files"]) == original
    signed_fields = ("key", "name", "key_document", "files", "engine_file")
    if any(changed.get(f) != manifest.get(f) for f in signed_fields):
        assert not ok, reason
