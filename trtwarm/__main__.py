"""``python -m trtwarm`` runs the command line (through :mod:`trtwarm.entry`: a repeat hit first, for ``init``)."""

from __future__ import annotations

from trtwarm.entry import run

run()
