"""The prebuild matrix, one file for ``trtwarm prebuild``, ``prewarm`` and ``remote coverage``: models × precisions
with shared options, each row parsed by ``init``'s own parser into :class:`~trtwarm.config.Settings`.

The matrix is JSON; every key is an ``init`` flag (``-`` or ``_``)::

    {"models": [{"model": "resnet50.onnx", "shape": ["input=1x3x224x224:8x3x224x224:32x3x224x224"]},
                {"model": "bert.onnx", "name": "bert-base"}],
     "precision": ["fp16", "int8"],
     "options": {"builder": "tensorrt", "workspace": "4G"}}

A list value is a repeated flag (``shape``, ``profile``, ``key-extra``), ``true`` a switch; a relative model path
is relative to ``"base"`` when the matrix has one (e.g. the chart's model mount), else to the matrix file.

``"platforms": ["linux-x86_64", "linux-aarch64"]`` declares the fleet's host platforms (an engine built on a GPU runs
only on the OS and CPU architecture it was built on): ``remote coverage`` shows a column per GPU and platform, and
``prebuild`` on a runner builds that runner's platform only, refusing a runner whose platform the matrix lacks.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from trtwarm import strictjson
from trtwarm.config import Settings, env_defaults
from trtwarm.errors import ConfigError, TrtwarmError

#: a matrix is a few KiB; a larger file is refused before it is parsed
MATRIX_LIMIT = 16 << 20


def _flags(row: Mapping[str, Any], base: Path) -> list[str]:
    argv: list[str] = []
    if "\\u0000" in json.dumps(row, default=str):  # JSON's escape of a NUL: no path or flag value holds one
        raise ConfigError("a matrix row holds a NUL character", hint="remove it: no file name or flag value has one")
    for name, value in row.items():
        flag = "--" + str(name).replace("_", "-")
        if name == "model":
            value = str((base / str(value)) if not Path(str(value)).is_absolute() else value)
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            for item in value:
                argv += [flag, str(item)]
        elif value not in (None, False):
            argv += [flag, str(value)]
    return argv


def matrix_platforms(path: Path) -> list[str]:
    """The matrix's ``"platforms"`` in canonical form (``linux-aarch64``), or [this host's] when it names none.

    :raises ConfigError: unreadable matrix, or a platform that is not ``<os>-<arch>``
    """
    from trtwarm.node.hostplatform import host_platform, parse_platform

    try:
        doc = strictjson.loads(path.read_bytes(), limit=MATRIX_LIMIT)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--matrix {path}: {getattr(exc, 'strerror', None) or exc}") from None
    given = doc.get("platforms") if isinstance(doc, dict) else None
    if given is None:
        return [host_platform()]
    if not isinstance(given, list) or not given or not all(isinstance(p, str) for p in given):
        raise ConfigError(f"--matrix {path}: \"platforms\" must be a non-empty list such as [\"linux-x86_64\", "
                          "\"linux-aarch64\"]")
    try:
        return list(dict.fromkeys(parse_platform(p) for p in given))
    except ValueError as exc:
        raise ConfigError(f"--matrix {path}: {exc}") from None


def matrix_rows(path: Path) -> list[tuple[str, list[str]]]:
    """``(label, init flags)`` per model × precision. :raises ConfigError: unreadable or malformed matrix."""
    try:
        doc = strictjson.loads(path.read_bytes(), limit=MATRIX_LIMIT)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--matrix {path}: {getattr(exc, 'strerror', None) or exc}", hint="a JSON file: "
                          "{\"models\": [{\"model\": \"a.onnx\"}], \"precision\": [\"fp16\"]}") from None
    hint = "a JSON object: {\"models\": [{\"model\": \"a.onnx\"}], \"precision\": [\"fp16\"], \"options\": {}}"
    if not isinstance(doc, dict):
        raise ConfigError(f"--matrix {path}: not a JSON object", hint=hint)
    models, precisions, options = doc.get("models"), doc.get("precision", [None]), doc.get("options") or {}
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) and m.get("model") for m in models):
        raise ConfigError(f"--matrix {path}: needs \"models\", a list of objects each with a \"model\"", hint=hint)
    precisions = precisions if isinstance(precisions, list) else [precisions]
    if not precisions or not all(p is None or isinstance(p, str) for p in precisions):
        raise ConfigError(f"--matrix {path}: \"precision\" must be a non-empty list of names (fp16, int8...)",
                          hint=hint)
    if not isinstance(options, dict):
        raise ConfigError(f"--matrix {path}: \"options\" must be an object of init flags", hint=hint)
    rows = []
    for model in models:
        for precision in precisions:
            row = {**options, **model, **({"precision": precision} if precision else {})}
            label = f"{model.get('name') or Path(str(model['model'])).stem}/{row.get('precision', 'default')}"
            rows.append((label, _flags(row, Path(str(doc.get("base") or path.parent)))))
    return rows


class _RowParser(argparse.ArgumentParser):
    """``init``'s flags for one matrix row: a bad one is a ConfigError naming it, not argparse's exit."""

    def error(self, message: str) -> NoReturn:  # noqa: D102
        raise ConfigError(f"matrix row: {message}", hint="every key of a matrix row is an `init` flag; see "
                          "`trtwarm init --help`")


def settings_for(flags: list[str], environ: Mapping[str, str], **extra: Any) -> Settings:
    """Parse one row's flags with ``init``'s parser (same validation) into Settings; *extra* overrides."""
    from trtwarm.cli.flags import add_init_flags, add_run_flags, remote_environ

    parser = _RowParser(prog="trtwarm prebuild", add_help=False)
    add_init_flags(parser)
    add_run_flags(parser)
    env_defaults(parser, environ)  # e.g. TRTWARM_SIGNING_KEY and TRTWARM_TRUST_POLICY for every row
    ns = parser.parse_args(flags)
    for name, value in extra.items():
        setattr(ns, name, value)
    return Settings.from_namespace(ns, remote_environ(ns, environ))


def coverage_rows(path: Path, environ: Mapping[str, str],
                  tensorrt: str | None) -> list[tuple[str, dict[str, Any] | TrtwarmError]]:
    """``(label, key document without its device)`` per matrix row, computed without a GPU (TensorRT declared); a
    CPU row's document has ``device: {"kind": "cpu"}`` (its column is ``cpu``). A row that cannot be computed (its
    model unreadable, a flag or shape that does not fit) carries its error instead, and the others are still
    computed. :raises ConfigError: a TensorRT row without ``--tensorrt`` here (the whole command needs it)"""
    out: list[tuple[str, dict[str, Any] | TrtwarmError]] = []
    for label, flags in matrix_rows(path):
        try:
            out.append((label, _coverage_row(label, flags, environ, tensorrt)))
        except _NoTensorRT as exc:
            raise exc.error from None
        except TrtwarmError as exc:  # this row's problem: reported in its cells and the log, the rest answered
            out.append((label, exc))
    return out


class _NoTensorRT(Exception):
    def __init__(self, error: ConfigError) -> None:
        super().__init__(error.message)
        self.error = error


def _coverage_row(label: str, flags: list[str], environ: Mapping[str, str], tensorrt: str | None) -> dict[str, Any]:
    from trtwarm.builders.base import get_builder
    from trtwarm.key import SCHEMA, model_fields
    from trtwarm.volume.statcache import inspect_model

    settings = settings_for(flags, environ, **({"tensorrt_version": tensorrt} if tensorrt else {}))
    try:
        builder = get_builder(settings)
    except ConfigError:
        if settings.builder != "tensorrt" or tensorrt:
            raise
        raise _NoTensorRT(ConfigError(
            f"matrix row {label} builds with TensorRT, which is not installed here", hint="pass --tensorrt with the "
            "servers' exact TensorRT version (e.g. 10.16.1.11+cu12): coverage computes the keys without TensorRT"))
    facts, _memo = inspect_model(settings.model, None)
    doc = {"schema": SCHEMA, "model": model_fields(facts), "builder": builder.identity(),
           "build": builder.build_fields(facts)}
    if builder.device_probe()[0] == "cpu":
        doc["device"] = {"kind": "cpu"}  # not compared: says which column the row belongs in
    return doc


__all__ = ["coverage_rows", "matrix_platforms", "matrix_rows", "settings_for"]
