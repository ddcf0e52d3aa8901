"""Signing keys as PEM files: Ed25519 (what ``trtwarm keys generate`` makes) or ECDSA P-256/384/521 (keys from an
existing PKI or KMS, the type cosign and OpenSSF Model Signing take).

A private key is PKCS#8 PEM without a password (a Kubernetes Secret protects it at rest), mode 0600; a public key is
SubjectPublicKeyInfo PEM. A key's id is the SHA-256 of its DER SubjectPublicKeyInfo, in hex, which anyone can
recompute: ``openssl pkey -pubin -in trtwarm.pub -outform DER | sha256sum``.

The ``cryptography`` package is imported only when a key is used, never at import time, and an Ed25519 check imports
only its ``ed25519`` module: on a cache hit, loading ``cryptography``'s Rust extension is most of the cost of a
signature check, and ECDSA adds its OpenSSL backend module (about 6 ms more, measured; see docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError
from trtwarm.fs.ops import TooLarge, read_bounded

KEY_LIMIT = 64 << 10
_PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----\s*(.+?)\s*-----END \1-----", re.DOTALL)
#: the DER SubjectPublicKeyInfo header of an uncompressed P-256 point (id-ecPublicKey, prime256v1, BIT STRING)
_P256_SPKI = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200")
#: the DER SubjectPublicKeyInfo header of an Ed25519 key (id-Ed25519, BIT STRING of 32 bytes)
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")
KINDS = ("ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521")


def pem_der(pem: bytes, what: str) -> bytes:
    """The DER body of the first PEM block in *pem*. :raises ConfigError: no PEM block"""
    match = _PEM.search(pem)
    try:
        return base64.b64decode(match[2], validate=False) if match else b""
    except (binascii.Error, ValueError):
        raise ConfigError(f"{what} is not a PEM file",
                          hint="use `trtwarm keys generate` or openssl (see docs/trust.md)") from None


def key_id(public_pem: bytes, what: str = "public key") -> str:
    """The key id: SHA-256 of the DER SubjectPublicKeyInfo, hex. :raises ConfigError: not a public key PEM"""
    der = pem_der(public_pem, what)
    if b"PUBLIC KEY" not in public_pem or not der:
        raise ConfigError(f"{what} is not a PEM public key", hint="expected -----BEGIN PUBLIC KEY-----")
    return hashlib.sha256(der).hexdigest()


def read_key_file(path: Path, what: str) -> bytes:
    """Read a small key file (links followed: a Secret or ConfigMap volume's files are links; a FIFO never waited
    on). :raises ConfigError: missing, unreadable, not a regular file or huge"""
    try:
        return read_bounded(path, KEY_LIMIT, follow=True)
    except TooLarge:
        raise ConfigError(f"{what} {path} is larger than {KEY_LIMIT} bytes; not a key") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}",
                          hint="check the path and that this user may read it") from None


def load_public(pem: bytes, what: str = "public key") -> Any:
    """Parse a public key PEM into a ``cryptography`` Ed25519 or EC public key.

    Ed25519 and P-256 keys take a fast path that needs only the ``ed25519`` or ``ec`` module (their SPKI is a fixed
    header and the raw key); anything else goes through ``serialization``, which imports far more.
    :raises ConfigError: not an Ed25519 or ECDSA public key
    """
    _await_preload()
    der = pem_der(pem, what)
    try:
        if der.startswith(_ED25519_SPKI) and len(der) == len(_ED25519_SPKI) + 32:
            from cryptography.hazmat.primitives.asymmetric import ed25519

            return ed25519.Ed25519PublicKey.from_public_bytes(der[len(_ED25519_SPKI):])
        from cryptography.hazmat.primitives.asymmetric import ec

        if der.startswith(_P256_SPKI) and len(der) == len(_P256_SPKI) + 65:
            return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), der[len(_P256_SPKI):])
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_der_public_key(der)
    except ValueError as exc:
        raise ConfigError(f"{what} is not a valid public key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError(f"{what} is neither Ed25519 nor ECDSA", hint="trtwarm signs with Ed25519 or ECDSA")
    return key


#: RFC 8032 section 7.1, test 1: a public key and its signature of the empty message
_RFC8032_KEY = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
_RFC8032_SIGNATURE = bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc"
                                   "61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
_ED25519_MODULE = "cryptography.hazmat.primitives.asymmetric.ed25519"
_preloading: list[threading.Thread] = []  # the background import preload() started, until someone waits for it


def preload() -> threading.Thread | None:
    """Import what an Ed25519 check needs in a background thread, and return the thread (already started; None
    where one started before is not waited for yet, the module is imported already, or no thread could be started).

    ``trtwarm init`` calls this (through :meth:`trtwarm.trust.policy.Gate.preload`) right before it hashes an entry:
    the import of ``cryptography``'s Rust extension (most of a check's cost on a hit) and OpenSSL's first use then run
    while the hashing has released the GIL. Started at the process's start instead, it only took turns with
    trtwarm's own imports, which hold the GIL (measured: no overlap). Nothing is skipped: the check runs as before,
    after waiting for this thread (see :func:`_await_preload`); if the import failed, the check's own import raises
    the error.
    Not a daemon thread, so the interpreter never exits in the middle of loading an extension module.
    """

    def load() -> None:
        try:
            from cryptography.hazmat.primitives.asymmetric import ed25519
        except ImportError:  # reported by the check's own import, with the caller's context
            return
        finally:
            sys.setswitchinterval(interval)
        # OpenSSL sets up its Ed25519 implementation on first use (about 1 ms, measured): have it done here too.
        # Whatever fails here (an OpenSSL without Ed25519, say) fails again in the check, which reports it.
        with contextlib.suppress(Exception):
            ed25519.Ed25519PublicKey.from_public_bytes(_RFC8032_KEY).verify(_RFC8032_SIGNATURE, b"")

    if _preloading or _ED25519_MODULE in sys.modules:  # one at a time (a second would save the lowered interval
        return None  # as the one to restore), and none once imported
    # the import's Python code hands the GIL back within 0.1 ms (not the default 5) when the hashing wants it for
    # its next chunk, so the hashing does not wait behind the import
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, 1e-4))
    thread = threading.Thread(target=load, name="trtwarm-trust-preload")
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: the check imports it when it comes to it
        sys.setswitchinterval(interval)
        return None
    _preloading.append(thread)
    return thread


def _await_preload() -> None:
    """Wait for a running :func:`preload` before this thread imports from ``cryptography``: two threads importing
    one package's modules at once can meet in an import cycle, which importlib answers with ``_DeadlockError``."""
    while _preloading:
        _preloading.pop().join()


#: the hash each ECDSA curve signs with (its key size in bits → hash name): the interoperable pairings (FIPS 186,
#: securesystemslib's ecdsa-sha2-nistp256/384/521 schemes, OpenSSF Model Signing)
CURVE_HASHES = {256: "SHA256", 384: "SHA384", 521: "SHA512"}


def _curve_hash(key: Any) -> Any:
    from cryptography.hazmat.primitives import hashes

    return getattr(hashes, CURVE_HASHES.get(key.curve.key_size, "SHA256"))()


def verify_signature(public_key: Any, signature: bytes, message: bytes) -> bool:
    """Whether *signature* (Ed25519, or DER ECDSA) over *message* is valid for *public_key*.

    ECDSA is checked with the curve's hash (:data:`CURVE_HASHES`); a P-384 or P-521 signature made with SHA-256
    (what trtwarm 0.1 wrote) is still accepted, so envelopes signed before keep verifying.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ed25519

    try:
        if isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(signature, message)
            return True
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        digests = [_curve_hash(public_key)]
        if public_key.curve.key_size != 256:
            digests.append(hashes.SHA256())  # envelopes of trtwarm 0.1 (see above)
        for digest in digests:
            try:
                public_key.verify(signature, message, ec.ECDSA(digest))
                return True
            except InvalidSignature:
                continue
    except (InvalidSignature, ValueError, TypeError):
        return False
    return False


def sign_bytes(private_key: Any, message: bytes) -> bytes:
    """Sign *message*: Ed25519, or DER ECDSA with the curve's hash (:data:`CURVE_HASHES`)."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return private_key.sign(message)
    from cryptography.hazmat.primitives.asymmetric import ec

    return private_key.sign(message, ec.ECDSA(_curve_hash(private_key)))


def load_private(path: Path) -> tuple[Any, str]:
    """Load an Ed25519 or EC private key PEM; return ``(key, key id of its public half)``. :raises ConfigError:"""
    _await_preload()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    data = read_key_file(path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"signing key {path} cannot be loaded: {exc}",
                          hint="a PKCS#8 (or SEC1 EC) private key PEM without a password (`trtwarm keys generate`)") \
            from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)):
        raise ConfigError(f"signing key {path} is neither Ed25519 nor ECDSA", hint="use `trtwarm keys generate`")
    return key, key_id(public_pem(key))


def public_pem(private_key: Any) -> bytes:
    """The SubjectPublicKeyInfo PEM of *private_key*'s public half."""
    from cryptography.hazmat.primitives import serialization

    return private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)


def generate(private_path: Path, public_path: Path, kind: str = "ed25519") -> str:
    """Write a new key pair (*kind*: one of :data:`KINDS`): *private_path* (0600, created exclusively) and
    *public_path*; return the key id. :raises ConfigError: either file exists already (never overwritten), or cannot
    be written
    """
    _await_preload()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise ConfigError(f"{path} exists; refusing to overwrite a key",
                              hint="choose another name, or remove the old key yourself after rotating it out")
    curves = {"ecdsa-p256": ec.SECP256R1, "ecdsa-p384": ec.SECP384R1, "ecdsa-p521": ec.SECP521R1}
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(curves[kind]())
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


__all__ = ["CURVE_HASHES", "KINDS", "generate", "key_id", "load_private", "load_public", "pem_der", "preload",
           "public_pem", "read_key_file", "sign_bytes", "verify_signature"]
