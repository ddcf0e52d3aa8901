"""The README's quick start, run as printed by a newcomer: a non-root user (``nobody``) in a fresh directory, outside
Kubernetes, on a machine without ``/models/cache`` (issue 27, item 9). Its commands are read from the README, so
the README cannot drift from what works.

The user must be able to run this interpreter: where it lies under a directory ``nobody`` cannot enter (a pyenv
under ``/root``), the test runs in a private mount namespace with the interpreter's installation bound at a path
``nobody`` can reach (``unshare``), which changes nothing outside the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

from trtwarm.cli.defaults import Preset, local_defaults

README = (ROOT / "README.md").read_text()
USER = "nobody"
MARK = "<!-- quick start:"


def quick_start_commands() -> list[str]:
    """The command lines of the README's quick-start block (the first ``sh`` block after the marker)."""
    at = README.index(MARK)
    block = re.search(r"```sh\n(.*?)```", README[at:], re.S)
    assert block, "the README's quick start has no ```sh block after its marker"
    return [line for line in block[1].splitlines() if line.strip() and not line.lstrip().startswith("#")]


class Newcomer:
    """Runs shell lines as ``nobody`` in a fresh directory it owns, with ``.venv/bin/trtwarm`` as ``pip install -e``
    would make it, and a minimal environment (no ``TRTWARM_*``, no ``KUBERNETES_SERVICE_HOST``)."""

    def __init__(self, work: Path, python: str, pythonpath: str, bind: tuple[str, str] | None) -> None:
        self.work, self.home, self.bind = work, work / "home", bind
        self.home.mkdir()
        shim = work / "project" / ".venv" / "bin" / "trtwarm"
        shim.parent.mkdir(parents=True)
        shim.write_text(f"#!/bin/sh\nPYTHONPATH={pythonpath} exec {python} -m trtwarm \"$@\"\n")
        shim.chmod(0o755)
        shutil.chown(work, USER)
        for path in work.rglob("*"):
            shutil.chown(path, USER)

    def run(self, script: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """Run *script* with ``bash -e`` as the newcomer, in their project directory."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        argv = ["setpriv", f"--reuid={USER}", f"--regid={_group()}", "--clear-groups", "bash", "-ec", script]
        if self.bind:  # a private mount namespace: the interpreter's installation where nobody can reach it
            source, target = self.bind
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-ec",
                    f'mount --bind "{source}" "{target}" && exec "$@"', "sh", *argv]
        return subprocess.run(argv, cwd=self.work / "project", env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)


def _group() -> str:
    import grp

    return grp.getgrgid(_pw().pw_gid).gr_name


def _pw():  # noqa: ANN202
    import pwd

    return pwd.getpwnam(USER)


@pytest.fixture
def newcomer() -> Iterator[Newcomer]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the quick start as another, non-root user (setpriv)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    try:
        _pw()
    except KeyError:
        pytest.skip(f"no user {USER!r} on this machine")
    work = Path(tempfile.mkdtemp(prefix="trtwarm-quickstart-", dir="/tmp"))
    try:
        work.chmod(0o755)
        pythonpath = os.pathsep.join([str(ROOT), *site.getsitepackages()])
        person = Newcomer(work, sys.executable, pythonpath, None)
        if person.run(".venv/bin/trtwarm --version", 60).returncode != 0:  # e.g. the interpreter is under /root
            target = work / "python"
            target.mkdir(mode=0o755)
            version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
            shim = work / "project" / ".venv" / "bin" / "trtwarm"
            # its libpython too (an rpath into the unreachable directory would find the system's, of another 3.x.y)
            shim.write_text(f"#!/bin/sh\nPYTHONPATH={pythonpath} LD_LIBRARY_PATH={target}/lib exec "
                            f"{target}/bin/{version} -m trtwarm \"$@\"\n")
            person.bind = (sys.base_prefix, str(target))
            probe = person.run(".venv/bin/trtwarm --version", 60)
            if shutil.which("unshare") is None or probe.returncode != 0:
                pytest.skip(f"user {USER} cannot run this interpreter ({sys.executable}), not even bound elsewhere: "
                            f"{probe.stderr.strip()[-300:]}")
        if not os.access(ROOT, os.R_OK) or (ROOT.stat().st_mode & 0o005) != 0o005:
            pytest.skip(f"user {USER} cannot read the checkout {ROOT}")
        yield person
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _summaries(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"result"')]


def test_the_readme_quick_start_runs_as_printed_for_a_non_root_user(newcomer: Newcomer) -> None:
    commands = quick_start_commands()
    assert any(" demo" in c for c in commands) and any(" init " in c for c in commands), commands
    run = newcomer.run("\n".join(commands))
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-4000:])
    assert "Traceback" not in run.stderr
    cache, handoff = newcomer.home / ".cache" / "trtwarm" / "cache", newcomer.home / ".cache" / "trtwarm" / "handoff"
    assert f"using {cache} and {handoff} instead" in run.stderr  # said in one log line
    inits = [s for s in _summaries(run.stdout) if "name" in s]
    assert [s["result"] for s in inits][-2:] == ["built", "hit"], run.stdout
    report = json.loads((handoff / "engine.json").read_text())
    assert report["ready"] is True and os.readlink(handoff / "engine") == report["path"]
    assert report["path"].startswith(f"{cache}/entries/")
    assert "demo-mlp" in run.stdout.splitlines()[-4]  # `trtwarm ls`: the entry, with the summary lines after it
    owner = _pw().pw_uid
    assert all(p.lstat().st_uid == owner for p in newcomer.work.rglob("*") if p != newcomer.work / "python")


def test_an_unwritable_hand_off_dir_fails_at_start_naming_it_before_any_build(newcomer: Newcomer) -> None:
    locked = newcomer.work / "locked"
    locked.mkdir(mode=0o755)  # root's: nobody may not write it
    model = next(c for c in quick_start_commands() if " init " in c).split("--model ")[1].split()[0]
    run = newcomer.run(".venv/bin/trtwarm demo --workdir demo >/dev/null\n"
                       f"exec .venv/bin/trtwarm init --builder onnxruntime --model {model} --cache-dir cache "
                       f"--handoff-dir {locked} --shape input=1x16:8x16:32x16")
    assert run.returncode == 6, run.stderr
    assert f"cannot write the hand-off to {locked}" in run.stderr and "hint: " in run.stderr
    assert "building" not in run.stderr and "key " not in run.stderr  # found before the key, so before any build
    entries = newcomer.work / "project" / "cache" / "entries"
    assert not entries.exists() or not any(entries.iterdir())


def _ns(cache: str, handoff: str) -> Namespace:
    return Namespace(cache_dir=cache, handoff_dir=handoff)


def test_defaults_move_only_outside_kubernetes_and_only_what_cannot_be_created(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # below a regular file nothing can be created, not even by root
    home = {"HOME": str(tmp_path / "home")}
    ns = _ns(Preset(blocked / "cache"), Preset(blocked / "handoff"))
    said = local_defaults(ns, home)
    assert ns.cache_dir == str(tmp_path / "home" / ".cache" / "trtwarm" / "cache")
    assert ns.handoff_dir == str(tmp_path / "home" / ".cache" / "trtwarm" / "handoff")
    assert said and str(blocked / "cache") in said and "--cache-dir" in said
    xdg = _ns(Preset(blocked / "cache"), Preset(tmp_path / "h"))
    assert local_defaults(xdg, {**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}) is not None
    assert (xdg.cache_dir, xdg.handoff_dir) == (str(tmp_path / "xdg" / "trtwarm" / "cache"), str(tmp_path / "h"))
    for kept, environ in (
        (_ns(Preset(blocked / "c"), Preset(blocked / "h")), {**home, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}),
        (_ns(str(blocked / "c"), str(blocked / "h")), home),  # given by flag or variable: a plain str
        (_ns(Preset(tmp_path), Preset(tmp_path / "new")), home),  # exists / may be created
        (_ns(Preset(blocked / "c"), Preset(blocked / "h")), {"HOME": str(blocked / "home")}),  # no usable home
    ):
        before = vars(kept).copy()
        assert local_defaults(kept, environ) is None and vars(kept) == before
