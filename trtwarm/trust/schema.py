"""The trust policy's schema, strictly: a policy that does not say exactly what it means is refused, never guessed.

A security setting that is misspelt must not turn security off. So every field is known, typed and checked, and a
policy that fails any rule is a :class:`~trtwarm.errors.ConfigError` (exit 2) naming the field; nothing is served
on it (the init fails before it looks at the cache). The rules (the chart's values schema mirrors them)::

    policy      an object with exactly the fields "mode" and "keys" (no others)
    mode        "enforce" | "warn" | "off"; required unless --trust-mode is given (then the flag decides)
    keys        a non-empty list of key objects
    key         an object with only the fields name, public_key, public_key_file, models, key_prefixes
    name        a non-empty string, unique within the policy
    public_key / public_key_file
                exactly one of them: a PEM string, or a file path relative to the policy file
    models      optional; when present a non-empty list of non-empty strings (globs on the model name)
    key_prefixes optional; when present a non-empty list of hex strings, 1 to 64 digits

A key with neither ``models`` nor ``key_prefixes`` is trusted for every entry; an empty list is refused (it reads
as "no model" but used to mean "every model").
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError

MODES = ("off", "warn", "enforce")
POLICY_FIELDS = ("mode", "keys")
KEY_FIELDS = ("name", "public_key", "public_key_file", "models", "key_prefixes")
_HEX = re.compile(r"[0-9a-fA-F]{1,64}")
_HINT = ('a policy is {"mode": "enforce|warn|off", "keys": [{"name": "ci-2026", "public_key_file": "ci-2026.pub", '
         '"models": ["resnet*"]}]}; see docs/trust.md, The trust policy')


@dataclass(frozen=True)
class KeySpec:
    """One key item as written (its PEM not read yet)."""

    name: str
    public_key: str | None
    public_key_file: str | None
    models: tuple[str, ...]
    key_prefixes: tuple[str, ...]


@dataclass(frozen=True)
class PolicySpec:
    """A policy document that passed the schema. *mode* is None where it states none (--trust-mode decides)."""

    mode: str | None
    keys: tuple[KeySpec, ...]


def _fail(source: str, where: str, what: str) -> ConfigError:
    return ConfigError(f"trust policy {source}: {where}: {what}; nothing is trusted or served on it", hint=_HINT)


def _unknown(source: str, where: str, doc: dict[str, Any], known: tuple[str, ...]) -> None:
    for field in doc:
        if field in known:
            continue
        close = [k for k in known if k.lower() == str(field).lower()] or difflib.get_close_matches(str(field), known, 1)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        raise _fail(source, where, f"unknown field {str(field)[:80]!r}{guess}; the fields are {', '.join(known)}")


def _string_list(source: str, where: str, value: Any, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _fail(source, where, f"must be a list of strings, not {type(value).__name__}")
    if not value:
        raise _fail(source, where, "is empty: it would scope the key to nothing (leave the field out to trust the "
                    "key for every entry)")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise _fail(source, f"{where}[{i}]", "must be a non-empty string")
        if pattern is not None and not pattern.fullmatch(item):
            raise _fail(source, f"{where}[{i}]", f"{item[:80]!r} is not 1 to 64 hex digits")
    return tuple(value)


def _key(source: str, i: int, item: Any) -> KeySpec:
    where = f"keys[{i}]"
    if not isinstance(item, dict):
        raise _fail(source, where, f"must be an object, not {type(item).__name__}")
    _unknown(source, where, item, KEY_FIELDS)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(source, f"{where}.name", "is required: a non-empty string")
    given = [f for f in ("public_key", "public_key_file") if f in item]
    if len(given) != 1:
        raise _fail(source, f"{where} ({name!r})", "needs exactly one of public_key (a PEM) and public_key_file (a "
                    f"path relative to the policy), {'not both' if given else 'has neither'}")
    value = item[given[0]]
    if not isinstance(value, str) or not value:
        raise _fail(source, f"{where}.{given[0]}", "must be a non-empty string")
    models = _string_list(source, f"{where}.models", item["models"]) if "models" in item else ()
    prefixes = _string_list(source, f"{where}.key_prefixes", item["key_prefixes"], _HEX) \
        if "key_prefixes" in item else ()
    return KeySpec(name, value if given[0] == "public_key" else None,
                   value if given[0] == "public_key_file" else None, models, tuple(p.lower() for p in prefixes))


def parse(doc: Any, source: str, mode_given: bool) -> PolicySpec:
    """Check a parsed policy document against the schema (module docstring).

    :param mode_given: whether ``--trust-mode`` decides the mode (then the policy may state none)
    :raises ConfigError: naming the first field that breaks a rule
    """
    if not isinstance(doc, dict):
        raise _fail(source, "the document", f"must be a JSON object, not {type(doc).__name__}")
    _unknown(source, "the policy", doc, POLICY_FIELDS)
    mode = doc.get("mode")
    if "mode" not in doc:
        if not mode_given:
            raise _fail(source, "mode", 'is required ("enforce", "warn" or "off") unless --trust-mode '
                        "(TRTWARM_TRUST_MODE) is given")
    elif not isinstance(mode, str) or mode not in MODES:
        raise _fail(source, "mode", f"{str(mode)[:80]!r} is not one of enforce, warn, off")
    if "keys" not in doc:
        raise _fail(source, "keys", "is required: a list of trusted keys")
    if not isinstance(doc["keys"], list) or not doc["keys"]:
        raise _fail(source, "keys", "must be a non-empty list of key objects")
    specs = tuple(_key(source, i, item) for i, item in enumerate(doc["keys"]))
    names = [k.name for k in specs]
    if dup := next((n for n in names if names.count(n) > 1), None):
        raise _fail(source, "keys", f"the name {dup!r} is used twice")
    return PolicySpec(mode, specs)


def key_file(source: Path, spec: KeySpec) -> Path | None:
    """The public key file *spec* names, relative to the policy file *source*."""
    return None if spec.public_key_file is None else source.parent / spec.public_key_file


__all__ = ["KEY_FIELDS", "MODES", "POLICY_FIELDS", "KeySpec", "PolicySpec", "key_file", "parse"]
