#!/usr/bin/env python3
"""Generate the values table of ``helm/trtwarm/README.md`` from the ``# --`` comments in ``values.yaml``.

The helm-docs convention: a ``# -- text`` comment (continued by further ``#`` lines) documents the key below it.
``python helm/values_doc.py`` rewrites the table between the ``<!-- values -->`` markers; ``--check`` exits 1 when
the README is stale or a value is undocumented (the tests run it).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent / "trtwarm"
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.+-]+):")


def documented(values_text: str) -> dict[str, str]:
    """``dotted.key -> description`` for every key preceded by a ``# --`` comment."""
    docs, stack, pending = {}, [], None
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = stripped[4:].strip()
        elif stripped.startswith("#") and pending is not None:
            pending += " " + stripped[1:].strip()
        elif (match := _KEY.match(line)) and not stripped.startswith("-"):
            depth = len(match[1]) // 2
            stack = stack[:depth] + [match[2]]
            if pending is not None:
                docs[".".join(stack)] = pending
            pending = None
        elif stripped:
            pending = None
    return docs


def leaves(tree: object, prefix: str = "") -> list[str]:
    """Dotted paths of the leaves (empty maps and lists count as leaves)."""
    if isinstance(tree, dict) and tree:
        return [p for k, v in tree.items() for p in leaves(v, f"{prefix}.{k}" if prefix else k)]
    return [prefix]


def undocumented(values: dict, docs: dict[str, str]) -> list[str]:
    """Leaves with no ``# --`` comment on themselves or on an ancestor."""
    return [leaf for leaf in leaves(values)
            if not any(leaf == d or leaf.startswith(d + ".") for d in docs)]


def _lookup(values: dict, dotted: str) -> object:
    node: object = values
    for part in dotted.split("."):
        node = node[part]  # type: ignore[index]
    return node


def table(values: dict, docs: dict[str, str]) -> str:
    rows = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for key, text in docs.items():
        value = _lookup(values, key)
        kind = {dict: "object", list: "list", bool: "bool", int: "int", float: "float"}.get(type(value), "string")
        default = json.dumps(value, separators=(",", ":")).replace("|", "\\|")
        rows.append(f"| `{key}` | {kind} | `{default}` | {text.replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    text = (CHART / "values.yaml").read_text()
    values, docs = yaml.safe_load(text), documented(text)
    missing = undocumented(values, docs)
    readme = CHART / "README.md"
    current = readme.read_text()
    new = re.sub(r"(<!-- values -->\n).*?(<!-- /values -->)", lambda m: m[1] + table(values, docs) + m[2], current,
                 flags=re.S)
    if "--check" in sys.argv:
        if missing:
            print("undocumented values: " + ", ".join(missing))
        if new != current:
            print("helm/trtwarm/README.md is stale: run python helm/values_doc.py")
        return 1 if missing or new != current else 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
