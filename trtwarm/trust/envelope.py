"""The signature of an entry: an in-toto Statement v1 about its files, in a DSSE envelope (``manifest.sig.json``).

The Statement is derived from the manifest alone, deterministically, so signing twice gives the same payload and a
second key can add its signature to the same envelope (key rotation), and a verifier rebuilds it from the manifest
on disk and compares::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<path>", "digest": {"sha256": "<hex>"}}, ...],      # every file of the entry
     "predicateType": "https://trtwarm.dev/engine/v1",                       # an identifier; nothing is fetched
     "predicate": {"key": ..., "name": ..., "key_document": {...}, "files": [{"path", "role", "bytes"}],
                   "engine_file": ..., "created_utc": ..., "trtwarm_version": ...,
                   "built_by": {"pod", "namespace", "node", "ci_job"}}}

A manifest whose rows carry chunk digests (:mod:`trtwarm.volume.chunks`) gets the predicate type
``https://trtwarm.dev/engine/v2``, whose ``files`` rows add ``chunk_bytes`` and ``chunk_sha256`` to the rows that
have them: the chunk digests a pull verifies are signed like the whole-file digests. A manifest without them gets
exactly the v1 Statement above, so every envelope signed before chunk digests existed still verifies.

Nothing host-specific (no absolute path, hostname or pid) is signed. The envelope follows the DSSE v1 spec
(https://github.com/secure-systems-lab/dsse/blob/master/protocol.md): ``payloadType``
``application/vnd.in-toto+json``, base64 ``payload``, and ``signatures[]`` of ``{keyid, sig}`` where ``sig`` is an
Ed25519 signature (or a DER ECDSA one with the curve's hash: P-256/SHA-256, P-384/SHA-384, P-521/SHA-512) over
``PAE(payloadType, payload)``: what securesystemslib, in-toto and ``openssl pkeyutl -verify -rawin`` (``openssl dgst
-sha256|-sha384|-sha512 -verify`` for ECDSA) check. Base64 is written in the standard alphabet and read in either.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from trtwarm import strictjson
from trtwarm.trust.keys import sign_bytes, verify_signature

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://trtwarm.dev/engine/v1"
#: the predicate type of a Statement whose files rows carry chunk digests
PREDICATE_TYPE_CHUNKS = "https://trtwarm.dev/engine/v2"
_CHUNK_FIELDS = ("chunk_bytes", "chunk_sha256")
_SIGNED_BUILDER_FIELDS = ("pod", "namespace", "node", "ci_job")


class BadSignature(Exception):
    """The envelope is malformed, signed by no trusted key, or does not match the manifest."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def statement(manifest: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    """The in-toto Statement of a manifest whose files are *files* (the manifest's ``files``)."""
    built_by = manifest.get("built_by") if isinstance(manifest.get("built_by"), dict) else {}
    rows = [{"path": f["path"], "role": f["role"], "bytes": f["bytes"], **{k: f[k] for k in _CHUNK_FIELDS if k in f}}
            for f in files]
    chunked = any("chunk_sha256" in row for row in rows)
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": f["path"], "digest": {"sha256": f["sha256"]}} for f in files],
            "predicateType": PREDICATE_TYPE_CHUNKS if chunked else PREDICATE_TYPE,
            "predicate": {"key": manifest.get("key"), "name": manifest.get("name"),
                          "key_document": manifest.get("key_document"), "files": rows,
                          "engine_file": manifest.get("engine_file"), "created_utc": manifest.get("created_utc"),
                          "trtwarm_version": manifest.get("trtwarm_version"),
                          "built_by": {k: built_by.get(k) for k in _SIGNED_BUILDER_FIELDS}}}


def payload_bytes(doc: dict[str, Any]) -> bytes:
    """The serialized Statement (sorted keys, no whitespace: the same manifest always gives the same bytes)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 Pre-Authentication Encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(doc: dict[str, Any], private_key: Any, keyid: str, envelope: Any = None) -> dict[str, Any]:
    """Return a DSSE envelope of *doc* signed by *private_key*; with *envelope* (of the same payload), its other
    well-formed signatures are kept (a second key adds its signature; the same key replaces its own); malformed
    items, and every item of an envelope over another payload, are dropped."""
    payload = payload_bytes(doc)
    sig = sign_bytes(private_key, pae(PAYLOAD_TYPE, payload))
    encoded = base64.b64encode(payload).decode()
    kept: list[dict[str, str]] = []
    if envelope is not None:
        try:
            parsed = parse(envelope)
        except BadSignature:  # a malformed envelope: nothing of it is kept
            parsed = None
        if parsed is not None and parsed.payload == payload:  # malformed items are dropped
            kept = [item for item in parsed.items if item["keyid"] != keyid]
    return {"payloadType": PAYLOAD_TYPE, "payload": encoded,
            "signatures": [*kept, {"keyid": keyid, "sig": base64.b64encode(sig).decode()}]}


#: the most signatures an envelope may carry (more is garbage or an attack on the verifier's time)
MAX_SIGNATURES = 64
_STANDARD = bytes.maketrans(b"-_", b"+/")


@dataclass(frozen=True)
class Parsed:
    """An envelope that has the DSSE shape: its payload and its well-formed ``(keyid, signature bytes)`` items.

    *dropped*: how many items were malformed (not an object; keyid or sig not a string; sig not base64) and were
    left out: they can vouch for nothing, and ``trtwarm sign`` does not write them back."""

    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]
    dropped: int = 0
    items: tuple[dict[str, str], ...] = ()  # the well-formed items as written (what `sign` keeps)


def b64decode(text: str, what: str) -> bytes:
    """Decode base64 in either alphabet (standard ``+/`` or URL-safe ``-_``; padding optional), strictly.

    :raises BadSignature: naming *what* and the accepted alphabets
    """
    raw = text.strip().encode("ascii", "replace")
    if b"-" in raw or b"_" in raw:
        if b"+" in raw or b"/" in raw:
            raise BadSignature(f"{what} mixes the standard (+/) and URL-safe (-_) base64 alphabets")
        raw = raw.translate(_STANDARD)
    raw += b"=" * (-len(raw) % 4)
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise BadSignature(f"{what} is not base64 (standard or URL-safe alphabet, RFC 4648)") from None


def parse(envelope: Any) -> Parsed:
    """Check the DSSE shape of *envelope* (any JSON value). Malformed signature items are dropped, not fatal.

    :raises BadSignature: not an object of ``payloadType`` :data:`PAYLOAD_TYPE`, a base64 ``payload`` and a list
        ``signatures`` (of at most :data:`MAX_SIGNATURES`)
    """
    if not isinstance(envelope, dict) or envelope.get("payloadType") != PAYLOAD_TYPE \
            or not isinstance(envelope.get("payload"), str) or not isinstance(envelope.get("signatures"), list):
        raise BadSignature(f"manifest.sig.json is not a DSSE envelope of {PAYLOAD_TYPE} (payloadType, payload, "
                           "signatures)")
    if len(envelope["signatures"]) > MAX_SIGNATURES:
        raise BadSignature(f"manifest.sig.json carries {len(envelope['signatures'])} signatures, more than "
                           f"{MAX_SIGNATURES}: not a signature envelope")
    payload = b64decode(envelope["payload"], "manifest.sig.json's payload")
    good, items = [], []
    for item in envelope["signatures"]:
        if not isinstance(item, dict) or not isinstance(item.get("keyid"), str) \
                or not isinstance(item.get("sig"), str) or len(item["sig"]) > 4096:
            continue
        try:
            good.append((item["keyid"], b64decode(item["sig"], "a signature")))
        except BadSignature:
            continue
        items.append({"keyid": item["keyid"], "sig": item["sig"]})
    return Parsed(payload, tuple(good), len(envelope["signatures"]) - len(good), tuple(items))


def verify(envelope: Any, expected: dict[str, Any], trusted: dict[str, Any]) -> str:
    """Check *envelope* against the Statement *expected* (rebuilt from the manifest on disk) and the keys *trusted*
    (key id → public key). Return the id of a trusted key whose signature is valid.

    The signature is checked before the payload is parsed (DSSE: never parse what is not authenticated).
    :raises BadSignature: with the reason (any malformed envelope too: never another exception)
    """
    return verify_parsed(parse(envelope), expected, trusted)


def verify_parsed(parsed: Parsed, expected: dict[str, Any], trusted: dict[str, Any]) -> str:
    """:func:`verify` of an envelope :func:`parse` checked already."""
    message, signer = pae(PAYLOAD_TYPE, parsed.payload), None
    for keyid, raw in parsed.signatures:
        key = trusted.get(keyid)
        if key is not None and verify_signature(key, raw, message):
            signer = keyid
            break
    if signer is None:
        if not any(keyid in trusted for keyid, _raw in parsed.signatures):
            shown = ", ".join(keyid[:16] for keyid, _raw in parsed.signatures) or "none"
            dropped = f"; {parsed.dropped} malformed signature item(s) ignored" if parsed.dropped else ""
            raise BadSignature(f"not signed by a trusted key (signed by: {shown}{dropped})")
        raise BadSignature("the signature does not verify (the manifest or its signature was altered)")
    try:
        signed = strictjson.loads(parsed.payload, limit=len(parsed.payload))  # bounded by the envelope's read
    except strictjson.JSONRefused:
        raise BadSignature("the signed payload is not JSON") from None
    if signed != expected:
        raise BadSignature("the signed statement does not match manifest.json (files, digests or key differ)")
    return signer


__all__ = ["MAX_SIGNATURES", "PAYLOAD_TYPE", "PREDICATE_TYPE", "PREDICATE_TYPE_CHUNKS", "STATEMENT_TYPE",
           "BadSignature", "Parsed", "b64decode", "pae", "parse", "payload_bytes", "sign", "statement", "verify",
           "verify_parsed"]
