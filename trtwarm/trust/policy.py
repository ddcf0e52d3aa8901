"""The trust policy (``--trust-policy FILE``, JSON) and the gate every hand-over passes.

::

    {"mode": "enforce",                                   # enforce | warn | off (--trust-mode overrides it)
     "keys": [{"name": "ci-2026", "public_key_file": "ci-2026.pub",   # relative to the policy file, or
               "models": ["resnet50*"], "key_prefixes": ["1f24a03d"]},  # "public_key": "-----BEGIN PUBLIC KEY..."
              {"name": "ci-2027", "public_key_file": "ci-2027.pub"}]}  # no scope: every entry

A key is trusted for an entry when the entry's model name (the ``<model>`` part of its name: ``--name`` or the
model file's stem) matches one of its ``models`` globs, or its key starts with one of its ``key_prefixes``; a key with
neither is trusted for every entry. Several keys at once are how keys rotate: add the new one, re-sign or rebuild,
then remove the old one (which also revokes it).

Modes: ``off`` checks nothing; ``warn`` logs an unsigned or wrongly signed entry and serves it; ``enforce`` never
hands one over: a Pod that may build and holds a trusted signing key quarantines it and rebuilds (a miss), any other
Pod fails with :class:`~trtwarm.errors.TrustError` (exit 7). The gate runs before any builder loads the engine.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError, EntryInvalid, TrustError
from trtwarm.fs.ops import TooLarge, read_bounded
from trtwarm.key import model_part
from trtwarm.trust import envelope, keys
from trtwarm.volume.store import SIGNATURE, Entry

log = logging.getLogger("trtwarm.trust")
MODES = ("off", "warn", "enforce")
POLICY_LIMIT = 1 << 20
SIGNATURE_LIMIT = 1 << 20


class UntrustedEntry(EntryInvalid):
    """An entry failed the trust policy and this Pod can replace it: quarantine it and rebuild."""


@dataclass(frozen=True)
class TrustedKey:
    """One key of the policy and its scope."""

    name: str
    keyid: str
    pem: bytes
    models: tuple[str, ...] = ()
    key_prefixes: tuple[str, ...] = ()

    def covers(self, entry_name: str, key: str) -> bool:
        """Whether this key is trusted for the entry *entry_name* of *key*."""
        if not self.models and not self.key_prefixes:
            return True
        model = model_part(entry_name)
        return any(fnmatch.fnmatchcase(model, glob) for glob in self.models) or \
            any(key.startswith(prefix.lower()) for prefix in self.key_prefixes)


@dataclass(frozen=True)
class Policy:
    """A parsed trust policy."""

    mode: str
    keys: tuple[TrustedKey, ...] = ()
    source: str = "(none)"
    files: tuple[Path, ...] = ()  # the policy file and the key files it names: what a verdict here rests on

    @classmethod
    def load(cls, path: Path) -> Policy:
        """Read and check a policy file. :raises ConfigError: unreadable, not JSON, or malformed"""
        try:
            doc = json.loads(read_bounded(path, POLICY_LIMIT))
        except (OSError, TooLarge, ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the trust policy {path}: {getattr(exc, 'strerror', None) or exc}",
                              hint="--trust-policy names a JSON file; see docs/trust.md") from None
        if not isinstance(doc, dict) or doc.get("mode", "off") not in MODES \
                or not isinstance(doc.get("keys", []), list):
            raise ConfigError(f"trust policy {path}: expected {{\"mode\": \"enforce|warn|off\", \"keys\": [...]}}",
                              hint="see docs/trust.md for the format")
        named = [path.parent / item["public_key_file"] for item in doc.get("keys", [])
                 if isinstance(item, dict) and not isinstance(item.get("public_key"), str)
                 and isinstance(item.get("public_key_file"), str)]
        return cls(doc.get("mode", "off"), tuple(_trusted_key(item, path) for item in doc.get("keys", [])), str(path),
                   (path, *named))

    def trusted_for(self, entry_name: str, key: str) -> dict[str, bytes]:
        """Key id → public key PEM of the keys trusted for that entry."""
        return {k.keyid: k.pem for k in self.keys if k.covers(entry_name, key)}


def _trusted_key(item: Any, path: Path) -> TrustedKey:
    if not isinstance(item, dict) or not isinstance(item.get("name", ""), str):
        raise ConfigError(f"trust policy {path}: every item of keys must be an object")
    name = item.get("name") or "?"
    if isinstance(item.get("public_key"), str):
        pem = item["public_key"].encode()
    elif isinstance(item.get("public_key_file"), str):
        pem = keys.read_key_file(path.parent / item["public_key_file"], f"public key of {name!r}")
    else:
        raise ConfigError(f"trust policy {path}: key {name!r} has neither public_key nor public_key_file",
                          hint='name its public key file (relative to the policy), e.g. {"name": "ci-2026", '
                          '"public_key_file": "ci-2026.pub"}, or give the PEM in "public_key"; see docs/trust.md')
    scope = [item.get("models", []), item.get("key_prefixes", [])]
    if not all(isinstance(s, list) and all(isinstance(x, str) and x for x in s) for s in scope):
        raise ConfigError(f"trust policy {path}: key {name!r}: models and key_prefixes are lists of strings")
    return TrustedKey(name, keys.key_id(pem, f"public key of {name!r}"), pem, tuple(scope[0]), tuple(scope[1]))


@dataclass
class Gate:
    """What this process does about signatures: checks entries before they are handed over, and signs publications."""

    policy: Policy = field(default_factory=lambda: Policy("off"))
    mode: str = "off"
    signer: tuple[Any, str] | None = None  # (private key, key id)
    can_replace: bool = False  # may quarantine and rebuild an untrusted entry
    _loaded: dict[str, Any] = field(default_factory=dict)
    #: node-local record of signatures verified before (a :class:`~trtwarm.volume.stamps.StampBook`), or None
    verdicts: Any = None

    @classmethod
    def create(cls, policy_path: Path | None, mode: str | None, signing_key: Path | None = None,
               read_only: bool = False) -> Gate:
        """The gate for these settings. :raises ConfigError: bad policy, key, or a mode without a policy"""
        if mode is not None and mode not in MODES:
            raise ConfigError(f"unknown --trust-mode {mode!r}", hint="choose enforce, warn or off")
        policy = Policy.load(policy_path) if policy_path else Policy("off")
        mode = mode or policy.mode
        if mode != "off" and policy_path is None:
            raise ConfigError(f"--trust-mode {mode} needs --trust-policy", hint="name the trusted keys in a policy "
                              "file (see docs/trust.md), or use --trust-mode off")
        signer = keys.load_private(signing_key) if signing_key else None
        return cls(policy, mode, signer, signer is not None and not read_only)

    def preload(self) -> None:
        """Before an entry is hashed: start the verifier's import in the background, so that it runs while the
        hashing has released the GIL (see :func:`trtwarm.trust.keys.preload`). Not where nothing is checked, nor
        where this node keeps a stamp directory already: it most likely holds this signature's verdict, and the
        import would only take a core from the hit."""
        if self.mode == "off" or (self.verdicts is not None and self.verdicts.directory.is_dir()):
            return
        keys.preload()

    @property
    def consumer_only(self) -> bool:
        """Under enforce without a signing key, whatever this Pod built would be refused: it only waits."""
        return self.mode == "enforce" and self.signer is None

    def require_signer_trusted(self, entry_name: str, key: str) -> None:
        """Under enforce, this Pod's signing key must be trusted for what it builds. :raises ConfigError:"""
        if self.mode == "enforce" and self.signer and self.signer[1] not in self.policy.trusted_for(entry_name, key):
            raise ConfigError(f"the signing key {self.signer[1][:16]} is not trusted for {entry_name} by "
                              f"{self.policy.source}", hint="add its public key to the trust policy (with a scope "
                              "covering this model), or use a key the policy trusts")

    def status(self, entry: Entry, signature: dict[str, Any] | None = None) -> tuple[bool, str]:
        """``(True, signer key id)`` when a key trusted for *entry* signed exactly its manifest, else
        ``(False, reason)``. *signature*: the envelope when it is not on the volume (yet): a remote ref's.

        With :attr:`verdicts` (a node-local stamp directory, any ``--verify``), a signature this node verified before
        for the same envelope, manifest and trusted keys is not checked again (see
        :meth:`trtwarm.volume.stamps.StampBook.signer`).
        """
        try:
            doc = signature or json.loads(read_bounded(entry.path / SIGNATURE, SIGNATURE_LIMIT))
        except FileNotFoundError:
            return False, "unsigned (no manifest.sig.json)"
        except (OSError, TooLarge, ValueError, UnicodeDecodeError):
            return False, "manifest.sig.json is unreadable, huge or not JSON"
        pems = self.policy.trusted_for(entry.name, entry.key)
        expected = envelope.statement(entry.manifest, entry.files)
        fingerprint = _fingerprint(doc, expected, pems) if self.verdicts is not None else None
        if fingerprint and (known := self.verdicts.signer(fingerprint)) in pems:
            log.info("entry %s: signature verified before on this node (key %s)", entry.name, known[:16])
            return True, known
        trusted = {kid: self._public(kid, pem) for kid, pem in pems.items()}
        try:
            signer = envelope.verify(doc, expected, trusted)
        except envelope.BadSignature as exc:
            return False, exc.reason
        if fingerprint:
            self.verdicts.record_signer(fingerprint, signer)
        return True, signer

    def _public(self, kid: str, pem: bytes) -> Any:
        if kid not in self._loaded:
            self._loaded[kid] = keys.load_public(pem, f"trusted key {kid[:16]}")
        return self._loaded[kid]

    def check_ref(self, name: str, ref: dict[str, Any]) -> None:
        """:meth:`check` for a remote repository's ref (``manifest``, ``signature``) before its download, as the
        entry *name* it would be published under (the remote ``--remote`` path, trtwarm.remote)."""
        if self.mode == "off":
            return
        entry = Entry(Path(name), ref["manifest"])  # not on a volume: only its name and manifest are read
        signature = ref.get("signature")
        ok, detail = self.status(entry, signature) if signature else (False, "unsigned (the ref carries no signature)")
        detail = detail.replace("manifest.sig.json", "the ref's signature").replace("manifest.json",
                                                                                     "the ref's manifest")
        try:
            self._verdict(entry, ok, detail)
        except TrustError:  # the fix is in the repository, not on this volume
            raise TrustError(f"trust policy (enforce) refuses the repository's engine for {name}: {detail}",
                             hint="a ref is never overwritten: remove it (`trtwarm remote rm KEY`, with write "
                             "credentials) and push a build signed by a key the policy trusts (a builder Pod or "
                             "the prebuild Job), or check --trust-policy") from None

    def check(self, entry: Entry) -> None:
        """Apply the mode to *entry* (call before any load). :raises UntrustedEntry: replace it;
        :raises TrustError: refuse it, this Pod cannot replace it"""
        if self.mode == "off":
            return
        self._verdict(entry, *self.status(entry))

    def _verdict(self, entry: Entry, ok: bool, detail: str) -> None:
        if ok:
            log.debug("entry %s is signed by trusted key %s", entry.name, detail[:16])
            return
        if self.mode == "warn":
            log.warning("trust policy (warn): entry %s: %s; serving it anyway", entry.name, detail)
            return
        if self.can_replace:
            raise UntrustedEntry(f"trust policy: {detail}")
        raise TrustError(f"trust policy (enforce) refuses entry {entry.name}: {detail}",
                         hint="only a Pod with a trusted --signing-key (not --read-only) may replace it: run one, or "
                         "`trtwarm sign` the entry with a trusted key, or check --trust-policy")

    def sign(self, manifest: dict[str, Any], files: list[dict[str, Any]],
             existing: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The DSSE envelope for *manifest*, or None without a signing key."""
        if self.signer is None:
            return None
        return envelope.sign(envelope.statement(manifest, files), self.signer[0], self.signer[1], existing)


def _fingerprint(doc: Any, expected: dict[str, Any], pems: dict[str, bytes]) -> str:
    """The SHA-256 of everything a signature verdict depends on: the envelope, the expected statement, the key ids
    (each the SHA-256 of its key) trusted for the entry."""
    material = json.dumps([doc, expected, sorted(pems)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(material.encode()).hexdigest()


__all__ = ["MODES", "Gate", "Policy", "TrustedKey", "UntrustedEntry"]
