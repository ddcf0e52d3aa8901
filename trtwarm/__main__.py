"""``python -m trtwarm`` runs the command line (through :mod:`trtwarm.cli.entry`: a repeat hit first, for ``init``)."""

from __future__ import annotations

from trtwarm.cli.entry import run

run()
