"""Coverage: which Pods would hit. For each matrix row (a key document without its device section) and each GPU
product of the fleet, is there a ref whose key document equals it on that product?

A ref built ``--hardware-compat ampere+`` covers every product listed (the caller lists only Ampere or newer);
one built ``same-cc`` names a compute capability, which a product name alone does not give, so it counts only
where the caller passes that class (``sm8.9``) as a "GPU".

A GPU column is ``NAME@PLATFORM`` (``sm9.0@linux-aarch64``): an engine built on a GPU runs only on the OS and CPU
architecture it was built on, so an x86_64 Hopper column and an aarch64 Grace-Hopper column are answered apart
(:func:`columns` gives a column without a platform one per platform of the fleet). A ref keyed before the key had a
platform matches no such column.

A row whose engine runs on the CPU (its key document says ``device.kind: cpu``: the ONNX Runtime CPU provider,
``--device cpu``) belongs in the ``cpu`` column only: under a GPU product it does not apply (neither present nor
missing, and not counted), as a GPU row does not apply under ``cpu``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cell:
    """One (row, GPU) answer."""

    row: str
    gpu: str
    key: str | None  # the matching ref's key, or None: missing
    applies: bool = True  # False: a CPU row under a GPU column, or a GPU row under the cpu column


def is_cpu(column: str) -> bool:
    """Whether a column of ``--gpus`` is the CPU's (``cpu``, or ``cpu@PLATFORM`` where columns carry a platform)."""
    return column.strip().lower().partition("@")[0] == "cpu"


def cpu_row(want: Any) -> bool:
    """Whether a row's key document (without its device, but with ``device.kind`` when known) runs on the CPU."""
    return isinstance(want, dict) and isinstance(want.get("device"), dict) and want["device"].get("kind") == "cpu"


def columns(gpus: Sequence[str], platforms: Sequence[str]) -> list[str]:
    """The table's columns: a GPU named with ``@PLATFORM`` as given, one without once per *platforms* (the fleet's,
    in order); ``cpu`` as given (its key section names the architecture itself)."""
    out: list[str] = []
    for gpu in gpus:
        if "@" in gpu or gpu.lower() == "cpu":
            out.append(gpu)
        else:
            out.extend(f"{gpu}@{platform}" for platform in platforms)
    return list(dict.fromkeys(out))


def _device_matches(device: dict[str, Any], column: str) -> bool:
    if device.get("kind") != "gpu":
        return is_cpu(column)
    gpu, _, platform = column.partition("@")
    if platform and device.get("platform") != platform:
        return False
    if "product" in device:
        return str(device["product"]) == gpu and not device.get("mig_profile")
    return device.get("class") == "ampere+" or device.get("class") == gpu


def _same_builder(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """Equal builder sections; a TensorRT version declared without ``+cuN`` matches any CUDA major."""
    if want.get("cuda") is None:
        have = {k: v for k, v in have.items() if k != "cuda"}
        want = {k: v for k, v in want.items() if k != "cuda"}
    return have == want


def cover(rows: Sequence[tuple[str, Any]], gpus: Sequence[str],
          refs: Iterable[tuple[str, dict[str, Any]]]) -> list[Cell]:
    """*rows*: ``(label, key document minus device, or the error that kept it from being computed)``; *refs*:
    ``(key, ref)``. One :class:`Cell` per row × GPU."""
    docs = [(key, ref["manifest"].get("key_document") or {}) for key, ref in refs]
    cells = []
    for label, want in rows:
        if not isinstance(want, dict):  # its model could not be read: no key, so nothing can match
            cells.extend(Cell(label, gpu, None) for gpu in gpus)
            continue
        candidates = [(k, d) for k, d in docs if all(d.get(s) == want.get(s) for s in ("schema", "model", "build"))
                      and _same_builder(d.get("builder") or {}, want.get("builder") or {})]
        for gpu in gpus:
            if cpu_row(want) != is_cpu(gpu):
                cells.append(Cell(label, gpu, None, applies=False))
                continue
            match = next((k for k, d in candidates if _device_matches(d.get("device") or {}, gpu)), None)
            cells.append(Cell(label, gpu, match))
    return cells


def percent(cells: Sequence[Cell]) -> float:
    """Share of the cells that apply that are present, 0-100 (100 for none)."""
    cells = [c for c in cells if c.applies]
    return 100.0 * sum(c.key is not None for c in cells) / len(cells) if cells else 100.0


__all__ = ["Cell", "columns", "cover", "cpu_row", "is_cpu", "percent"]
