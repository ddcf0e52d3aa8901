"""No secrets on disk: whatever the Pod's environment carries never reaches the volume, the hand-off, the stamp
directory or the termination message (a filter by name would not do: secrets have any name)."""

from __future__ import annotations

import time
from json import dumps as json_dumps
from pathlib import Path

from conftest import cmd_init_args, run_trtwarm
from test_sidecar import SidecarProc
from test_trust import keypair

from trtwarm.volume.stamps import RACY_SECONDS

SENTINEL = "SENTINEL-7f3a9c"
SECRETS = {"AWS_SECRET_ACCESS_KEY": f"{SENTINEL}-aws", "MY_DB": f"postgres://app:{SENTINEL}@db/prod",
           "X_PLAIN": f"{SENTINEL}-unnamed", "TRTWARM_HF_TOKEN": f"{SENTINEL}-trtwarm-prefixed"}


def _grep(*roots: Path) -> list[str]:
    """Every file under *roots* (links not followed) whose bytes hold the sentinel."""
    found = []
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and not path.is_symlink() and SENTINEL.encode() in path.read_bytes():
                found.append(str(path))
    return found


def test_sentinel_secrets_in_every_commands_environment_reach_no_file(model: Path, cache: Path,
                                                                     tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    termination.write_text("")
    env = {**SECRETS, "TRTWARM_TERMINATION_LOG": str(termination), "POD_NAME": "p1", "POD_NAMESPACE": "ml"}
    private, _ = keypair(tmp_path, "ci")
    handoff = tmp_path / "h"
    args = cmd_init_args(model, cache, handoff, "--verify", "stamp")
    assert run_trtwarm(*args, env=env).summary["result"] == "built"
    time.sleep(RACY_SECONDS + 0.2)  # files younger than this are neither stamped nor recorded
    for _ in range(3):  # hashed and stamped; vouched by stamp and recorded; repeated from the record
        run = run_trtwarm(*args, env=env)
        assert run.returncode == 0 and run.summary["result"] == "hit", run.stderr
    assert "repeating this node's record of the hit" in run.stderr, "the record was written and used"
    assert list((handoff / "stamps").glob("hit-*.json"))
    for command in (["verify"], ["ls"], ["sign", "--key", str(private), run.summary["key"]], ["gc", "--dry-run"]):
        done = run_trtwarm(*command, "--cache-dir", str(cache), env=env)
        assert done.returncode == 0, (command, done.stderr)
    sidecar = SidecarProc(cache, handoff, env=env)
    try:
        sidecar.metric("trtwarm_engine_ready")
    finally:
        sidecar.stop()
    assert termination.read_text(), "the termination message was written"
    assert _grep(cache, handoff, termination) == []


def test_records_of_an_older_trtwarm_which_held_the_environment_are_removed(model: Path, cache: Path,
                                                                           tmp_path: Path) -> None:
    handoff = tmp_path / "h"
    args = cmd_init_args(model, cache, handoff, "--verify", "stamp")
    assert run_trtwarm(*args).summary["result"] == "built"
    time.sleep(RACY_SECONDS + 0.2)
    assert run_trtwarm(*args).returncode == 0
    old = handoff / "stamps" / "hit-0badc0de.json"
    old.write_text(json_dumps({"schema": 1, "start": {"env": SECRETS}}))
    old.chmod(0o600)
    assert run_trtwarm(*args).returncode == 0  # vouched by stamp: the first record, and the key, are made
    assert not old.exists() and (handoff / "stamps" / "hit.key").stat().st_mode & 0o777 == 0o600
    assert _grep(handoff) == []
