"""``trtwarm keys generate`` and ``trtwarm sign``: make a signing key pair; sign published entries after the fact.

Signing adds (or replaces) one file, ``manifest.sig.json``, in a published entry: the only change trtwarm ever makes
to a published entry. It is written beside the volume's ``.staging/`` and renamed into the entry in one step, so a
concurrent reader never sees a partial or temporary file there.

``sign`` vouches only for what it can vouch for: the entry's files must match its manifest (always: a damaged entry is
rebuilt, not signed), and a signature the entry carries already must be over this very manifest and verify, with this
key or a key of ``--trust-policy``. An entry whose engine and manifest were rewritten after it was signed fails that,
and is refused: signing it would launder whatever the writer put there. ``--i-vouch-for-these-bytes`` overrides the
signature check (never the files check) and logs each file's digest it vouches for. Each entry is signed under its own
lock (``.locks/sign-*``), so concurrent signers never lose each other's signature.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm import strictjson
from trtwarm.config import Identity
from trtwarm.errors import ConfigError, EntriesDamaged, EntryInvalid, VolumeError, is_volume_errno, volume_error
from trtwarm.fs import safe
from trtwarm.lifecycle.filters import selector_word
from trtwarm.trust import envelope as dsse
from trtwarm.trust import keys
from trtwarm.trust.policy import REBUILD_HINT, Gate, Policy
from trtwarm.volume.layout import Layout
from trtwarm.volume.lock import BuildLock
from trtwarm.volume.store import SIGNATURE, EngineStore
from trtwarm.volume.entry import UNSIGNED, Entry, check_entry, read_manifest
from trtwarm.volume.verified import Dir

log = logging.getLogger("trtwarm.sign")
#: how long `sign` waits for another signer of the same entry
SIGN_LOCK_SECONDS = 300.0
VOUCH_FLAG = "--i-vouch-for-these-bytes"


def cmd_keys_generate(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm keys generate [--out PREFIX]``: ``PREFIX.key`` (0600) and ``PREFIX.pub``; never overwrites."""
    private, public = Path(f"{ns.out}.key"), Path(f"{ns.out}.pub")
    kid = keys.generate(private, public, ns.type)
    if ns.json:
        print(json.dumps({"private_key": str(private), "public_key": str(public), "keyid": kid}))
    else:
        print(f"private key {private} (mode 0600: keep it secret, e.g. in a Kubernetes Secret)\n"
              f"public key  {public} (list it in the trust policy)\nkey id      {kid}")
    return 0


def _matches(entry_name: str, key: str, selector: str) -> bool:
    sel = selector_word(selector)
    return sel == entry_name.lower() or (len(sel) >= 8 and all(c in "0123456789abcdef" for c in sel)
                                         and key.startswith(sel))


def select(store: EngineStore, selectors: list[str]) -> list[Path]:
    """Entry directories matching a name or a key prefix (8+ hex digits). :raises ConfigError: one matches none"""
    found: dict[str, Path] = {}
    unmatched = set(selectors)
    for path in sorted(store.entries()):
        try:
            key = str(read_manifest(path)["key"])
        except EntryInvalid:
            key = ""
        hits = {s for s in selectors if _matches(path.name, key, s)}
        if hits:
            found[path.name] = path
            unmatched -= hits
    if unmatched:
        raise ConfigError(f"no entry matches {', '.join(sorted(unmatched))}",
                          hint="`trtwarm ls` lists names and keys; a key prefix needs at least 8 hex digits")
    return list(found.values())


def _write_signature(layout: Layout, entry: Entry, envelope: dict[str, Any]) -> None:
    """Write the envelope under ``.staging/`` (through its descriptor) and rename it into the entry (one step, same
    filesystem, relative to both directories' descriptors: a link swapped in for either is never followed)."""
    safe.makedirs(layout.root, layout.staging, layout.dir_mode())
    tmp = layout.staging / f".sig.{entry.key[:16]}.{os.getpid()}.{secrets.token_hex(4)}.json"
    try:
        with Dir.own(layout.root, layout.staging) as staging:
            staging.write_new(tmp.name, (json.dumps(envelope, indent=2, sort_keys=True) + "\n").encode(),
                              layout.file_mode())
        safe.rename(layout.root, tmp, entry.path / SIGNATURE)
    finally:
        safe.unlink(layout.root, tmp)
    with Dir.open(layout.root, entry.path) as published:
        published.fsync()


def carried_problem(path: Path, entry: Entry, known: dict[str, Any]) -> tuple[Any, str | None]:
    """The envelope *entry* carries (None: unsigned) and why ``sign`` must not add to it (None: it may).

    It must be a DSSE envelope over exactly this manifest's Statement, and each of its well-formed signatures must
    verify with a key of *known* (key id → public key: the signer's own and the ``--trust-policy``'s keys, whatever
    their scope). Malformed signature items are dropped (logged), never kept. The envelope judged is the one read
    with the manifest when the entry was verified.
    """
    assert entry.opened is not None, "only a verified entry is signed"
    doc, problem = entry.opened.envelope, entry.opened.envelope_problem
    if problem == UNSIGNED:
        return None, None
    if problem is not None:
        return None, "its manifest.sig.json is unreadable, huge or not JSON"
    try:
        parsed = dsse.parse(doc)
    except dsse.BadSignature as exc:
        return None, f"the signature it carries is malformed ({exc.reason})"
    if parsed.dropped:
        log.warning("%s: dropping %d malformed signature item(s)", path.name, parsed.dropped)
    try:
        signed = strictjson.loads(parsed.payload, limit=len(parsed.payload))
    except strictjson.JSONRefused:
        signed = None
    if signed != dsse.statement(entry.manifest, entry.files):
        return doc, ("the signature it carries is over other content: its engine or manifest.json changed after it "
                     "was signed")
    message = dsse.pae(dsse.PAYLOAD_TYPE, parsed.payload)
    for keyid, raw in parsed.signatures:
        if keyid not in known:
            return doc, (f"it carries a signature by key {keyid[:16]} that this command cannot check (pass "
                         "--trust-policy naming its public key, e.g. while rotating keys)")
        if not keys.verify_signature(known[keyid], raw, message):
            return doc, f"its signature by key {keyid[:16]} does not verify"
    return doc, None


@contextlib.contextmanager
def _entry_lock(layout: Layout, path: Path, identity: Identity, mode: str) -> Iterator[None]:
    """The entry's signing lock: one read-modify-write of its envelope at a time (not the build lock: a build of
    the same key must not hold up a signature)."""
    lock_id = "sign-" + hashlib.sha256(path.name.encode()).hexdigest()[:32]
    with BuildLock(layout, lock_id, identity, mode=mode, timeout=SIGN_LOCK_SECONDS, label=f"sign {path.name}"):
        yield


def _vouched(entry: Entry) -> str:
    return ", ".join(f"{f['path']} sha256:{f['sha256']}" for f in entry.files)


def _sign_one(layout: Layout, gate: Gate, path: Path, ns: argparse.Namespace, known: dict[str, Any]) -> dict[str, Any]:
    try:
        entry = check_entry(path, None, digest=True)
    except EntryInvalid as exc:
        return {"name": path.name, "result": "refused", "detail": f"{exc.reason} (its files do not match its "
                "manifest: rebuild it, never sign it)"}
    existing, problem = carried_problem(path, entry, known)
    if problem is not None and not ns.i_vouch_for_these_bytes:
        return {"name": path.name, "key": entry.key, "result": "refused", "detail": problem}
    if problem is not None:
        log.warning("%s: %s; %s given: vouching for these bytes with key %s, dropping every signature it carried: "
                    "%s", path.name, problem, VOUCH_FLAG, gate.signer[1][:16], _vouched(entry))  # type: ignore[index]
        existing = None
    elif existing is None:
        log.info("%s carries no signature: vouching for %s", path.name, _vouched(entry))
    envelope = gate.sign(entry.manifest, entry.files, existing)
    assert envelope is not None and gate.signer is not None
    if not ns.dry_run:
        try:
            _write_signature(layout, entry, envelope)
        except OSError as exc:
            raise VolumeError(f"cannot sign {path.name}: {exc.strerror}", hint="sign where the cache volume is "
                              "mounted read-write by a user who may write it (a builder Pod or Job)") from exc
    kept, count = len(envelope["signatures"]) - 1, len(entry.files)
    return {"name": path.name, "key": entry.key, "result": "would sign" if ns.dry_run else "signed",
            "keyid": gate.signer[1], "detail": f"{count} file{'s' if count != 1 else ''}" + (
                f"; kept {kept} other signature(s)" if kept else "")}


def _known_keys(gate: Gate, policy: str | None) -> dict[str, Any]:
    """Key id → public key of every key whose signature ``sign`` can check: its own and the policy's (any scope)."""
    assert gate.signer is not None
    known = {gate.signer[1]: gate.signer[0].public_key()}
    if policy:
        for k in Policy.load(Path(policy), mode_given=True).keys:
            known[k.keyid] = keys.load_public(k.pem, f"public key of {k.name!r}")
    return known


def cmd_sign(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm sign ENTRY|KEY-PREFIX... --key FILE``: check each entry's files and the signature it carries, then
    sign its manifest under the entry's lock."""
    key = ns.key or environ.get("TRTWARM_SIGNING_KEY")
    if not key:
        raise ConfigError("no signing key given", hint="pass --key FILE (a private key from `trtwarm keys generate`)")
    layout = Layout(Path(ns.cache_dir))
    layout.require()  # a missing or foreign dir is exit 6, not "no entry matches"
    gate = Gate.create(None, "off", Path(key))
    known = _known_keys(gate, ns.trust_policy)
    identity = Identity.from_env(environ)
    results = []
    for path in select(EngineStore(layout), ns.selectors):
        try:
            with contextlib.nullcontext() if ns.dry_run else _entry_lock(layout, path, identity, ns.lock_mode):
                results.append(_sign_one(layout, gate, path, ns, known))
        except OSError as exc:
            if not is_volume_errno(exc):
                raise
            raise volume_error(exc, "lock", path, hint="sign where the cache volume is mounted read-write by a "
                               "user who may write it (a builder Pod or Job)") from None
    if ns.json:
        print(json.dumps({"dry_run": ns.dry_run, "entries": results}, sort_keys=True))
    else:
        for r in results:
            print(f"{r['result']:<10} {r['name']}: {r['detail']}")
    refused = [r for r in results if r["result"] == "refused"]
    if refused:
        one = len(refused) == 1
        raise EntriesDamaged(f"{len(refused)} entr{'y was' if one else 'ies were'} not signed: "
                             f"{refused[0]['detail']}", hint=REBUILD_HINT + f" ({VOUCH_FLAG} signs a carried "
                             "signature's failure over, after you checked the bytes it logs yourself)")
    return 0


def add_parsers(sub: Any, cache_default: str) -> None:
    """Define ``keys`` and ``sign`` on the subparsers action *sub*."""
    keys_p = sub.add_parser("keys", help="signing keys: `trtwarm keys generate`",
                            description="Make a key pair for signed entries (docs/trust.md). The private key goes to "
                            "the builders (a Kubernetes Secret; `trtwarm init --signing-key`), the public key into "
                            "the trust policy every init checks entries against (`--trust-policy`).")
    keys_sub = keys_p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    gen = keys_sub.add_parser("generate", help="write a new key pair PREFIX.key (0600) and PREFIX.pub",
                              description="Write a new key pair: PREFIX.key (the private key, PKCS#8 PEM, mode 0600) "
                              "and PREFIX.pub (the public key, PEM), and print the key id. Never overwrites a file.")
    gen.add_argument("--out", default="trtwarm", metavar="PREFIX", help="path prefix of the two files (default: "
                     "%(default)s, i.e. ./%(default)s.key and ./%(default)s.pub)")
    gen.add_argument("--type", default="ed25519", choices=keys.KINDS, help="key type (default %(default)s: the "
                     "fastest to check on a hit; ecdsa-p256 where your PKI or verifier needs ECDSA)")
    gen.add_argument("--json", action="store_true", help="machine-readable output")
    gen.set_defaults(func=cmd_keys_generate)
    sign = sub.add_parser("sign", help="sign published entries (after verifying their files)",
                          description="Re-hash each entry's files and check the signature it carries, then add "
                          "this key's signature to its manifest.sig.json under the entry's lock (other keys' "
                          "signatures are kept: how keys rotate). Refused: an entry whose files do not match its "
                          "manifest, and one carrying a signature that is malformed, over another manifest, or "
                          "does not verify (rebuild those; never sign an entry that failed a trust check). Run "
                          "where the cache volume is mounted read-write. List the key's public half in the policy "
                          "for the signature to count.")
    sign.add_argument("selectors", nargs="+", metavar="ENTRY|KEY-PREFIX",
                      help="an entry name as `trtwarm ls` shows it, or a key prefix of at least 8 hex digits")
    sign.add_argument("--key", metavar="FILE", help="the private key PEM, e.g. from `trtwarm keys generate` "
                      "(default: TRTWARM_SIGNING_KEY)")
    sign.add_argument("--cache-dir", default=cache_default, help="the shared cache volume (%(default)s)")
    sign.add_argument("--trust-policy", metavar="FILE", help="a trust policy whose keys (any scope) check the "
                      "signatures the entries carry already (needed to add a key beside another's: rotation)")
    sign.add_argument(VOUCH_FLAG, action="store_true", help="sign even an entry whose carried signature is "
                      "malformed, over another manifest, unverifiable or wrong, dropping it; logs every file "
                      "digest vouched for. Never overrides the files check. Only after checking those bytes")
    sign.add_argument("--lock-mode", default="auto", choices=["auto", "flock", "lease"], help="how the entry's "
                      "signing lock is taken (default %(default)s; see --lock-mode of init)")
    sign.add_argument("--dry-run", action="store_true", help="verify and say what would be signed; write nothing")
    sign.add_argument("--json", action="store_true", help="machine-readable output")
    sign.set_defaults(func=cmd_sign)


__all__ = ["add_parsers", "cmd_keys_generate", "cmd_sign", "select"]
