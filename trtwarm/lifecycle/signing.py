"""``trtwarm keys generate`` and ``trtwarm sign``: make a signing key pair; sign published entries after the fact.

Signing adds (or replaces) one file, ``manifest.sig.json``, in a published entry: the only change trtwarm ever makes
to a published entry. It is written beside the volume's ``.staging/`` and renamed into the entry in one step, so a
concurrent reader never sees a partial or temporary file there. An entry is signed only after its files verify.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError, EntriesDamaged, EntryInvalid, VolumeError
from trtwarm.fs.ops import read_json_object
from trtwarm.lifecycle.filters import selector_word
from trtwarm.trust import keys
from trtwarm.trust.policy import Gate
from trtwarm.volume.layout import Layout
from trtwarm.volume.store import SIGNATURE, EngineStore, Entry, check_entry, read_manifest


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
    """Write the envelope under ``.staging/`` and rename it into the entry (one step, same filesystem)."""
    from trtwarm.fs.ops import atomic_write_json, fsync_dir

    layout.staging.mkdir(mode=layout.dir_mode(), exist_ok=True)
    tmp = layout.staging / f".sig.{entry.key[:16]}.{os.getpid()}.{secrets.token_hex(4)}.json"
    try:
        atomic_write_json(tmp, envelope, layout.file_mode())
        os.rename(tmp, entry.path / SIGNATURE)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(entry.path)


def _sign_one(layout: Layout, gate: Gate, path: Path, dry_run: bool) -> dict[str, Any]:
    try:
        entry = check_entry(path, None, digest=True)
    except EntryInvalid as exc:
        return {"name": path.name, "result": "refused", "detail": exc.reason}
    existing = read_json_object(path / SIGNATURE, 1 << 20)
    envelope = gate.sign(entry.manifest, entry.files, existing)
    assert envelope is not None and gate.signer is not None
    if not dry_run:
        try:
            _write_signature(layout, entry, envelope)
        except OSError as exc:
            raise VolumeError(f"cannot sign {path.name}: {exc.strerror}", hint="sign where the cache volume is "
                              "mounted read-write by a user who may write it (a builder Pod or Job)") from exc
    kept, count = len(envelope["signatures"]) - 1, len(entry.files)
    return {"name": path.name, "key": entry.key, "result": "would sign" if dry_run else "signed",
            "keyid": gate.signer[1], "detail": f"{count} file{'s' if count != 1 else ''}" + (
                f"; kept {kept} other signature(s)" if kept else "")}


def cmd_sign(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm sign ENTRY|KEY-PREFIX... --key FILE``: verify each entry's files, then sign its manifest."""
    key = ns.key or environ.get("TRTWARM_SIGNING_KEY")
    if not key:
        raise ConfigError("no signing key given", hint="pass --key FILE (a private key from `trtwarm keys generate`)")
    layout = Layout(Path(ns.cache_dir))
    layout.require()  # a missing or foreign dir is exit 6, not "no entry matches"
    gate = Gate.create(None, "off", Path(key))
    results = [_sign_one(layout, gate, path, ns.dry_run) for path in select(EngineStore(layout), ns.selectors)]
    if ns.json:
        print(json.dumps({"dry_run": ns.dry_run, "entries": results}, sort_keys=True))
    else:
        for r in results:
            print(f"{r['result']:<10} {r['name']}: {r['detail']}")
    refused = [r for r in results if r["result"] == "refused"]
    if refused:
        one = len(refused) == 1
        raise EntriesDamaged(f"{len(refused)} entr{'y' if one else 'ies'} failed verification and "
                             f"{'was' if one else 'were'} not signed",
                             hint="`trtwarm verify --fix` quarantines them; the next init rebuilds")
    return 0


def add_parsers(sub: Any, cache_default: str) -> None:
    """Define ``keys`` and ``sign`` on the subparsers action *sub*."""
    keys_p = sub.add_parser("keys", help="signing keys: `trtwarm keys generate`",
                            description="Make a key pair for signed entries (README, Trust). The private key goes to "
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
                          description="Re-hash each entry's files, then add this key's signature to its "
                          "manifest.sig.json (other keys' signatures are kept: how keys rotate). Run where the "
                          "cache volume is mounted read-write. It does not check a trust policy: list the key's "
                          "public half in the policy for the signature to count.")
    sign.add_argument("selectors", nargs="+", metavar="ENTRY|KEY-PREFIX",
                      help="an entry name as `trtwarm ls` shows it, or a key prefix of at least 8 hex digits")
    sign.add_argument("--key", metavar="FILE", help="the private key PEM, e.g. from `trtwarm keys generate` "
                      "(default: TRTWARM_SIGNING_KEY)")
    sign.add_argument("--cache-dir", default=cache_default, help="the shared cache volume (%(default)s)")
    sign.add_argument("--dry-run", action="store_true", help="verify and say what would be signed; write nothing")
    sign.add_argument("--json", action="store_true", help="machine-readable output")
    sign.set_defaults(func=cmd_sign)


__all__ = ["add_parsers", "cmd_keys_generate", "cmd_sign", "select"]
