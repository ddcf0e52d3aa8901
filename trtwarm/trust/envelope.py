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
Ed25519 signature (or a DER ECDSA-SHA256 one, for an ECDSA key) over ``PAE(payloadType, payload)``: what
securesystemslib, in-toto and ``openssl pkeyutl -verify -rawin`` (``openssl dgst -sha256 -verify`` for ECDSA) check.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

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
    built_by = manifest.get("built_by") or {}
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


def sign(doc: dict[str, Any], private_key: Any, keyid: str, envelope: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return a DSSE envelope of *doc* signed by *private_key*; with *envelope* (of the same payload), its other
    signatures are kept (a second key adds its signature; the same key replaces its own)."""
    payload = payload_bytes(doc)
    sig = sign_bytes(private_key, pae(PAYLOAD_TYPE, payload))
    encoded = base64.b64encode(payload).decode()
    kept = []
    if envelope is not None and envelope.get("payload") == encoded and isinstance(envelope.get("signatures"), list):
        kept = [s for s in envelope["signatures"] if isinstance(s, dict) and s.get("keyid") != keyid]
    return {"payloadType": PAYLOAD_TYPE, "payload": encoded,
            "signatures": [*kept, {"keyid": keyid, "sig": base64.b64encode(sig).decode()}]}


def verify(envelope: Any, expected: dict[str, Any], trusted: dict[str, Any]) -> str:
    """Check *envelope* against the Statement *expected* (rebuilt from the manifest on disk) and the keys *trusted*
    (key id → public key). Return the id of a trusted key whose signature is valid.

    The signature is checked before the payload is parsed (DSSE: never parse what is not authenticated).
    :raises BadSignature: with the reason
    """
    if not isinstance(envelope, dict) or envelope.get("payloadType") != PAYLOAD_TYPE \
            or not isinstance(envelope.get("payload"), str) or not isinstance(envelope.get("signatures"), list):
        raise BadSignature(f"manifest.sig.json is not a DSSE envelope of {PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
    except (binascii.Error, ValueError):
        raise BadSignature("manifest.sig.json's payload is not base64") from None
    message, signer = pae(PAYLOAD_TYPE, payload), None
    ids = [s.get("keyid") for s in envelope["signatures"] if isinstance(s, dict)]
    for item in envelope["signatures"]:
        key = trusted.get(item.get("keyid")) if isinstance(item, dict) else None
        if key is None or not isinstance(item.get("sig"), str):
            continue
        try:
            raw = base64.b64decode(item["sig"], validate=True)
        except (binascii.Error, ValueError):
            continue
        if verify_signature(key, raw, message):
            signer = item["keyid"]
            break
    if signer is None:
        if not any(i in trusted for i in ids):
            shown = ", ".join(str(i)[:16] for i in ids) or "none"
            raise BadSignature(f"not signed by a trusted key (signed by: {shown})")
        raise BadSignature("the signature does not verify (the manifest or its signature was altered)")
    try:
        signed = json.loads(payload)
    except ValueError:
        raise BadSignature("the signed payload is not JSON") from None
    if signed != expected:
        raise BadSignature("the signed statement does not match manifest.json (files, digests or key differ)")
    return signer


__all__ = ["PAYLOAD_TYPE", "PREDICATE_TYPE", "PREDICATE_TYPE_CHUNKS", "STATEMENT_TYPE", "BadSignature", "pae",
           "payload_bytes", "sign", "statement", "verify"]
