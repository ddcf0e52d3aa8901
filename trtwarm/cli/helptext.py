"""What ``--help`` says beyond argparse's defaults: each flag's environment variable, the exit codes with their
meaning, and a suggestion for a mistyped command.

Pure functions over a built parser; :mod:`trtwarm.cli.main` calls them, and the shell completion reads the same parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

from trtwarm.config import env_name
from trtwarm.errors import ConfigError, exit_meanings


def exit_codes_epilog() -> str:
    """The ``exit codes:`` block printed under every command's ``--help``."""
    return "exit codes:\n" + "".join(f"  {code}  {meaning}\n" for code, meaning in exit_meanings())


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of *parser* by name (argparse offers no public accessor)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line help, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def long_options(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    """``(--flag, action)`` for each long option of *parser* except ``--help``."""
    for action in parser._actions:
        flags = [o for o in action.option_strings if o.startswith("--")]
        if flags and flags[0] not in ("--help", "--version") and action.help != argparse.SUPPRESS:
            yield flags[0], action


def annotate_env(parser: argparse.ArgumentParser) -> None:
    """Append ``[env TRTWARM_X]`` to the help of every long option of every subcommand (what
    :func:`trtwarm.config.env_defaults` reads), so ``--help`` names each variable next to its flag; and give every
    subcommand the exit-code table as its epilog; nested subcommands (``remote ls``, ``keys generate``) too."""
    seen: set[int] = set()
    todo = list(subcommands(parser).values())
    while todo:
        sub = todo.pop()
        if id(sub) in seen:  # an alias names the same parser twice
            continue
        seen.add(id(sub))
        if not sub.epilog:
            sub.epilog, sub.formatter_class = exit_codes_epilog(), argparse.RawDescriptionHelpFormatter
        for flag, action in long_options(sub):
            text = (action.help or "").rstrip()
            action.help = f"{text} [env {env_name(flag)}]".lstrip()
        todo.extend(subcommands(sub).values())


def unknown_command(word: str, commands: Sequence[str]) -> ConfigError:
    """The error for ``trtwarm WORD`` when WORD is no command: the closest command, then all of them."""
    import difflib  # only on this error path

    close = difflib.get_close_matches(word, commands, n=1, cutoff=0.5)
    guess = f"did you mean `trtwarm {close[0]}`? " if close else ""
    return ConfigError(f"unknown command {word!r}", hint=f"{guess}commands: {', '.join(commands)}")


__all__ = ["annotate_env", "command_help", "exit_codes_epilog", "long_options", "subcommands", "unknown_command"]
