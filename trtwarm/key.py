"""The cache key: what makes two engines interchangeable, and the readable entry name derived from it.

The key document is canonical JSON (sorted keys, no whitespace, a schema version) and the key is its SHA-256.
It holds everything that changes the engine (model bytes and external data, builder and its exact version,
device class, build configuration by name) and nothing that does not (no paths, hostnames, Pod names or GPU
UUIDs), so identical GPUs share engines and a moved model still hits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from trtwarm.node.device import short_name
from trtwarm.model import ModelFacts
from trtwarm.names import sanitize

SCHEMA = 1


def model_fields(facts: ModelFacts) -> dict[str, Any]:
    """Return the key's ``model`` section: digests and sizes of the ONNX file and every external-data file."""
    return {
        "sha256": facts.onnx.sha256,
        "bytes": facts.onnx.bytes,
        "external_data": [{"location": f.location, "sha256": f.sha256, "bytes": f.bytes} for f in facts.external],
    }


def key_document(model: Mapping[str, Any], builder: Mapping[str, Any], device: Mapping[str, Any],
                 build: Mapping[str, Any]) -> dict[str, Any]:
    """Assemble the key document from its four sections."""
    return {"schema": SCHEMA, "model": dict(model), "builder": dict(builder), "device": dict(device),
            "build": dict(build)}


def canonical(doc: Mapping[str, Any]) -> bytes:
    """Serialise *doc* canonically: sorted keys, compact separators, ASCII only."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def key_of(doc: Mapping[str, Any]) -> str:
    """Return the key: SHA-256 hex of the canonical document."""
    return hashlib.sha256(canonical(doc)).hexdigest()


def _shapes_label(build: Mapping[str, Any], unshaped: bool = False) -> str:
    profiles = build.get("profiles") or []
    shapes = build.get("shapes") or (profiles[0] if profiles else {})
    if not shapes:
        return "unshaped" if unshaped else "static"
    label = "+".join(f"{n}-{'x'.join(map(str, s['opt']))}" for n, s in sorted(shapes.items()))
    return label + (f"-{len(profiles)}profiles" if len(profiles) > 1 else "")


def entry_name(doc: Mapping[str, Any], key: str, model_name: str, unshaped: bool = False) -> str:
    """Return ``<model>_<device>_<runtime>_<precision>_<shapes>--<key16>``, sanitised to ``[a-z0-9._-]``.

    ``<shapes>`` is ``static`` for a model without dynamic inputs and no ``--shape``; ``unshaped`` (*unshaped*) when
    the model has a dynamic input that no ``--shape`` fixes, so the name does not claim a static engine.

    ``_`` only separates the parts (inside a part it becomes ``-``), so tools can split a name back into them.
    """
    builder = doc["builder"]
    runtime = f"{builder['name']}{builder.get('version', '')}"
    parts = (model_name, short_name(doc["device"]), runtime, str(doc["build"].get("precision", "")),
             _shapes_label(doc["build"], unshaped))
    return "_".join(sanitize(p).replace("_", "-") for p in parts) + "--" + key[:16]


def model_part(name: str) -> str:
    """The ``<model>`` part of an entry name made by :func:`entry_name` (or of a sanitised model name)."""
    return name.split("_", 1)[0]


def configuration(name: str, doc: Any) -> str:
    """What ``--keep-per-model`` keeps the newest N of (local and remote gc): the model's name and the engine's
    configuration (builder, device, build options), not their versions (the model's bytes, the builder's version
    and command, ``--key-extra``).
    A new model version or TensorRT release replaces an older engine of its configuration; an fp16 engine never
    displaces the int8 one, nor one GPU product's engine another's. *doc*: the key document, when read."""
    if isinstance(doc, Mapping) and doc:
        builder = doc.get("builder") if isinstance(doc.get("builder"), Mapping) else {}
        build = doc.get("build") if isinstance(doc.get("build"), Mapping) else {}
        options = {k: v for k, v in build.items() if k != "extra"}  # --key-extra: a version (calib=v2), not a kind
        return json.dumps([model_part(name), builder.get("name"), doc.get("device"), options], sort_keys=True,
                          default=str)
    parts = name.rpartition("--")[0].split("_")  # <model>_<device>_<builder+version>_<precision>_<shapes>
    return "_".join(parts[:-3] + parts[-2:]) if len(parts) >= 5 else name


def diff(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """List the leaves that differ between two key documents as ``(dotted.path, old, new)``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for name in sorted(set(old) | set(new)):
            out += diff(old.get(name), new.get(name), f"{path}.{name}" if path else name)
        return out
    return [] if old == new else [(path, old, new)]


__all__ = ["SCHEMA", "canonical", "configuration", "diff", "entry_name", "key_document", "key_of", "model_fields",
           "model_part", "sanitize"]
