"""The process entry point (the ``trtwarm`` console script, ``python -m trtwarm``, the ``cmd/`` shims).

``trtwarm init`` first tries the repeat hit (:mod:`trtwarm.init.fasthit`), which imports almost nothing; everything
else, and every init that is not a repeat, runs the command line (:mod:`trtwarm.cli.main`). This module imports only
``os`` and ``sys`` itself, so a repeat pays for nothing it does not use.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def run(argv: Sequence[str] | None = None) -> None:
    """Run ``trtwarm ARGV`` (default ``sys.argv[1:]``) and exit the process with its code; never returns."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["init"]:
        from trtwarm.init import fasthit

        code = fasthit.attempt(args[1:], os.environ)
        if code is not None:
            for stream in (sys.stdout, sys.stderr):
                try:
                    if stream is not None:
                        stream.flush()
                except (OSError, ValueError):  # a closed pipe: what could be written was
                    pass
            os._exit(code)  # as cli.run after an init: nothing is left open, teardown only costs time
    from trtwarm.cli.main import run as run_cli

    run_cli(args)


__all__ = ["run"]
