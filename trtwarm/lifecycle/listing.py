"""``trtwarm ls`` rows: one record per entry, build in progress or quarantined entry, in one vocabulary.

The ``--json`` records and the table's cells come from the same dictionaries, so ``status``, ``builder``,
``device`` and ``shapes`` read the same in both (``shapes`` like ``input=8x3x224x224``, ``device`` like
``nvidia-h200`` or ``cpu-x86_64``). The default columns fit 120 characters; ``--columns`` picks others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from trtwarm.errors import ConfigError
from trtwarm.key import model_part
from trtwarm.lifecycle.entryinfo import EntryInfo, OwnerInfo
from trtwarm.lifecycle.inventory import Inventory
from trtwarm.lifecycle.tables import fit, human_age, human_bytes, render, utc

WIDTH = 120


def _ago(ts: float | None, now: float) -> str:
    return "-" if ts is None else f"{human_age(now - ts)} ago"


def _status(r: dict[str, Any]) -> str:
    return f"{r['status']}: {r['problem']}" if r.get("problem") and r["status"] != "ok" else str(r["status"])


#: column name -> (header, cell from a record and the scan's time)
COLUMNS: dict[str, tuple[str, Callable[[dict[str, Any], float], object]]] = {
    "name": ("NAME", lambda r, now: r["name"] or "?"),
    "key": ("KEY", lambda r, now: (r["key"] or "-")[:16]),
    "model": ("MODEL", lambda r, now: r["model"]),
    "builder": ("BUILDER", lambda r, now: r["builder"] or "-"),
    "device": ("DEVICE", lambda r, now: r["device"] or "-"),
    "precision": ("PREC", lambda r, now: r["precision"] or "-"),
    "shapes": ("SHAPES", lambda r, now: r["shapes"] or "-"),
    "size": ("SIZE", lambda r, now: human_bytes(r["bytes"])),
    "created": ("CREATED", lambda r, now: utc(r["created_ts"])),
    "used": ("USED", lambda r, now: _ago(r["last_used_ts"], now)),
    "pods": ("PODS", lambda r, now: len(r["pods"])),
    "status": ("STATUS", lambda r, now: _status(r)),
    "path": ("PATH", lambda r, now: r["path"] or "-"),
}
DEFAULT_COLUMNS = ("key", "model", "builder", "device", "precision", "shapes", "size", "used", "pods", "status")
#: the columns that give way (truncated with "…") when the default table is wider than :data:`WIDTH`, and the
#: width each keeps (a damaged entry's reason keeps its start; ``show`` prints it in full)
_SHRINK = {"SHAPES": 10, "MODEL": 10, "DEVICE": 11, "BUILDER": 19, "NAME": 24, "PATH": 24, "STATUS": 28}


def entry_record(e: EntryInfo) -> dict[str, Any]:
    """An entry (or a quarantined one) as ``ls --json`` prints it."""
    record = e.as_json()
    record["model"] = model_part(e.name)
    return record


def building_record(o: OwnerInfo) -> dict[str, Any]:
    """A build in progress (a live owner record of a key's lock)."""
    label = o.record.get("label")
    return {"key": o.lock_id, "name": label, "model": model_part(label) if label else None, "path": None,
            "engine_bytes": None, "bytes": None, "status": "building", "problem": None, "created": None,
            "created_ts": o.record.get("started"), "last_used_ts": None, "pods": [],
            "builder": None, "device": None, "precision": None, "shapes": None, "owner": o.record}


def records(inv: Inventory, quarantined: bool) -> list[dict[str, Any]]:
    """Entries, then builds of keys not yet published, then (with *quarantined*) quarantined entries."""
    published = {e.key for e in inv.entries}
    out = [entry_record(e) for e in inv.entries]
    out += [building_record(o) for o in inv.building if o.lock_id not in published]
    if quarantined:
        out += [entry_record(e) for e in inv.quarantined]
    return out


def parse_columns(text: str | None) -> tuple[list[str], bool]:
    """``--columns name,key,...`` (or ``all``) into column names; the bool says whether to fit :data:`WIDTH`.

    :raises ConfigError: an unknown column, with the known ones
    """
    if not text:
        return list(DEFAULT_COLUMNS), True
    names = list(COLUMNS) if text.strip() == "all" else [c.strip().lower() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLUMNS]
    if unknown or not names:
        raise ConfigError(f"unknown column {', '.join(unknown) or '(none)'} for --columns",
                          hint=f"choose from {','.join(COLUMNS)} (or all); default {','.join(DEFAULT_COLUMNS)}")
    return names, False


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], now: float, width: int | None) -> str:
    """The records as a table of *columns*; fitted to *width* characters when given."""
    headers = [COLUMNS[c][0] for c in columns]
    cells = [[str(COLUMNS[c][1](r, now)) for c in columns] for r in rows]
    if width:
        cells = fit(headers, cells, width, _SHRINK)
    return render(headers, cells, right=("SIZE", "PODS"))


__all__ = ["COLUMNS", "DEFAULT_COLUMNS", "WIDTH", "building_record", "entry_record", "parse_columns", "records",
           "table"]
