"""Which entries an operator means: ``KEY|PREFIX|NAME`` selectors (``show``, ``rm``) and ``ls`` filters.

A selector matches, case-insensitively: a full key; a key prefix of 8+ hex digits; an entry's full name; its name
without the ``--<key16>`` suffix; or a model name (the name's first part), which may match several entries. An
entry's path (``<cache>/entries/NAME``, with or without a trailing slash) names that entry.
``ls`` filters compare against the same words ``ls`` prints (one vocabulary for the table and ``--json``).
"""

from __future__ import annotations

import argparse
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trtwarm.key import model_part
from trtwarm.lifecycle.entryinfo import EntryInfo

_HEX = re.compile(r"[0-9a-f]{8,64}")
#: the values of ``ls --status`` (``in-use``: a live Pod holds a lease on it)
STATUSES = ("ok", "damaged", "building", "quarantined", "in-use")


def selector_word(selector: str) -> str:
    """*selector* as compared: trimmed, lower case, and a path (``<cache>/entries/NAME``, or ``NAME/`` as shell
    completion leaves it) reduced to its last component."""
    return selector.strip().rstrip("/").rpartition("/")[2].lower()


def matches(info: EntryInfo, selector: str) -> bool:
    """Whether *selector* names *info* (see the module docstring)."""
    sel = selector_word(selector)
    name, key = info.name.lower(), (info.key or "").lower()
    if sel in (name, key, name.rpartition("--")[0], model_part(name)):
        return True
    return bool(_HEX.fullmatch(sel)) and (key.startswith(sel) or name.endswith("--" + sel[:16]))


def select(entries: Iterable[EntryInfo], selector: str) -> list[EntryInfo]:
    """The entries *selector* names (empty: none)."""
    return [e for e in entries if matches(e, selector)]


def _like(value: Any, pattern: str, *, prefix: bool = True) -> bool:
    """Glob when *pattern* has wildcards, else a case-insensitive prefix (``tensorrt`` matches ``tensorrt 10.16``)
    or, without *prefix*, equality."""
    text, pattern = str(value or "").lower(), pattern.lower()
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(text, pattern)
    return text.startswith(pattern) if prefix else text == pattern


@dataclass(frozen=True)
class Filters:
    """``ls --model/--builder/--device/--status``; None: no filter."""

    model: str | None = None
    builder: str | None = None
    device: str | None = None
    status: str | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> Filters:
        """From ``ls``'s parsed flags."""
        return cls(ns.model, ns.builder, ns.device, ns.status)

    def describe(self) -> str:
        """The filters in force as flags (``--model m.onnx, --device auto``): a ``TRTWARM_*`` variable left set in a
        shell sets them as silently as a flag."""
        return ", ".join(f"--{name} {value}" for name, value in
                         (("model", self.model), ("builder", self.builder), ("device", self.device),
                          ("status", self.status)) if value)

    @property
    def wants_quarantined(self) -> bool:
        """``--status quarantined`` lists them without ``--all``."""
        return self.status == "quarantined"

    def keep(self, record: dict[str, Any]) -> bool:
        """Whether an ``ls`` record passes every filter."""
        if self.model and not _like(record.get("model"), self.model, prefix=False):
            return False
        if self.builder and not _like(record.get("builder"), self.builder):
            return False
        if self.device and not _like(record.get("device"), self.device):
            return False
        if self.status == "in-use":
            return bool(record.get("pods"))
        return not self.status or record.get("status") == self.status

    def apply(self, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records that pass."""
        return [r for r in records if self.keep(r)]


def add_flags(p: argparse.ArgumentParser) -> None:
    """Define the filter flags on ``ls``."""
    p.add_argument("--model", help="only this model (the name's first part; wildcards * ? allowed)")
    p.add_argument("--builder", help="only builders starting with this, e.g. tensorrt or 'tensorrt 10.16'")
    p.add_argument("--device", help="only devices starting with this, e.g. nvidia-h200 or cpu")
    p.add_argument("--status", choices=STATUSES, help="only entries with this status")


__all__ = ["STATUSES", "Filters", "add_flags", "matches", "select", "selector_word"]
