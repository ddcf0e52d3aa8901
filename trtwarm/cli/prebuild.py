"""CI prebuilds from a matrix file: ``trtwarm prebuild --matrix FILE`` builds on this GPU what the remote lacks and
pushes it; :func:`matrix_rows` also feeds ``trtwarm remote coverage``.

The matrix is JSON (models × precisions, with shared options); every key is an ``init`` flag (``-`` or ``_``)::

    {"models": [{"model": "resnet50.onnx", "shape": ["input=1x3x224x224:8x3x224x224:32x3x224x224"]},
                {"model": "bert.onnx", "name": "bert-base"}],
     "precision": ["fp16", "int8"],
     "options": {"builder": "tensorrt", "workspace": "4G"}}

A list value is a repeated flag (``shape``, ``profile``, ``key-extra``), ``true`` a switch; a relative model path
is relative to ``"base"`` when the matrix has one (e.g. the chart's model mount), else to the matrix file.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from trtwarm.cli.flags import remote_environ
from trtwarm.config import Settings, env_defaults
from trtwarm.errors import ConfigError, ModelError, TrtwarmError, exit_code_for, hint_for
from trtwarm.remote.client import Client
from trtwarm.remote.repo import Repository
from trtwarm.remote.sync import RemoteSync
from trtwarm.remote.url import parse

log = logging.getLogger("trtwarm.cli.prebuild")


def _flags(row: Mapping[str, Any], base: Path) -> list[str]:
    argv: list[str] = []
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


def matrix_rows(path: Path) -> list[tuple[str, list[str]]]:
    """``(label, init flags)`` per model × precision. :raises ConfigError: unreadable or malformed matrix."""
    try:
        doc = json.loads(path.read_text())
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
    from trtwarm.cli.flags import add_init_flags, add_run_flags

    parser = _RowParser(prog="trtwarm prebuild", add_help=False)
    add_init_flags(parser)
    add_run_flags(parser)
    env_defaults(parser, environ)  # e.g. TRTWARM_SIGNING_KEY and TRTWARM_TRUST_POLICY for every row
    ns = parser.parse_args(flags)
    for name, value in extra.items():
        setattr(ns, name, value)
    return Settings.from_namespace(ns, remote_environ(ns, environ))


def _one(label: str, settings: Settings, sync: RemoteSync) -> str:
    """Build and push one row unless the remote has it. :return: what happened"""
    from trtwarm.init.plan import resolve
    from trtwarm.init.warm import warm

    plan = resolve(settings)
    if sync.repo.get_ref(plan.key) is not None:
        return "present"
    local = plan.store.lookup(plan.key, plan.name)
    if local is not None:
        sync.push(local)
        return f"pushed from the local cache ({sync.stats['push']})"
    report = warm(settings)
    return f"{report.result}, {report.remote.get('push', 'not pushed')}"


def run(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm prebuild``: one progress line per row, a summary table; exit status of the first failure."""
    if not ns.remote:
        raise ConfigError("prebuild needs --remote s3://BUCKET/PREFIX (or TRTWARM_REMOTE)")
    environ = remote_environ(ns, environ)  # the wait flags, for the check below and for every row
    remote = parse(ns.remote, environ)
    rows = matrix_rows(Path(ns.matrix))
    # the repository once, first: wrong credentials, a missing bucket or a dead endpoint fail the run with their
    # own exit code and hint, instead of each row retrying and failing alike
    next(iter(Repository(Client(remote)).keys()), None)
    work = Path(tempfile.mkdtemp(prefix="trtwarm-prebuild-"))  # hand-offs, and the cache unless --cache-dir
    try:
        return _run_rows(rows, ns, environ, remote, Path(ns.cache_dir) if ns.cache_dir else work / "cache", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # engines included: GBs a run on a CI runner otherwise


def _run_rows(rows: list[tuple[str, list[str]]], ns: argparse.Namespace, environ: Mapping[str, str], remote: Any,
              cache: Path, work: Path) -> int:
    from trtwarm.lifecycle.tables import render

    results, codes = [], []
    for index, (label, flags) in enumerate(rows, 1):
        start = time.monotonic()
        try:
            settings = settings_for(flags, environ, cache_dir=str(cache), remote=ns.remote,
                                    remote_push="required", handoff_dir=str(work / "handoff" / str(index)))
            sync = RemoteSync(remote, _store(settings), push="required")
            outcome = _one(label, settings, sync)
        except TrtwarmError as exc:
            codes.append(exit_code_for(exc))
            outcome = f"FAILED ({codes[-1]}): {exc.message}"
            log.error("[%d/%d] %s: %s", index, len(rows), label, outcome)
            if hint_for(exc):
                log.error("hint: %s", hint_for(exc))
        else:
            log.info("[%d/%d] %s: %s (%.1f s)", index, len(rows), label, outcome, time.monotonic() - start)
        results.append([label, outcome, f"{time.monotonic() - start:.1f}"])
    print(render(["ROW", "RESULT", "SECONDS"], results, right=("SECONDS",)))
    print(f"\n{len(rows)} rows: {len(rows) - len(codes)} ok, {len(codes)} failed")
    return codes[0] if codes else 0


def _store(settings: Settings) -> Any:
    from trtwarm.volume.layout import Layout
    from trtwarm.volume.store import EngineStore

    layout = Layout(settings.cache_dir)
    layout.ensure()
    return EngineStore(layout)


def coverage_rows(path: Path, environ: Mapping[str, str],
                  tensorrt: str | None) -> list[tuple[str, dict[str, Any] | ModelError]]:
    """``(label, key document without its device)`` per matrix row, computed without a GPU (TensorRT declared); a
    row whose model cannot be read carries its :class:`ModelError` instead, and the others are still computed."""
    from trtwarm.builders.base import get_builder
    from trtwarm.key import SCHEMA, model_fields
    from trtwarm.volume.statcache import inspect_model

    out = []
    for label, flags in matrix_rows(path):
        settings = settings_for(flags, environ, **({"tensorrt_version": tensorrt} if tensorrt else {}))
        try:
            builder = get_builder(settings)
        except ConfigError:
            if settings.builder != "tensorrt" or tensorrt:
                raise
            raise ConfigError(f"matrix row {label} builds with TensorRT, which is not installed here",
                              hint="pass --tensorrt with the servers' exact TensorRT version (e.g. 10.16.1.11+cu12): "
                              "coverage computes the keys without TensorRT") from None
        try:
            facts, _memo = inspect_model(settings.model, None)
        except ModelError as exc:
            out.append((label, exc))
            continue
        out.append((label, {"schema": SCHEMA, "model": model_fields(facts), "builder": builder.identity(),
                            "build": builder.build_fields(facts)}))
    return out


__all__ = ["coverage_rows", "matrix_rows", "run", "settings_for"]
