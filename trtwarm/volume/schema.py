"""The shape of a manifest: the one check every reader of ``manifest.json`` (and of a remote ref's manifest) runs.

A manifest is read from a volume or a store anyone with write access may have edited, so no reader may assume a
field has the type trtwarm writes. :func:`check_manifest` checks every field a reader looks at, once, and raises
:class:`~trtwarm.errors.ManifestInvalid` naming the first field that is wrong; a reader then reports the entry as
damaged with that reason and answers for the others. :func:`salvage` keeps what a damaged entry's manifest still
says of the right type, for listing it (name, size, labels), never for using it.

On a volume (``keyed``) the key document must also hash to the key (:func:`trtwarm.key.key_of`): an entry whose
document was edited describes another engine than the one its key names, so ``init``, ``verify``, ``sign`` and
``ls`` all judge it damaged alike.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from trtwarm.errors import ManifestInvalid
from trtwarm.key import key_of

FULL_KEY = re.compile(r"[0-9a-f]{64}")
#: the largest epoch time a manifest may hold (year 5138): ``created`` feeds ``time.gmtime``
_LATEST = 1e11
_NUMBER = (int, float)

#: field -> (types, required); ``bool`` is never an int here, a float never NaN or infinite
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "key": ((str,), True), "engine_file": ((str,), True), "engine_sha256": ((str,), True),
    "engine_bytes": ((int,), True), "schema": ((int,), False), "name": ((str,), False),
    "created": (_NUMBER, False), "created_utc": ((str,), False), "build_seconds": (_NUMBER, False),
    "trtwarm_version": ((str,), False), "built_by": ((dict, type(None)), False), "extra": ((dict,), False),
    "key_document": ((dict,), False), "files": ((list,), False),
}
#: the entry's own files, never its engine (trtwarm.volume.files.SEALS)
_SEALS = ("manifest.json", "manifest.sig.json")
#: key-document sections a reader looks inside: each a JSON object when present
_SECTIONS = ("model", "builder", "build", "device")


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


def _field_problem(doc: Mapping[str, Any], name: str) -> str | None:
    types, required = _FIELDS[name]
    if name not in doc:
        return f"lacks {name}" if required else None
    value = doc[name]
    if not _typed(value, types):
        return f"has {name} of type {type(value).__name__}, not {' or '.join(_names(types))}"
    if name in ("engine_bytes", "build_seconds") and value < 0:
        return f"has a negative {name} ({value})"
    if name == "created" and not 0 <= value <= _LATEST:
        return f"has created {value}, not a time"
    if name == "schema" and not 1 <= value <= 2:
        return f"has schema {value!r}, not one this trtwarm reads (1 or 2)"
    return None


def _names(types: tuple[type, ...]) -> list[str]:
    words = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
             type(None): "null"}
    return [words.get(t, t.__name__) for t in types]


def key_document_problem(doc: Mapping[str, Any]) -> str | None:
    """What is wrong with the shape of a key document (sections that readers look inside), or None."""
    for section in _SECTIONS:
        if section in doc and not isinstance(doc[section], dict):
            return f"key_document.{section} is {type(doc[section]).__name__}, not an object"
    build = doc.get("build") or {}
    shapes = build.get("shapes", {})
    profiles = build.get("profiles", [])
    if not isinstance(shapes, dict) or not isinstance(profiles, list) or not all(
            isinstance(p, dict) for p in profiles):
        return "key_document.build.shapes or .profiles is malformed"
    for shape_set in (shapes, *profiles):
        for name, shape in shape_set.items():
            if not (isinstance(shape, dict) and all(isinstance(shape.get(k, []), list) and all(
                    isinstance(d, int) and not isinstance(d, bool) for d in shape.get(k, []))
                    for k in ("min", "opt", "max"))):
                return f"key_document.build's shape of {str(name)[:40]!r} is malformed"
    return None


def check_manifest(doc: Any, *, keyed: bool = True) -> dict[str, Any]:
    """Check the shape of a parsed manifest; return it unchanged.

    :param keyed: also require a 64-hex key and, when the manifest has a key document, that it hashes to the key
        (a manifest on a volume; a remote ref's manifest is checked for shape only)
    :raises ManifestInvalid: with the reason, ``manifest.json ...``
    """
    if not isinstance(doc, dict):
        raise ManifestInvalid("manifest.json is not a JSON object")
    for name in _FIELDS:
        problem = _field_problem(doc, name)
        if problem:
            raise ManifestInvalid(f"manifest.json {problem}", field=name)
    engine_file = doc["engine_file"]
    if os.path.basename(engine_file) != engine_file or engine_file in ("", ".", ".."):
        raise ManifestInvalid(f"manifest.json names an engine outside the entry: {engine_file!r}", field="engine_file")
    if engine_file in _SEALS:  # a schema-1 manifest lists its engine alone: it must not be the seal itself
        raise ManifestInvalid(f"manifest.json names {engine_file} as its engine", field="engine_file")
    kd = doc.get("key_document")
    problem = key_document_problem(kd) if kd is not None else None
    if problem:
        raise ManifestInvalid(f"manifest.json's {problem}", field="key_document")
    if keyed:
        if not FULL_KEY.fullmatch(doc["key"]):
            raise ManifestInvalid("manifest.json's key is not 64 hex digits", field="key")
        if kd is not None and _key_of(kd) != doc["key"]:
            raise ManifestInvalid("manifest.json's key_document does not hash to its key (edited?)",
                                  field="key_document")
    return doc


def _key_of(doc: dict[str, Any]) -> str | None:
    try:
        return key_of(doc)
    except (ValueError, TypeError, RecursionError):  # NaN or a value canonical JSON cannot hold
        return None


def salvage(doc: Any) -> dict[str, Any]:
    """The fields of *doc* that have the type trtwarm writes (a key document only if its shape is readable), for
    listing a damaged entry; ``{}`` for anything but an object."""
    if not isinstance(doc, dict):
        return {}
    kept = {name: doc[name] for name in _FIELDS if name in doc and not _field_problem(doc, name)}
    kept.pop("files", None)  # rows of unknown shape: the damaged entry's files are listed from the directory
    if "engine_file" in kept and os.path.basename(kept["engine_file"]) != kept["engine_file"]:
        del kept["engine_file"]
    if "key_document" in kept and key_document_problem(kept["key_document"]):
        del kept["key_document"]
    return kept


__all__ = ["FULL_KEY", "check_manifest", "key_document_problem", "salvage"]
