"""``trtwarm warm --list FILE``: pre-warm several engines in one call (a node image bake, a CI job, a rollout).

The file is a JSON list of objects, or ``{"defaults": {...}, "models": [...]}``; each object's keys are ``init``
flags without the dashes (``model``, ``builder``, ``shape``, ``key-extra``, ...; ``_`` works for ``-``), a list
for a repeatable flag, ``true`` for a switch. Flags on the command line are the defaults for every model. YAML is
read too when PyYAML is installed (the init image does not ship it, so JSON is the documented format).

The models are warmed one after another in this process (builds on one GPU are serialised anyway), each with
one progress line; a failure is reported and the next model is tried. The exit code is 0 when every model is
ready, else the exit code of the first failure.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trtwarm import strictjson
from trtwarm.config import Settings
from trtwarm.errors import ConfigError, Interrupted, TrtwarmError, exit_code_for, hint_for
from trtwarm.cli.helptext import long_options, subcommands

log = logging.getLogger("trtwarm.cli.batch")
#: a list of models is a few KiB; a larger file is refused before it is parsed
LIST_LIMIT = 16 << 20
_LIST_HINT = 'e.g. [{"model": "/models/a.onnx", "builder": "onnxruntime", "shape": ["input=1x16:8x16:32x16"]}]'


def load(path: Path) -> list[dict[str, Any]]:
    """The model objects of *path*, with the file's ``defaults`` merged in. :raises ConfigError: unreadable, not
    a list of objects, or YAML without PyYAML."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read --list {path}: {exc.strerror}", hint="give a readable JSON file") from exc
    doc = _parse(path, text)
    defaults: dict[str, Any] = {}
    if isinstance(doc, dict):
        defaults, doc = doc.get("defaults") or {}, doc.get("models")
    if not isinstance(doc, list) or not doc or not all(isinstance(i, dict) for i in doc) or \
            not isinstance(defaults, dict):
        raise ConfigError(f"--list {path} is not a non-empty list of objects", hint=_LIST_HINT)
    return [{**defaults, **item} for item in doc]


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"--list {path} is YAML, and PyYAML is not installed", hint="write the list as JSON "
                              "(the same structure), or pip install pyyaml") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--list {path} is not valid YAML: {exc}", hint=_LIST_HINT) from None
    try:
        return strictjson.loads(text, limit=LIST_LIMIT)
    except strictjson.JSONRefused as exc:
        raise ConfigError(f"--list {path} is not valid JSON: {exc}", hint=_LIST_HINT) from None


def item_argv(item: Mapping[str, Any], known: Mapping[str, argparse.Action]) -> list[str]:
    """The ``init`` flags of one model object. :raises ConfigError: a key that is no init flag."""
    argv: list[str] = []
    for raw, value in item.items():
        flag = "--" + str(raw).replace("_", "-")
        action = known.get(flag)
        if action is None or flag in ("--list", "--json"):
            raise ConfigError(f"--list: {raw!r} is not an init flag", hint="use init's flags without the dashes, "
                              "e.g. model, builder, shape, key-extra (see `trtwarm init --help`)")
        if action.nargs == 0:
            argv += [flag] if value is True else []
        else:
            argv += [a for v in (value if isinstance(value, list) else [value]) for a in (flag, str(v))]
    return argv


def _namespace(sub: argparse.ArgumentParser, ns: argparse.Namespace, item: Mapping[str, Any],
               handoff: Path) -> argparse.Namespace:
    known = dict(long_options(sub))
    argv = item_argv(item, known)
    base = copy.deepcopy(ns)
    for flag in (f for f in argv if f.startswith("--")):  # a list in the file replaces the command line's list
        if isinstance(known[flag], argparse._AppendAction):
            setattr(base, known[flag].dest, [])
    try:
        parsed = sub.parse_args(argv, namespace=base)
    except SystemExit:  # argparse has printed why
        raise ConfigError(f"--list: invalid flags {' '.join(argv)}", hint="see the line above") from None
    if "handoff-dir" not in item and "handoff_dir" not in item:
        parsed.handoff_dir = str(handoff)
    return parsed


def _warm_one(sub: argparse.ArgumentParser, ns: argparse.Namespace, item: Mapping[str, Any], handoff: Path,
              environ: Mapping[str, str]) -> dict[str, Any]:
    from trtwarm.init.warm import warm

    start = time.monotonic()
    try:
        report = warm(Settings.from_namespace(_namespace(sub, ns, item, handoff), environ))
    except Interrupted:  # SIGTERM/SIGINT stops the whole list, not this model (the next would start)
        raise
    except TrtwarmError as exc:
        return {"model": str(item.get("model")), "result": "error", "exit_code": exit_code_for(exc),
                "error": exc.message, "hint": hint_for(exc), "seconds": round(time.monotonic() - start, 3)}
    return {"model": str(item.get("model")), "result": report.result, "exit_code": 0, "key": report.key,
            "name": report.name, "path": report.path, "seconds": round(report.seconds["total"], 3)}


def _line(i: int, n: int, r: Mapping[str, Any]) -> str:
    if r["result"] == "error":
        return f"[{i}/{n}] {r['model']}: error (exit {r['exit_code']}) after {r['seconds']:.1f} s: {r['error']}"
    return f"[{i}/{n}] {r['model']}: {r['result']} in {r['seconds']:.1f} s: {r['name']}"


def run(path: Path, ns: argparse.Namespace, environ: Mapping[str, str],
        make_parser: Callable[[], argparse.ArgumentParser]) -> int:
    """Warm every model of the list at *path*; print a line per model, then a summary (``--json``: a list)."""
    from trtwarm.lifecycle.tables import render

    items = load(path)
    sub = subcommands(make_parser())["warm"]
    base = Path(ns.handoff_dir) if ns.handoff_dir else Path(tempfile.mkdtemp(prefix="trtwarm-warm-"))
    results = []
    try:
        for i, item in enumerate(items, 1):
            stem = Path(str(item.get("model", "model"))).stem
            results.append(_warm_one(sub, ns, item, base / f"{i:02d}-{stem}", environ))
            # with --json standard output carries the list alone; the progress lines go to the log's stream
            print(_line(i, len(items), results[-1]), file=sys.stderr if ns.json else sys.stdout, flush=True)
    finally:
        if not ns.handoff_dir:
            shutil.rmtree(base, ignore_errors=True)
    if ns.json:
        print(json.dumps(results, sort_keys=True))
    else:
        print("\n" + render(["#", "MODEL", "RESULT", "SECONDS", "KEY", "ENTRY OR ERROR"], [
            [i, r["model"], r["result"], f"{r['seconds']:.1f}", (r.get("key") or "-")[:16],
             r.get("name") or f"{r['error']} (hint: {r['hint']})"] for i, r in enumerate(results, 1)],
            right=("#", "SECONDS")))
        ok = sum(r["result"] != "error" for r in results)
        print(f"\n{ok} of {len(results)} ready")
    return next((r["exit_code"] for r in results if r["exit_code"]), 0)


__all__ = ["item_argv", "load", "run"]
