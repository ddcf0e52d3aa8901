"""The trust policy (``--trust-policy FILE``, JSON) and the gate every hand-over passes.

::

    {"mode": "enforce",                                   # enforce | warn | off (--trust-mode overrides it)
     "keys": [{"name": "ci-2026", "public_key_file": "ci-2026.pub",   # relative to the policy file, or
               "models": ["resnet50*"], "key_prefixes": ["1f24a03d"]},  # "public_key": "-----BEGIN PUBLIC KEY..."
              {"name": "ci-2027", "public_key_file": "ci-2027.pub"}]}  # no scope: every entry

The file is checked strictly (:mod:`trtwarm.trust.schema`): a misspelt or missing field is refused, never guessed.
A key is trusted for an entry when the model name it was *signed under* (the ``<model>`` part of the signed
statement's ``name``: the builder's ``--name`` or model file stem) matches one of its ``models`` globs, or its key
starts with one of its ``key_prefixes``; a key with neither is trusted for every entry. The entry's directory must
be that signed name (:func:`identity_problem`): a volume writer chooses directories, not what was signed. Several
keys at once are how keys rotate: add the new one, re-sign or rebuild, then remove the old one (which also revokes
it).

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

from trtwarm import strictjson
from trtwarm.errors import ConfigError, EntryInvalid, TrustError
from trtwarm.fs.ops import TooLarge, read_bounded
from trtwarm.key import key_of, model_part
from trtwarm.trust import envelope, keys, schema
from trtwarm.trust.schema import MODES
from trtwarm.volume.entry import Entry, envelope_in
from trtwarm.volume.verified import Dir

log = logging.getLogger("trtwarm.trust")
POLICY_LIMIT = 1 << 20
SIGNATURE_LIMIT = 1 << 20


#: what to do about an entry that failed a trust check: rebuild it. Never "sign it": `trtwarm sign` would vouch for
#: bytes nobody can trace (whoever rewrote the engine and its manifest wants exactly that)
REBUILD_HINT = ("rebuild it: a Pod with a --signing-key the policy trusts (not --read-only; e.g. the prebuild Job) "
                "quarantines and rebuilds it, or remove it (`trtwarm rm ENTRY`) and start such a builder; do not "
                "`trtwarm sign` an entry that failed a trust check; check --trust-policy if the key should be trusted")


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

    def covers(self, model: str, key: str) -> bool:
        """Whether this key is trusted for an entry of the model named *model* (the ``<model>`` part of the name
        the entry was signed under) and cache key *key*."""
        if not self.models and not self.key_prefixes:
            return True
        return any(fnmatch.fnmatchcase(model, glob) for glob in self.models) or \
            any(key.startswith(prefix) for prefix in self.key_prefixes)


@dataclass(frozen=True)
class Policy:
    """A parsed trust policy."""

    mode: str
    keys: tuple[TrustedKey, ...] = ()
    source: str = "(none)"
    files: tuple[Path, ...] = ()  # the policy file and the key files it names: what a verdict here rests on

    @classmethod
    def load(cls, path: Path, mode_given: bool = False) -> Policy:
        """Read a policy file and check it against the strict schema (:mod:`trtwarm.trust.schema`).

        :param mode_given: ``--trust-mode`` decides the mode, so the file may state none
        :raises ConfigError: unreadable, not JSON, or breaking any rule of the schema (naming the field)
        """
        try:
            doc = strictjson.loads(read_bounded(path, POLICY_LIMIT, follow=True), limit=POLICY_LIMIT)
        except (OSError, TooLarge, strictjson.JSONRefused) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise ConfigError(f"cannot read the trust policy {path}: {why}; nothing is trusted or served on it",
                              hint="--trust-policy names a JSON file; see docs/trust.md, The trust policy") from None
        spec = schema.parse(doc, str(path), mode_given)
        trusted = tuple(_trusted_key(k, path) for k in spec.keys)
        named = [f for k in spec.keys if (f := schema.key_file(path, k)) is not None]
        return cls(spec.mode or "off", trusted, str(path), (path, *named))

    def trusted_for(self, entry_name: str, key: str) -> dict[str, bytes]:
        """Key id → public key PEM of the keys trusted for the entry named *entry_name* (the name it was signed
        under, never the directory it lies in) of cache key *key*."""
        model = model_part(entry_name)
        return {k.keyid: k.pem for k in self.keys if k.covers(model, key)}


def _trusted_key(spec: schema.KeySpec, path: Path) -> TrustedKey:
    what = f"public key of {spec.name!r}"
    file = schema.key_file(path, spec)
    pem = spec.public_key.encode() if file is None else keys.read_key_file(file, what)
    return TrustedKey(spec.name, keys.key_id(pem, what), pem, spec.models, spec.key_prefixes)


def identity_problem(entry: Entry, model: str | None = None) -> str | None:
    """Why *entry*'s directory, manifest and signed statement disagree about what it is (None: they agree).

    The statement signs the manifest's ``name``, ``key`` and ``key_document``; the scope of a key is judged on that
    name. So the directory must be that name (a volume writer chooses directories, not what was signed), the name
    must end in the key's ``--<key16>``, the key document must hash to the key (it holds the model's digest), and,
    for an init (*model*: the ``<model>`` part of its own entry name), the entry must have been signed as this model's.
    """
    name = entry.manifest.get("name")
    if not isinstance(entry.manifest.get("key"), str):
        return "manifest.json names no key"
    if not isinstance(name, str) or not name:
        return "manifest.json names no entry, so no key scope applies (rebuild it)"
    if entry.path.name != name:
        return f"the directory {entry.path.name[:200]} is not the name the entry was signed under ({name[:200]})"
    if not name.endswith("--" + entry.key[:16]):
        return f"the signed name {name[:200]} does not end in its key's --{entry.key[:16]}"
    try:
        hashed = key_of(entry.manifest.get("key_document"))  # type: ignore[arg-type]
    except (TypeError, ValueError, AttributeError, RecursionError):
        hashed = None
    if hashed != entry.key:
        return "the signed key document does not hash to the entry's key (its model digest is not this key's)"
    if model is not None and model_part(name) != model:
        return f"signed for model {model_part(name)!r}, not this Pod's model {model!r} (under another model's name)"
    return None


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
        policy = Policy.load(policy_path, mode_given=mode is not None) if policy_path else Policy("off")
        mode = mode or policy.mode
        if mode != "off" and policy_path is None:
            raise ConfigError(f"--trust-mode {mode} needs --trust-policy", hint="name the trusted keys in a policy "
                              "file (see docs/trust.md), or use --trust-mode off")
        signer = keys.load_private(signing_key) if signing_key else None
        return cls(policy, mode, signer, signer is not None and not read_only)

    def preload(self, *, waiting: bool = False) -> None:
        """Before an entry is hashed: start the verifier's import in the background, so that it runs while the
        hashing has released the GIL (see :func:`trtwarm.trust.keys.preload`). Not where nothing is checked, nor
        where this node keeps a stamp directory already: it most likely holds this signature's verdict, and the
        import would only take a core from the hit. *waiting*: before this init waits for an entry someone else
        publishes, whose signature no verdict of this node can cover: imported while it waits, not after the publish
        (where a storm's waiters would each pay it at once)."""
        if self.mode == "off" or (not waiting and self.verdicts is not None and self.verdicts.directory.is_dir()):
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

    def status(self, entry: Entry, signature: dict[str, Any] | None = None,
               model: str | None = None) -> tuple[bool, str]:
        """``(True, signer key id)`` when a key trusted for *entry* signed exactly its manifest, else
        ``(False, reason)``. *signature*: the envelope when it is not on the volume (yet): a remote ref's. *model*:
        the ``<model>`` part of the asking init's own entry name (see :func:`identity_problem`).

        The scope is judged on what was signed (the statement's name and key), and the entry's directory must be
        that name. Any shape of envelope is a verdict, never an exception. With :attr:`verdicts` (a node-local stamp
        directory, any ``--verify``), a signature this node verified before for the same envelope, manifest and
        trusted keys is not checked again (see :meth:`trtwarm.volume.stamps.StampBook.signer`).
        """
        doc, problem = (signature, None) if signature else _envelope(entry)
        if problem is not None:
            return False, problem
        if (problem := identity_problem(entry, model)) is not None:
            return False, problem
        try:
            parsed = envelope.parse(doc)
            expected = envelope.statement(entry.manifest, entry.files)
        except envelope.BadSignature as exc:
            return False, exc.reason
        except (EntryInvalid, KeyError, TypeError, ValueError, RecursionError):
            return False, "manifest.json's files cannot be stated (malformed rows)"
        pems = self.policy.trusted_for(entry.manifest["name"], entry.key)
        fingerprint = _fingerprint(doc, expected, pems) if self.verdicts is not None else None
        if fingerprint and (known := self.verdicts.signer(fingerprint)) in pems:
            log.info("entry %s: signature verified before on this node (key %s)", entry.name, known[:16])
            return True, known
        trusted = {kid: self._public(kid, pem) for kid, pem in pems.items()}
        try:
            signer = envelope.verify_parsed(parsed, expected, trusted)
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
        ok, detail = self.status(entry, signature, model_part(name)) if signature \
            else (False, "unsigned (the ref carries no signature)")
        detail = detail.replace("manifest.sig.json", "the ref's signature").replace("manifest.json",
                                                                                     "the ref's manifest")
        try:
            self._verdict(entry, ok, detail)
        except TrustError:  # the fix is in the repository, not on this volume
            raise TrustError(f"trust policy (enforce) refuses the repository's engine for {name}: {detail}",
                             hint="a ref is never overwritten: remove it (`trtwarm remote rm KEY`, with write "
                             "credentials) and push a build signed by a key the policy trusts (a builder Pod or "
                             "the prebuild Job), or check --trust-policy") from None

    def check(self, entry: Entry, model: str | None = None) -> None:
        """Apply the mode to *entry* (call before any load); *model*: the ``<model>`` part of this init's entry name.
        :raises UntrustedEntry: replace it; :raises TrustError: refuse it, this Pod cannot replace it"""
        if self.mode == "off":
            return
        self._verdict(entry, *self.status(entry, model=model))

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
                         hint=REBUILD_HINT)

    def sign(self, manifest: dict[str, Any], files: list[dict[str, Any]],
             existing: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The DSSE envelope for *manifest*, or None without a signing key."""
        if self.signer is None:
            return None
        return envelope.sign(envelope.statement(manifest, files), self.signer[0], self.signer[1], existing)


def _envelope(entry: Entry) -> tuple[Any, str | None]:
    """The envelope the entry was verified with (read once with its manifest, kept in memory); an entry that was not
    verified in this process has its envelope read now, through its directory's descriptor."""
    if entry.opened is not None:
        return entry.opened.envelope, entry.opened.envelope_problem
    try:
        with Dir.open(entry.path.parent.parent, entry.path) as directory:
            return envelope_in(directory)
    except EntryInvalid as exc:
        return None, exc.reason


def _fingerprint(doc: Any, expected: dict[str, Any], pems: dict[str, bytes]) -> str:
    """The SHA-256 of everything a signature verdict depends on: the envelope, the expected statement, the key ids
    (each the SHA-256 of its key) trusted for the entry."""
    material = json.dumps([doc, expected, sorted(pems)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(material.encode()).hexdigest()


__all__ = ["MODES", "REBUILD_HINT", "Gate", "Policy", "TrustedKey", "UntrustedEntry", "identity_problem"]
