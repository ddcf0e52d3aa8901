"""The ``trtwarm`` command line: argument parsing, dispatch, and the one place errors become exit codes.

Every long option is also an environment variable ``TRTWARM_<OPTION>`` (see :mod:`trtwarm.config`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from trtwarm import __version__
from trtwarm import log as logsetup
from trtwarm.config import Settings, env_defaults
from trtwarm.cli.defaults import CACHE_PRESET, HANDOFF_PRESET, local_defaults
from trtwarm.errors import BuildError, ConfigError, OutputError, exit_code_for
from trtwarm.cli.flags import add_init_flags, add_run_flags, remote_environ
from trtwarm.cli.helptext import annotate_env, exit_codes_epilog, unknown_command
from trtwarm.cli.output import as_error, guarded, report_failure

log = logging.getLogger("trtwarm")
LIFECYCLE = ("ls", "show", "stats", "verify", "gc", "rm")
SIGNING = ("keys", "sign")
COMMANDS = ("init", "key", "warm", "sidecar", *LIFECYCLE, *SIGNING, "remote", "prebuild", "prewarm", "selftest", "demo",
            "completion")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a :class:`ConfigError` (exit 2, with a ``hint:`` line and, for ``init``, the
    termination message), like every other bad input. Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message}", hint=f"`{self.prog} --help` lists the flags")


def _sub(sub: Any, name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, epilog=exit_codes_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=func)
    return p


def _key_flags(key: argparse.ArgumentParser) -> None:
    key.add_argument("--json", action="store_true", help="machine-readable output")
    key.add_argument("--explain", action="store_true", help="on a miss, list the key fields that differ from the "
                     "nearest entries of the same model on the volume")


def _warm_flags(warm: argparse.ArgumentParser) -> None:
    warm.add_argument("--list", dest="models_list", metavar="FILE", help="the models: a JSON (or, with PyYAML, YAML) "
                      "list of objects whose keys are init flags, e.g. [{\"model\": \"a.onnx\"}]")
    warm.add_argument("--json", action="store_true", help="print the summary as JSON")
    warm.set_defaults(handoff_dir=None)  # a temporary directory, unless given
    for action in warm._actions:  # argparse has no public lookup by dest
        if action.dest == "handoff_dir":
            action.help = "each model's engine.json goes to DIR/<n>-<model>/ (default: a temporary directory)"


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with *only*, just that subcommand's options are defined (a hit should not pay for the rest)."""
    parser = _Parser(prog="trtwarm", description="Build TensorRT engines once, reuse them everywhere.\n\n"
                                     "Every long option is also an environment variable TRTWARM_<OPTION> (upper "
                                     "case, - becomes _);\na flag on the command line wins. Completion: "
                                     "source <(trtwarm completion bash)",
                                     epilog=exit_codes_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"trtwarm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _init_commands(sub, only)
    _tool_commands(sub, only)
    _small_commands(sub)
    annotate_env(parser)
    return parser


def _init_commands(sub: Any, only: str | None) -> None:
    """``init`` and the two commands that take its flags: ``key`` and ``warm``."""
    init = _sub(sub, "init", "init-container entrypoint: hit, wait or build once", cmd_init)
    key = _sub(sub, "key", "print the key document and key without building; --explain: why did my Pod rebuild?",
               cmd_key)
    warm = _sub(sub, "warm", "pre-warm several engines in one call: init for each model of a JSON/YAML list",
                cmd_warm)
    for p, name in ((init, "init"), (key, "key"), (warm, "warm")):
        if only in (None, name):
            add_init_flags(p)
            add_run_flags(p)
    if only in (None, "key"):
        _key_flags(key)
    if only in (None, "warm"):
        _warm_flags(warm)


def _tool_commands(sub: Any, only: str | None) -> None:
    """The sidecar, the lifecycle and signing commands, the remote repository: each defined only when asked for."""
    if only in (None, "sidecar"):
        from trtwarm.sidecar.server import add_parser

        add_parser(sub, CACHE_PRESET, HANDOFF_PRESET)
    if only is None or only in LIFECYCLE:
        from trtwarm.lifecycle.commands import add_parsers
        from trtwarm.lifecycle.show import add_parser as add_show

        add_parsers(sub, CACHE_PRESET)
        add_show(sub, CACHE_PRESET)
    if only is None or only in SIGNING:
        from trtwarm.lifecycle.signing import add_parsers as add_signing

        add_signing(sub, CACHE_PRESET)
    if only in (None, "remote", "prebuild"):
        from trtwarm.cli.remote import add_parsers as add_remote_parsers

        add_remote_parsers(sub)
    if only in (None, "prewarm"):
        from trtwarm.cli.prewarm import add_parser as add_prewarm

        add_prewarm(sub)


def _small_commands(sub: Any) -> None:
    """``selftest``, ``demo`` and ``completion``."""
    selftest = _sub(sub, "selftest", "on a GPU node: identity, versions, build, load and run a tiny engine",
                    cmd_selftest)
    selftest.add_argument("--workdir", help="keep the model, cache and engines here (default: a temporary directory)")
    demo = _sub(sub, "demo", "generate a model and run init twice with the onnxruntime builder", cmd_demo)
    demo.add_argument("--cache-dir", help="cache to use (default: a fresh temporary directory)")
    demo.add_argument("--workdir", help="where the model and hand-off dirs go (default: a temporary directory, "
                      "removed at the end)")
    completion = _sub(sub, "completion", "print a shell completion script: source <(trtwarm completion bash)",
                      cmd_completion)
    completion.add_argument("shell", choices=["bash", "zsh"])


def _apply_env(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    for action in parser._actions:  # argparse offers no public access to subparsers
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                env_defaults(sub, environ)
                _apply_env(sub, environ)  # `remote ls` and the like


def cmd_init(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm init``."""
    from trtwarm.init import handoff
    from trtwarm.node.events import EventRecorder
    from trtwarm.init.warm import warm

    settings = Settings.from_namespace(ns, remote_environ(ns, environ))
    ns.settings = settings
    events = EventRecorder(settings.identity, environ)
    try:
        report = warm(settings, events)
    except BuildError as exc:
        events.emit("EngineBuildFailed", exc.message, "Warning")
        raise
    finally:
        events.close(settings.events_timeout)
    push = f" (push {report.seconds['push']:.1f} s)" if "push" in report.seconds else ""
    log.info("%s %s in %.3f s%s: %s", report.result, report.name, report.seconds["total"], push, report.path)
    summary = report.summary()
    handoff.termination_message(settings.termination_log, summary)
    try:
        print(json.dumps(summary, separators=(",", ":")), flush=True)
    except OutputError as exc:  # the engine is handed over; the summary is also in engine.json and the message
        log.warning("%s; the summary is in %s", exc.message, settings.handoff_dir / handoff.REPORT)
    return 0


def cmd_key(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm key`` and ``trtwarm key --explain``."""
    from trtwarm.init.plan import resolve

    plan = resolve(Settings.from_namespace(ns, environ))
    if ns.explain:
        from trtwarm.key import model_part
        from trtwarm.lifecycle.explain import explain, render

        plan.layout.require()  # an unmounted volume must not read as "a first build" (exit 6, naming the path)
        report = explain(plan.store, plan.doc, plan.key, plan.name, model_part(plan.name))
        print(json.dumps(report, indent=2, sort_keys=True) if ns.json else render(report))
        return 0
    if ns.json:
        print(json.dumps({"key": plan.key, "name": plan.name, "document": plan.doc}, indent=2, sort_keys=True))
    else:
        print(json.dumps(plan.doc, indent=2, sort_keys=True))
        print(f"key  {plan.key}\nname {plan.name}")
    return 0


def cmd_warm(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm warm --list FILE``: init for each model of the list, one progress line each, then a summary."""
    from trtwarm.cli.batch import run

    if not ns.models_list:
        raise ConfigError("trtwarm warm needs --list FILE", hint="e.g. trtwarm warm --list models.json --cache-dir "
                          "/models/cache; `trtwarm warm --help` shows the file's format")
    return run(Path(ns.models_list), ns, environ, lambda: _parser("warm"))


def cmd_completion(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm completion bash|zsh``: the script, generated from this parser."""
    from trtwarm.cli import completion

    print(getattr(completion, ns.shell)(_parser()), end="")
    return 0


def cmd_selftest(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm selftest``."""
    from trtwarm.cli.selftest import run

    return run(environ, Path(ns.workdir) if ns.workdir else None)


def cmd_demo(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm demo``."""
    from trtwarm.cli.demo import run

    return run(Path(ns.cache_dir) if ns.cache_dir else None, Path(ns.workdir) if ns.workdir else None)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the CLI and return the exit code (see ``trtwarm --help`` for the table)."""
    environ = os.environ if environ is None else environ
    ns: argparse.Namespace | None = None
    logsetup.setup(environ.get("TRTWARM_LOG_FORMAT", "text"))
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args and args[0] in COMMANDS else None
    if command in STOPPABLE:  # as early as possible: a Pod deleted while its init starts still gets the message
        from trtwarm.init.stopping import stop_on_signals

        stop_on_signals(command)
    try:
        ns = _parse(args, command, environ)
        logsetup.setup(getattr(ns, "log_format", "text"))
        with guarded():
            return int(ns.func(ns, environ))
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 (the one place a failure becomes its exit code)
        error = as_error(exc, reporting=command in REPORTING or args[:2] in (["remote", "gc"], ["remote", "rm"]))
        if error is None:
            return 0
        report_failure(ns, error, environ, command)
        return exit_code_for(error)


def _parse(args: list[str], command: str | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """The command line, with the environment's defaults. :raises ConfigError: unknown command or flag"""
    if args and not args[0].startswith("-") and args[0] not in COMMANDS:
        raise unknown_command(args[0], COMMANDS)
    parser = _parser(command)  # None (unknown): every command, for the error message
    _apply_env(parser, environ)
    ns, extra = parser.parse_known_args(args)
    moved = local_defaults(ns, environ)  # a newcomer's machine: no /models/cache, no /trtwarm, not root
    if moved:
        log.info("%s", moved)
    if command == "init":
        ns.start_args = args[1:]  # as given: what a repeat of this start must match (trtwarm.init.fasthit)
    if extra:  # argparse's own message names only `trtwarm`, whose --help does not list a command's flags
        nested = getattr(ns, "remote_command", None) if command == "remote" else None
        where = " ".join(w for w in ("trtwarm", command, nested) if w)
        raise ConfigError(f"{where}: unrecognized arguments: {' '.join(extra)}", hint=f"`{where} --help` lists the "
                          "flags")
    return ns


#: commands that turn SIGTERM/SIGINT into a clean stop (exit 143/130): a build's process group stopped, its staging
#: directory removed, the locks released, every network wait ended at once
STOPPABLE = ("init", "warm", "remote", "prebuild", "prewarm")
#: commands whose output is their result: a reader closing the pipe early makes them fail (exit 14), not succeed
#: (``remote gc`` and ``remote rm`` too)
REPORTING = ("verify", "gc", "rm", "sign")
#: commands that end with everything they wrote closed, so the process may skip interpreter teardown (see run)
FAST_EXIT = ("init", "key", *LIFECYCLE)


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The process entry point (console script, ``python -m trtwarm``, ``cmd/`` shims): :func:`main`, then exit.

    After the commands in :data:`FAST_EXIT`, whose files, locks and threads are all closed by then, the process ends
    with :func:`os._exit` once logging and standard streams are flushed: tearing the interpreter down costs about
    8 ms of CPU, which a storm of 64 Pods waking on 2 cores would spend one after another (docs/benchmarks.md).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    code = main(args)
    from trtwarm.init.stopping import build_left_running

    # a cancelled build still inside TensorRT: os._exit too, whatever the command, after the usual unwinding
    if build_left_running(code) or (args and args[0] in FAST_EXIT):
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:  # None: the process was started with that descriptor closed
                    stream.flush()
            except (OSError, ValueError):  # a closed pipe: what could be written was
                pass
        os._exit(code)
    sys.exit(code)


__all__ = ["COMMANDS", "FAST_EXIT", "main", "run"]
