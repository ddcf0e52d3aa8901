"""``trtwarm key --explain``: why did this key miss? Compare it with the entries of the same model on the volume."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trtwarm.builders.tensorrt.compat import built_on
from trtwarm.errors import EntryInvalid
from trtwarm.key import diff, model_part
from trtwarm.volume.store import EngineStore, read_manifest


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
        same_model = other.get("model", {}).get("sha256") == doc["model"]["sha256"]
        if same_model or model_part(path.name) == model_name:
            yield path.name, other, manifest


def explain(store: EngineStore, doc: dict[str, Any], key: str, model_name: str) -> list[str]:
    """Return report lines: a hit, or per near entry the key fields that differ (``path old → new``)."""
    if store.find(key) is not None:
        return [f"hit: an entry for key {key[:16]} exists"]
    near = sorted(((len(d), name, d, built_on(manifest))
                   for name, other, manifest in _candidates(store, doc, model_name) for d in [diff(other, doc)]),
                  key=lambda t: (t[0], t[1]))
    if not near:
        return [f"miss: no entry on the volume has this model ({doc['model']['sha256'][:16]}) or name {model_name!r}"]
    lines = [f"miss: key {key[:16]}; nearest entries first"]
    for _count, name, changes, where in near[:5]:
        lines.append(f"  {name}:" + (f" ({where})" if where else ""))
        lines += [f"    {path} {_short(old)} → {_short(new)}" for path, old, new in changes]
    return lines


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["explain"]
