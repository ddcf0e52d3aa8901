"""The OCI layout of a trtwarm entry: media types, annotations and the manifest shape (a public contract, see
docs/oci.md), built and checked here.

An entry is one image-spec 1.1 manifest tagged by its key (64 hex)::

    {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
     "artifactType": "application/vnd.trtwarm.entry.v1",
     "config": {"mediaType": "application/vnd.trtwarm.ref.v1+json", ...},      # the ref document (S3's refs/<key>.json)
     "layers": [{"mediaType": "application/vnd.trtwarm.file.v1", "digest": "sha256:<the file's>", "size": N,
                 "annotations": {"org.opencontainers.image.title": "<path>", "dev.trtwarm.file.path": "<path>",
                                 "dev.trtwarm.file.role": "engine"}}, ...],        # one per file of the entry
     "annotations": {"dev.trtwarm.key": "<key>", "dev.trtwarm.name": "<entry name>",
                     "org.opencontainers.image.created": "<RFC 3339>"}}

The ref document (config) is what is trusted (its signature); the layers must list exactly its files (digest and
size, in order): they keep the blobs referenced for the registry's own garbage collection.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from typing import Any

from trtwarm.strictjson import loads

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ENTRY_TYPE = "application/vnd.trtwarm.entry.v1"
REF_TYPE = "application/vnd.trtwarm.ref.v1+json"
FILE_TYPE = "application/vnd.trtwarm.file.v1"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
PATH, ROLE, KEY, NAME = "dev.trtwarm.file.path", "dev.trtwarm.file.role", "dev.trtwarm.key", "dev.trtwarm.name"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def canonical(doc: Any) -> bytes:
    """The bytes trtwarm writes for a JSON document (sorted keys, no spaces): the same document, the same digest."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    """A descriptor of *data*."""
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


def entry_manifest(ref: dict[str, Any], config: bytes, files: list[dict[str, Any]]) -> bytes:
    """The manifest of an entry whose ref document serialises to *config* and whose files are *files*."""
    manifest = ref["manifest"]
    created = datetime.datetime.fromtimestamp(float(manifest.get("created") or 0), datetime.timezone.utc)
    layers = [{"mediaType": FILE_TYPE, "digest": f"sha256:{row['sha256']}", "size": row["bytes"],
               "annotations": {TITLE: row["path"], PATH: row["path"], ROLE: str(row.get("role") or "file")}}
              for row in files]
    return canonical({"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": ENTRY_TYPE,
                      "config": descriptor(REF_TYPE, config), "layers": layers,
                      "annotations": {KEY: str(manifest["key"]), NAME: str(manifest.get("name", "")),
                                      CREATED: created.strftime("%Y-%m-%dT%H:%M:%SZ")}})


def check_entry_manifest(data: bytes) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """``(config descriptor, [(layer sha256 hex, size), ...])`` of a trtwarm entry manifest.

    :raises ValueError: not JSON, not an OCI manifest of a trtwarm entry, or a malformed descriptor
    """
    doc = loads(data, limit=len(data) + 1)
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise ValueError("not an OCI manifest (schemaVersion 2)")
    if doc.get("mediaType", MANIFEST) != MANIFEST:
        raise ValueError(f"media type {str(doc.get('mediaType'))[:80]!r} is not an OCI image manifest")
    if doc.get("artifactType") != ENTRY_TYPE:
        raise ValueError(f"artifact type {str(doc.get('artifactType'))[:80]!r} is not {ENTRY_TYPE}")
    config = _descriptor(doc.get("config"), "config")
    if config["mediaType"] != REF_TYPE:
        raise ValueError(f"the config's media type is not {REF_TYPE}")
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise ValueError("the manifest has no layers list")
    return config, [(_descriptor(layer, "layer")["digest"][7:], layer["size"]) for layer in layers]


def _descriptor(value: Any, what: str) -> dict[str, Any]:
    if not (isinstance(value, dict) and isinstance(value.get("mediaType"), str)
            and isinstance(value.get("digest"), str) and _DIGEST.fullmatch(value["digest"])
            and isinstance(value.get("size"), int) and not isinstance(value["size"], bool) and value["size"] >= 0):
        raise ValueError(f"a malformed {what} descriptor (needs mediaType, a sha256 digest and a size)")
    return value


__all__ = ["CREATED", "ENTRY_TYPE", "FILE_TYPE", "KEY", "MANIFEST", "NAME", "REF_TYPE", "TITLE", "canonical",
           "check_entry_manifest", "descriptor", "entry_manifest"]
