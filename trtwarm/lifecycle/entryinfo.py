"""What a scan of a cache volume finds (:mod:`trtwarm.lifecycle.inventory`): one entry directory, one build owner.

Plain records with the readable views ``ls``, ``show``, ``gc`` and ``verify`` share: an entry's labels from its key
document, its ``--json`` form, whether a live Pod holds it; an owner record's staleness.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm.node.device import short_name
from trtwarm.key import configuration
from trtwarm.volume import leases as leaselib

#: an owner record whose heartbeat (every 5 s) is older than this belongs to a builder that is gone
OWNER_STALE_SECONDS = 60.0
#: a full key (SHA-256 hex), as lock ids, ``.uses/`` markers and lease directories are named
FULL_KEY = re.compile(r"[0-9a-f]{64}")


@dataclass
class EntryInfo:
    """One directory under ``entries/`` or ``.quarantine/``, as :func:`scan` found it."""

    name: str
    where: str  # its path (a str: making 10,000 Path objects was a tenth of `ls`; see :attr:`path`)
    status: str  # ok | damaged | quarantined
    bytes: int
    key: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    last_used: float | None = None
    created: float | None = None
    leases: list[leaselib.Lease] = field(default_factory=list)  # fresh ones only
    building: bool = False
    broken: bool = False  # not an entry directory at all: a file, a symlink, or unreadable

    @functools.cached_property
    def path(self) -> Path:
        """The directory."""
        return Path(self.where)

    @property
    def in_use(self) -> bool:
        """A live Pod holds a lease on it."""
        return bool(self.leases)

    @property
    def configuration(self) -> str:
        """What ``--keep-per-model`` keeps N of: the model and the engine's configuration, not their versions."""
        return configuration(self.name, self.manifest.get("key_document"))

    def describe(self) -> dict[str, str]:
        """Readable builder, device, precision and shapes, from the manifest's key document (do not modify it)."""
        doc = self.manifest.get("key_document") or {}
        if not doc:  # not read (a fast scan) or unreadable: the name carries readable labels
            parts = (self.name.rpartition("--")[0].split("_") + ["?"] * 5)[1:5]
            return dict(zip(("device", "builder", "precision", "shapes"), parts))
        seen = _DESCRIBED.get(id(doc))
        if seen is not None and seen[0] is doc:  # entries from the manifest index share their key documents
            described = seen[1]
        else:
            if len(_DESCRIBED) >= 256:
                _DESCRIBED.clear()
            _DESCRIBED[id(doc)] = (doc, described := _describe(doc))
        if described["shapes"] == "static" and "_unshaped--" in self.name:  # dynamic inputs no --shape fixed
            return {**described, "shapes": "unshaped"}  # as the name says (trtwarm.key.entry_name)
        return described

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` form (``key``, ``name``, ``path``, ``engine_bytes`` as in the core, plus the rest)."""
        m, where = self.manifest, self.where
        return {"key": self.key, "name": self.name,
                "path": os.path.join(where, str(m["engine_file"])) if "engine_file" in m else where,
                "engine_bytes": m.get("engine_bytes"), "bytes": self.bytes, "status": self.status,
                "problem": self.problem, "created": m.get("created_utc"), "created_ts": m.get("created"),
                "last_used_ts": self.last_used, "pods": [lease.holder for lease in self.leases],
                "engine_info": self.engine_info, **self.describe()}  # builder, device: readable, not the dicts

    @property
    def engine_info(self) -> dict[str, Any] | None:
        """What the builder read back from the engine (``extra.engine_info``), without the per-layer list."""
        extra = self.manifest.get("extra")
        info = extra.get("engine_info") if isinstance(extra, dict) else None
        return {k: v for k, v in info.items() if k != "layer_precisions"} if isinstance(info, dict) else None


#: id(key document) -> (it, its description): a few key documents serve many entries (see EntryInfo.describe)
_DESCRIBED: dict[int, tuple[dict[str, Any], dict[str, str]]] = {}


def _describe(doc: dict[str, Any]) -> dict[str, str]:
    """Labels from a key document; a part of another shape than trtwarm writes (a hand-edited manifest) reads as
    unknown, never as an error: ``ls`` must list a volume whatever one entry holds."""
    builder, build = _obj(doc.get("builder")), _obj(doc.get("build"))
    shapes = ",".join(f"{n}={'x'.join(map(str, _obj(s).get('opt') or []))}" for n, s in sorted(
        _obj(build.get("shapes")).items()))
    return {"builder": f"{builder.get('name', '?')} {builder.get('version', '')}".strip(),
            "device": short_name(_obj(doc.get("device"))), "precision": str(build.get("precision", "")),
            "shapes": shapes or "static"}


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class OwnerInfo:
    """An owner record ``.locks/<id>.owner.json``: who holds (or held) a build lock."""

    lock_id: str
    path: Path
    record: dict[str, Any]
    heartbeat_age: float

    @property
    def stale(self) -> bool:
        """The holder stopped refreshing it: it died (its lock was released by the kernel or its lease expired)."""
        return self.heartbeat_age > OWNER_STALE_SECONDS

    @property
    def is_key(self) -> bool:
        """A per-key build lock (not a per-GPU or GC lock)."""
        return bool(FULL_KEY.fullmatch(self.lock_id))


__all__ = ["FULL_KEY", "OWNER_STALE_SECONDS", "EntryInfo", "OwnerInfo"]
