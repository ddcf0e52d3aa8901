"""The init container's entrypoint shim runs ``trtwarm init``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, env_for, ort_init_args


def test_init_shim_runs_init(model: Path, cache: Path, tmp_path: Path) -> None:
    args = ort_init_args(model, cache, tmp_path / "h")[1:]
    proc = subprocess.run([sys.executable, str(ROOT / "cmd" / "trtwarm-init"), *args], capture_output=True,
                          text=True, env=env_for(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert '"result":"built"' in proc.stdout.splitlines()[-1]
    assert not (ROOT / "cmd" / "__init__.py").exists()  # a package named cmd would shadow the stdlib
