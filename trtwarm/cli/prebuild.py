"""CI prebuilds from a matrix file: ``trtwarm prebuild --matrix FILE`` builds on this GPU what the remote lacks and
pushes it; :func:`matrix_rows` also feeds ``trtwarm remote coverage``.

The matrix is JSON (models × precisions, with shared options); every key is an ``init`` flag (``-`` or ``_``)::

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
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from trtwarm.config import Settings, env_defaults
from trtwarm.errors import ConfigError, TrtwarmError, exit_code_for, hint_for
from trtwarm.remote.backend import open_repository, parse_remote
from trtwarm.remote.sync import RemoteSync

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


def matrix_platforms(path: Path) -> list[str]:
    """The matrix's ``"platforms"`` in canonical form (``linux-aarch64``), or [this host's] when it names none.

    :raises ConfigError: unreadable matrix, or a platform that is not ``<os>-<arch>``
    """
    from trtwarm.node.hostplatform import host_platform, parse_platform

    try:
        doc = json.loads(path.read_text())
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
    return Settings.from_namespace(ns, environ)


def _one(label: str, settings: Settings, sync: RemoteSync | None, keep: list[tuple[str, str]] | None = None) -> str:
    """Build and push one row unless the remote has it. :return: what happened

    :param sync: None without ``--remote`` (``--oci-image`` alone): build into the local cache only
    :param keep: for ``--oci-image``: the row's ``(key, entry name)`` is added, and an entry the remote has is
        pulled into the local cache (the image is made from it)
    """
    from trtwarm.init.plan import resolve
    from trtwarm.init.warm import warm

    plan = resolve(settings)
    if keep is not None:
        keep.append((plan.key, plan.name))
    if sync is None:
        return "present in the cache" if plan.store.lookup(plan.key, plan.name) else warm(settings).result
    if sync.repo.get_ref(plan.key) is not None:
        if keep is not None and plan.store.lookup(plan.key, plan.name) is None:
            sync.strict = True  # a refused or failing pull fails the row: the image must hold every row
            sync.pull(plan.key, plan.name)
            return "present, pulled for the image"
        return "present"
    local = plan.store.lookup(plan.key, plan.name)
    if local is not None:
        sync.push(local)
        return f"pushed from the local cache ({sync.stats['push']})"
    report = warm(settings)
    return f"{report.result}, {report.remote.get('push', 'not pushed')}"


def run(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm prebuild``: one progress line per row, a summary table; exit status of the first failure."""
    if not ns.remote and not ns.oci_image:
        raise ConfigError("prebuild needs --remote s3://BUCKET/PREFIX or oci://REGISTRY/REPOSITORY (or "
                          "TRTWARM_REMOTE), or --oci-image REGISTRY/REPOSITORY:TAG")
    remote = parse_remote(ns.remote, environ, insecure=ns.insecure_registry) if ns.remote else None
    rows = matrix_rows(Path(ns.matrix))
    _check_platform(matrix_platforms(Path(ns.matrix)))
    _image_target(ns, environ)  # a malformed --oci-image fails before any build
    # the repository once, first: wrong credentials, a missing bucket or a dead endpoint fail the run with their
    # own exit code and hint, instead of each row retrying and failing alike
    if remote is not None:
        next(iter(open_repository(remote).keys()), None)
    work = Path(tempfile.mkdtemp(prefix="trtwarm-prebuild-"))  # hand-offs, and the cache unless --cache-dir
    try:
        return _run_rows(rows, ns, environ, remote, Path(ns.cache_dir) if ns.cache_dir else work / "cache", work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # engines included: GBs a run on a CI runner otherwise


def _check_platform(platforms: list[str]) -> None:
    """:raises ConfigError: this runner's platform is not one the matrix declares (its engines would serve no node)."""
    from trtwarm.node.hostplatform import host_platform

    here = host_platform()
    if here not in platforms:
        raise ConfigError(f"this runner is {here}, and the matrix declares the platforms {', '.join(platforms)}",
                          hint="run prebuild on a runner of each declared platform (an engine runs only on the OS and "
                          "CPU architecture it was built on), or add this one to \"platforms\"")
    others = [p for p in platforms if p != here]
    if others:
        log.info("building the %s engines; %s need a runner of their own", here, ", ".join(others))


def _run_rows(rows: list[tuple[str, list[str]]], ns: argparse.Namespace, environ: Mapping[str, str], remote: Any,
              cache: Path, work: Path) -> int:
    from trtwarm.lifecycle.tables import render

    results, codes = [], []
    keep: list[tuple[str, str]] | None = [] if ns.oci_image else None
    for index, (label, flags) in enumerate(rows, 1):
        start = time.monotonic()
        try:
            settings = settings_for(flags, environ, cache_dir=str(cache), remote=ns.remote,
                                    remote_push="required", handoff_dir=str(work / "handoff" / str(index)))
            sync = RemoteSync(remote, _store(settings), push="required") if remote is not None else None
            outcome = _one(label, settings, sync, keep)
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
    if codes:
        if ns.oci_image:
            log.error("the engine image %s was not pushed: a row failed", ns.oci_image)
        return codes[0]
    if keep is not None:
        print(f"engine image {ns.oci_image}@{_push_image(ns, environ, cache, keep)}")
    return 0


def _image_target(ns: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    """``--oci-image REGISTRY/REPOSITORY:TAG`` checked before any build. :raises ConfigError:"""
    if not ns.oci_image:
        return None
    from trtwarm.remote.oci.url import split_reference

    try:
        _registry, _repository, tag = split_reference(ns.oci_image, tag=True)
    except ValueError as exc:
        raise ConfigError(f"--oci-image {ns.oci_image!r}: {exc}", hint="e.g. --oci-image "
                          "registry.example.com/engines/resnet50:server-24.12 (a tag per server release)") from None
    if tag is None:
        raise ConfigError(f"--oci-image {ns.oci_image!r} has no tag", hint="add :TAG, e.g. the server image's release")
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.url import parse as parse_oci

    # the registry once, before any build: wrong credentials or a dead registry fail with their own exit code
    OciClient(parse_oci(f"oci://{_registry}/{_repository}", environ, insecure=ns.insecure_registry)).check_bucket()
    return tag


def _push_image(ns: argparse.Namespace, environ: Mapping[str, str], cache: Path, keep: list[tuple[str, str]]) -> str:
    """Make and push the engine image of the matrix's entries (each in the local cache by now). :return: digest"""
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.image import push_image
    from trtwarm.remote.oci.url import parse as parse_oci
    from trtwarm.remote.oci.url import split_reference

    registry, repository, tag = split_reference(ns.oci_image, tag=True)
    store = _store_at(cache)
    found = []
    for key, name in dict.fromkeys(keep):
        entry = store.lookup(key, name)
        if entry is None:
            raise ConfigError(f"the entry {name} is not in the local cache {cache}", hint="run prebuild again")
        found.append((entry.path, entry.manifest))
    client = OciClient(parse_oci(f"oci://{registry}/{repository}", environ, insecure=ns.insecure_registry))
    return push_image(client, str(tag), cache, found)


def _store(settings: Settings) -> Any:
    return _store_at(settings.cache_dir)


def _store_at(cache: Path) -> Any:
    from trtwarm.volume.layout import Layout
    from trtwarm.volume.store import EngineStore

    layout = Layout(cache)
    layout.ensure()
    return EngineStore(layout)


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


__all__ = ["coverage_rows", "matrix_platforms", "matrix_rows", "run", "settings_for"]
