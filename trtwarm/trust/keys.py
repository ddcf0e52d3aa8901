"""Signing keys: ECDSA P-256 (the key type cosign, OpenSSF Model Signing and every DSSE library take), as PEM files.

A private key is PKCS#8 PEM without a password (a Kubernetes Secret protects it at rest), mode 0600; a public key is
SubjectPublicKeyInfo PEM. A key's id is the SHA-256 of its DER SubjectPublicKeyInfo, in hex, which anyone can
recompute: ``openssl pkey -pubin -in trtwarm.pub -outform DER | sha256sum``.

The ``cryptography`` package is imported only when a key is used, never at import time: its Rust extension costs more
than everything else on a cache hit, and a Pod without a trust policy never needs it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError

KEY_LIMIT = 64 << 10
_PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----\s*(.+?)\s*-----END \1-----", re.S)
#: the DER SubjectPublicKeyInfo header of an uncompressed P-256 point (id-ecPublicKey, prime256v1, BIT STRING)
_P256_SPKI = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200")


def pem_der(pem: bytes, what: str) -> bytes:
    """The DER body of the first PEM block in *pem*. :raises ConfigError: no PEM block"""
    match = _PEM.search(pem)
    try:
        return base64.b64decode(match[2], validate=False) if match else b""
    except (binascii.Error, ValueError):
        raise ConfigError(f"{what} is not a PEM file", hint="use `trtwarm keys generate` or openssl (see README)") from None


def key_id(public_pem: bytes, what: str = "public key") -> str:
    """The key id: SHA-256 of the DER SubjectPublicKeyInfo, hex. :raises ConfigError: not a public key PEM"""
    der = pem_der(public_pem, what)
    if b"PUBLIC KEY" not in public_pem or not der:
        raise ConfigError(f"{what} is not a PEM public key", hint="expected -----BEGIN PUBLIC KEY-----")
    return hashlib.sha256(der).hexdigest()


def read_key_file(path: Path, what: str) -> bytes:
    """Read a small key file. :raises ConfigError: missing, unreadable or huge"""
    try:
        with open(path, "rb") as handle:
            data = handle.read(KEY_LIMIT + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}",
                          hint="check the path and that this user may read it") from None
    if len(data) > KEY_LIMIT:
        raise ConfigError(f"{what} {path} is larger than {KEY_LIMIT} bytes; not a key")
    return data


def load_public(pem: bytes, what: str = "public key") -> Any:
    """Parse a public key PEM into a ``cryptography`` EC public key.

    P-256 keys (all trtwarm generates) take a fast path that needs only the ``ec`` module: its SPKI is a fixed header
    and the point. Anything else goes through ``serialization`` (which imports far more). :raises ConfigError:
    """
    from cryptography.hazmat.primitives.asymmetric import ec

    der = pem_der(pem, what)
    try:
        if der.startswith(_P256_SPKI) and len(der) == len(_P256_SPKI) + 65:
            return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), der[len(_P256_SPKI):])
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_der_public_key(der)
    except ValueError as exc:
        raise ConfigError(f"{what} is not a valid public key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError(f"{what} is not an ECDSA key", hint="trtwarm signs with ECDSA (P-256, P-384 or P-521)")
    return key


def load_private(path: Path) -> tuple[Any, str]:
    """Load an EC private key PEM; return ``(key, key id of its public half)``. :raises ConfigError:"""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = read_key_file(path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"signing key {path} cannot be loaded: {exc}",
                          hint="a PKCS#8 or SEC1 EC private key PEM without a password (`trtwarm keys generate`)") \
            from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"signing key {path} is not an ECDSA key", hint="use `trtwarm keys generate`")
    return key, key_id(public_pem(key))


def public_pem(private_key: Any) -> bytes:
    """The SubjectPublicKeyInfo PEM of *private_key*'s public half."""
    from cryptography.hazmat.primitives import serialization

    return private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)


def generate(private_path: Path, public_path: Path) -> str:
    """Write a new P-256 key pair: *private_path* (0600, created exclusively) and *public_path*; return the key id.

    :raises ConfigError: either file exists already (never overwritten) or cannot be written
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise ConfigError(f"{path} exists; refusing to overwrite a key",
                              hint="choose another name, or remove the old key yourself after rotating it out")
    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = public_pem(key)
    written = []
    try:
        for path, data, mode in ((private_path, private, 0o600), (public_path, public, 0o644)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(path)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(path, mode)
    except OSError as exc:
        for path in written:
            path.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {exc.filename}: {exc.strerror}", hint="choose a writable directory") from None
    return key_id(public)


__all__ = ["generate", "key_id", "load_private", "load_public", "pem_der", "public_pem", "read_key_file"]
