"""``python -m trtwarm`` runs the command-line interface."""

from __future__ import annotations

from trtwarm.cli import run

run()
