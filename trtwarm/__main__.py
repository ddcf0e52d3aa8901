"""``python -m trtwarm`` runs the command-line interface."""

from __future__ import annotations

import sys

from trtwarm.cli import main

sys.exit(main())
