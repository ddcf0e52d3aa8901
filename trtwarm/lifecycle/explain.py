"""``trtwarm key --explain``: why did this key miss? Compare it with the entries of the same model on the volume.

The nearest entries (same model digest, or same readable model name) are ranked by how few key fields differ;
each differing field is shown with both values in full (a list of plain values, like ``device.isa``, is one field;
lists of objects are compared element by element, e.g. ``model.external_data[0].sha256``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from trtwarm.builders.tensorrt.compat import built_on
from trtwarm.errors import EntryInvalid
from trtwarm.key import model_part
from trtwarm.volume.store import EngineStore
from trtwarm.volume.entry import read_manifest

#: how many of the nearest entries are reported
NEAREST = 5
ABSENT = "(absent)"
_MISSING = ABSENT


def diff(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The leaves that differ between two key documents, as ``(field, entry's value, this value)``; a field absent
    on one side has the value :data:`ABSENT` there."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for name in sorted(set(old) | set(new)):
            out += diff(old.get(name, _MISSING), new.get(name, _MISSING), f"{path}.{name}" if path else name)
        return out
    if isinstance(old, list) and isinstance(new, list) and any(isinstance(v, (dict, list)) for v in old + new):
        out = []
        for i in range(max(len(old), len(new))):
            out += diff(old[i] if i < len(old) else _MISSING, new[i] if i < len(new) else _MISSING, f"{path}[{i}]")
        return out
    if old == new:
        return []
    return [(path, old, new)]


def _candidates(store: EngineStore, doc: dict[str, Any], model_name: str
                ) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Entries with the same model digest, or the same readable model name: (name, key document, manifest)."""
    for path in store.entries():
        try:
            manifest = read_manifest(path)
        except EntryInvalid:
            continue
        other = manifest.get("key_document")
        if not isinstance(other, dict):
            continue
        same_model = (other.get("model") or {}).get("sha256") == doc["model"]["sha256"]
        if same_model or model_part(path.name) == model_name:
            yield path.name, other, manifest


def explain(store: EngineStore, doc: dict[str, Any], key: str, name: str, model_name: str) -> dict[str, Any]:
    """The ``--explain --json`` report: ``result`` hit or miss, and for a miss the nearest entries with their
    differing fields (``field``, ``entry``: the entry's value, ``this``: this command line's value; the string
    ``(absent)`` where that side lacks the field)."""
    report: dict[str, Any] = {"key": key, "name": name, "model": model_name}
    found = store.find(key)
    if found is not None:
        return {**report, "result": "hit", "entry": found.name, "nearest": []}
    near = sorted(((len(d), entry, d, built_on(manifest)) for entry, other, manifest in
                   _candidates(store, doc, model_name) for d in [diff(other, doc)]), key=lambda t: (t[0], t[1]))
    return {**report, "result": "miss", "model_sha256": doc["model"]["sha256"], "candidates": len(near),
            "nearest": [{"entry": entry, "differing": count, "built_on": where,
                         "fields": [{"field": f, "entry": old, "this": new} for f, old, new in changes]}
                        for count, entry, changes, where in near[:NEAREST]]}


def _value(value: Any) -> str:
    return ABSENT if value is ABSENT else json.dumps(value, sort_keys=True)


def render(report: dict[str, Any]) -> str:
    """The text form: one block per near entry, each differing field with both values in full."""
    if report["result"] == "hit":
        return f"hit: entry {report['entry']} has key {report['key'][:16]}; this Pod would not rebuild"
    if not report["nearest"]:
        return (f"miss: key {report['key'][:16]}; no entry on the volume has this model "
                f"({report['model_sha256'][:16]}) or the name {report['model']!r}: a first build, not a changed key")
    count = report["candidates"]
    lines = [f"miss: key {report['key'][:16]} ({report['name']}); {count} {'entry' if count == 1 else 'entries'} "
             "of this model, nearest first"]
    for near in report["nearest"]:
        count = near["differing"]
        where = f" ({near['built_on']})" if near.get("built_on") else ""
        lines.append(f"  {near['entry']}{where}: {count} field{' differs' if count == 1 else 's differ'}")
        for change in near["fields"]:
            lines += [f"    {change['field']}", f"      entry: {_value(change['entry'])}",
                      f"      this:  {_value(change['this'])}"]
    return "\n".join(lines)


__all__ = ["ABSENT", "NEAREST", "diff", "explain", "render"]
