"""The command-line reference of ``docs/cli.md`` (and the README's short exit-code table), rendered from the parser
and :data:`trtwarm.errors.EXIT_MEANINGS`, so the documentation cannot drift from the code.

``python -m trtwarm.cli.reference`` rewrites every generated block in place; ``--check`` changes nothing and exits 1
when a block is stale (``tests/test_docs.py`` runs the same comparison). A block lies between
``<!-- generated: NAME ... -->`` and ``<!-- end generated: NAME -->``; everything outside the markers is written by
hand and left alone.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

from trtwarm.cli.helptext import command_help, subcommands
from trtwarm.config import env_name
from trtwarm.errors import EXIT_MEANINGS

REGENERATE = "python -m trtwarm.cli.reference"
ROOT = Path(__file__).resolve().parents[2]  # the checkout: docs/ and README.md beside trtwarm/
_ENV_SUFFIX = re.compile(r"\s*\[env TRTWARM_[A-Z0-9_]+\]$")


def begin(name: str) -> str:
    """The opening marker of block *name*."""
    return f"<!-- generated: {name} (from the code: `{REGENERATE}` rewrites it; do not edit by hand) -->"


def end(name: str) -> str:
    """The closing marker of block *name*."""
    return f"<!-- end generated: {name} -->"


def _cell(text: str) -> str:
    """*text* as one Markdown table cell: one line, ``|`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    """The flag's help as ``--help`` prints it (``%(default)s`` expanded), without the ``[env ...]`` suffix."""
    text = argparse.HelpFormatter("trtwarm")._expand_help(action) if action.help else ""  # argparse's own expansion
    return _ENV_SUFFIX.sub("", text)


def _default(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "off" if action.default in (False, None) else "on"
    if action.default in (None, [], "", argparse.SUPPRESS) or action.required:
        return "(required)" if action.required else ""
    return f"`{action.default}`"


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return ", ".join(f"`{c}`" for c in action.choices)
    return f"`{action.metavar or action.dest.upper()}`"


def _rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:  # argparse has no public iterator over actions
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        longs = [o for o in action.option_strings if o.startswith("--")]
        if action.option_strings and not longs:
            continue
        name = f"`{longs[0]}`" if longs else f"`{(action.metavar or action.dest).upper()}`"
        variable = f"`{env_name(longs[0])}`" if longs else "(argument)"
        repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) and "repeat" not in _help(action) else ""
        if action.nargs in ("+", "*"):
            repeat = " (one or more)"
        yield (f"| {name} | {_cell(_value(action))} | {_cell(_default(action))} | {variable} | "
               f"{_cell(_help(action) + repeat)} |")


def _usage_words(parser: argparse.ArgumentParser) -> str:
    """The positional arguments of *parser* as ``KEY...`` words (none for a parser of subcommands)."""
    words = []
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        word = (action.metavar or action.dest).upper()
        words.append(f"{word}..." if action.nargs in ("+", "*") else word)
    return "".join(f" {w}" for w in words)


def _walk(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(command words, one-line help, parser)`` for every subcommand, nested ones after their parent."""
    helps = command_help(parser)
    for name, sub in subcommands(parser).items():
        words = f"{path} {name}".strip()
        yield words, helps.get(name, ""), sub
        yield from _walk(sub, words)


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
            for o in a.option_strings[:1] if o.startswith("--") and o != "--version"]


def _sentence(text: str) -> str:
    text = _cell(text)
    return text if text.endswith((".", "?", "!")) else text + "."


def render_commands(parser: argparse.ArgumentParser) -> str:
    """``### Command reference``: one line per command with its flags, then one table per command (``key`` and
    ``warm`` list only the rows that differ from ``init``'s)."""
    lines = ["### Command reference", "",
             *textwrap.wrap("Every command and its flags, rendered from the parser; each flag is also the environment "
                            "variable in its row (a flag on the command line wins).", 120), ""]
    for name, sub in subcommands(parser).items():
        nested = list(subcommands(sub))
        if nested:
            line = f"* `trtwarm {name}`: subcommands {', '.join(nested)}, each with its own flags (below)"
        else:
            flags = ", ".join(f"`{f}`" for f in _flags(sub)) or "no flags"
            line = f"* `trtwarm {name}{_usage_words(sub)}`: {flags}"
        lines += textwrap.wrap(line, 120, subsequent_indent="  ", break_on_hyphens=False)
    init = subcommands(parser)["init"]
    init_rows, init_flags = set(_rows(init)), set(_flags(init))
    for words, help_text, sub in _walk(parser):
        if subcommands(sub):
            continue
        rows = list(_rows(sub))
        takes_init = words != "init" and init_flags <= set(_flags(sub))  # key, warm: init's rows, said once
        own = [r for r in rows if r not in init_rows] if takes_init else rows
        shared = "" if len(own) == len(rows) else " It also takes every flag of `trtwarm init` not listed here."
        lines += ["", f"#### `trtwarm {words}{_usage_words(sub)}`", "", _sentence(help_text) + shared, ""]
        if own:
            lines += ["| flag | value | default | variable | meaning |", "|---|---|---|---|---|", *own]
        else:
            lines.append("No flags.")
    return "\n".join(lines)


def short_meaning(meaning: str) -> str:
    """The README's short form of an exit code's meaning: its first clause, without parentheses."""
    while re.search(r"\([^()]*\)", meaning):
        meaning = re.sub(r"\s*\([^()]*\)", "", meaning)
    return meaning.split("; ", 1)[0]


def render_exit_codes(short: bool = False) -> str:
    """The exit-code table: every code with its meaning (as ``--help`` prints it), or the README's short form."""
    rows = [f"| {code} | {_cell(short_meaning(m) if short else m)} |" for code, m in EXIT_MEANINGS.items()]
    return "\n".join(["| code | meaning |", "|---|---|", *rows])


def blocks(parser: argparse.ArgumentParser) -> dict[str, dict[str, str]]:
    """File (relative to the checkout) → block name → the block's text as the code renders it now."""
    return {"docs/cli.md": {"commands": render_commands(parser), "exit-codes": render_exit_codes()},
            "README.md": {"exit-codes-short": render_exit_codes(short=True)}}


def replace(text: str, name: str, body: str) -> str:
    """*text* with block *name* replaced by *body*. :raises ValueError: the markers are missing or out of order"""
    pattern = re.compile(r"<!-- generated: " + re.escape(name) + r" .*?-->\n.*?" + re.escape(end(name)), re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"expected one block {name!r} between {begin(name)!r} and {end(name)!r}")
    return pattern.sub(lambda _m: f"{begin(name)}\n{body}\n{end(name)}", text)


def stale(root: Path, parser: argparse.ArgumentParser) -> dict[str, str]:
    """File → its text with every block rendered now, for each file whose blocks differ from that."""
    changed = {}
    for rel, named in blocks(parser).items():
        text = (root / rel).read_text()
        new = text
        for name, body in named.items():
            new = replace(new, name, body)
        if new != text:
            changed[rel] = new
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the generated blocks (or, with ``--check``, report the stale ones and exit 1)."""
    from trtwarm.cli.main import _parser  # the full parser, every command defined

    args = argparse.ArgumentParser(prog=f"{REGENERATE}", description=__doc__.split("\n\n")[0])
    args.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: %(default)s)")
    ns = args.parse_args(argv)
    if not all((ns.root / rel).is_file() for rel in blocks(_parser())):
        print(f"no docs/cli.md and README.md under {ns.root}: run this from a checkout, or pass --root",
              file=sys.stderr)
        return 2
    changed = stale(ns.root, _parser())
    for rel, text in changed.items():
        if ns.check:
            print(f"{rel}: the generated blocks are stale; run `{REGENERATE}`", file=sys.stderr)
        else:
            (ns.root / rel).write_text(text)
            print(f"rewrote {rel}")
    return 1 if changed and ns.check else 0


if __name__ == "__main__":
    sys.exit(main())
