"""``--verify stamp``: a hit skips the hash only for files this node verified and that provably did not change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import cmd_init_args, entries, run_trtwarm

from trtwarm.volume.stamps import RACY_SECONDS, StampBook, identity


def _built(model: Path, cache: Path, tmp_path: Path) -> Path:
    """Build an engine, then let it age past the racy window (a file changed within it is never stamped)."""
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0")).summary["result"] == "built"
    time.sleep(RACY_SECONDS + 0.2)  # not a timing assertion: a younger file is deliberately not stamped
    return entries(cache)[0] / "engine.plan"


def _stamped_hit(model: Path, cache: Path, tmp_path: Path, *extra: str):  # noqa: ANN202
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--verify", "stamp", *extra))
    assert run.returncode == 0, run.stderr
    return run


def _rewrite_keeping_mtime(engine: Path, data: bytes) -> None:
    """Write *data* in place (same inode, same size), then restore the old atime/mtime: only ctime tells."""
    before = engine.stat()
    with open(engine, "r+b") as handle:
        handle.write(data)
    os.utime(engine, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = engine.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def test_second_hit_is_vouched_by_its_stamp_and_a_ctime_change_is_rehashed(model: Path, cache: Path,
                                                                           tmp_path: Path) -> None:
    engine = _built(model, cache, tmp_path)
    first = _stamped_hit(model, cache, tmp_path)
    assert first.summary["result"] == "hit" and "0 file(s) by stamp, 1 hashed" in first.stderr
    assert list((tmp_path / "h" / "stamps").iterdir()), "a verified file is stamped on the node"
    assert not (cache / "stamps").exists() and not (cache / ".stamps").exists()  # never on the shared volume
    second = _stamped_hit(model, cache, tmp_path)
    assert second.summary["result"] == "hit" and "1 file(s) by stamp, 0 hashed (0 bytes)" in second.stderr
    # a writer flips the first byte and restores size and mtime: the stamp no longer matches (ctime), so the
    # engine is hashed, found corrupt, quarantined and rebuilt
    original = engine.read_bytes()
    _rewrite_keeping_mtime(engine, bytes([original[0] ^ 0xFF]))
    third = _stamped_hit(model, cache, tmp_path)
    assert third.summary["result"] == "built", third.stderr
    assert "engine SHA-256 does not match the manifest" in third.stderr
    assert len(list((cache / ".quarantine").iterdir())) == 1


def test_a_replaced_file_with_the_same_bytes_and_mtime_is_rehashed_and_still_a_hit(model: Path, cache: Path,
                                                                                  tmp_path: Path) -> None:
    engine = _built(model, cache, tmp_path)
    _stamped_hit(model, cache, tmp_path)
    old = engine.stat()
    copy = engine.with_name("copy.tmp-outside")
    shutil.copy2(engine, copy)  # same bytes and mtime, another inode
    os.replace(copy, engine)
    assert engine.stat().st_ino != old.st_ino and engine.stat().st_mtime_ns == old.st_mtime_ns
    run = _stamped_hit(model, cache, tmp_path)
    assert run.summary["result"] == "hit" and "0 file(s) by stamp, 1 hashed" in run.stderr


def _matches(book: StampBook, engine: Path, digest: str) -> bool:
    """What the hit's per-file checker says of *engine* against a row naming *digest* (through a descriptor)."""
    fd = os.open(engine, os.O_RDONLY)
    try:
        row = {"path": engine.name, "role": "engine", "bytes": engine.stat().st_size, "sha256": digest}
        return book.checker()(fd, row) == fd
    finally:
        os.close(fd)


def _forge(book_dir: Path, engine: Path) -> Path:
    """What an attacker wants: a stamp for the altered file claiming the digest the manifest names."""
    manifest = json.loads((engine.parent / "manifest.json").read_text())
    record = book_dir / f"{engine.stat().st_dev:x}-{engine.stat().st_ino:x}.json"
    record.write_text(json.dumps({"stat": identity(engine.stat()), "sha256": manifest["engine_sha256"],
                                  "at": time.time(), "path": str(engine)}))
    return record


def test_a_stamp_in_a_directory_others_can_write_is_not_trusted(model: Path, cache: Path, tmp_path: Path) -> None:
    engine = _built(model, cache, tmp_path)
    original = engine.read_bytes()
    _rewrite_keeping_mtime(engine, bytes([original[0] ^ 0xFF]))
    stamps = tmp_path / "shared-stamps"
    stamps.mkdir()
    os.chmod(stamps, 0o777)  # e.g. a stamp directory placed on a volume that other Pods write
    _forge(stamps, engine)
    run = _stamped_hit(model, cache, tmp_path, "--stamp-dir", str(stamps))
    assert "ignoring stamps in" in run.stderr and "others may write it (mode 0777" in run.stderr
    assert run.summary["result"] == "built" and "engine SHA-256 does not match" in run.stderr


def test_a_stamp_record_writable_by_others_is_not_trusted(model: Path, cache: Path, tmp_path: Path) -> None:
    engine = _built(model, cache, tmp_path)
    _rewrite_keeping_mtime(engine, bytes([engine.read_bytes()[0] ^ 0xFF]))
    book = StampBook(tmp_path / "stamps")
    assert book.usable()
    record = _forge(book.directory, engine)
    os.chmod(record, 0o666)
    manifest = json.loads((engine.parent / "manifest.json").read_text())
    assert not _matches(book, engine, manifest["engine_sha256"])
    assert (book.vouched, book.hashed) == (0, 1)


def test_a_stamp_is_trusted_for_max_age_only(model: Path, cache: Path, tmp_path: Path) -> None:
    engine = _built(model, cache, tmp_path)
    expected = json.loads((engine.parent / "manifest.json").read_text())["engine_sha256"]
    book = StampBook(tmp_path / "stamps")
    assert _matches(book, engine, expected) and _matches(book, engine, expected)
    assert (book.vouched, book.hashed) == (1, 1)
    expired = StampBook(tmp_path / "stamps", max_age=0)  # --stamp-max-age 0: every hit hashes (media corruption)
    assert _matches(expired, engine, expected) and (expired.vouched, expired.hashed) == (0, 1)
    # and a stamp never vouches for a digest other than the one the manifest (or its signature) names
    assert not _matches(book, engine, "0" * 64)


def test_a_stamp_directory_on_the_cache_volume_is_refused(model: Path, cache: Path, tmp_path: Path) -> None:
    """Whoever can write the volume could forge a stamp for the engine it altered: by path, or through a bind mount
    of a directory below the cache (a hostPath below the cache's), the init refuses to start (exit 2)."""
    _built(model, cache, tmp_path)
    inside = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--verify", "stamp", "--stamp-dir",
                                        str(cache / "stamps")))
    assert inside.returncode == 2 and "is on the cache volume" in inside.stderr and "hint:" in inside.stderr
    handoff = run_trtwarm(*cmd_init_args(model, cache, cache / "handoff"))
    assert handoff.returncode == 2 and "hand-off directory" in handoff.stderr, handoff.stderr
    (cache / "below").mkdir()
    alias = tmp_path / "node-stamps"
    alias.mkdir()
    if subprocess.run(["mount", "--bind", str(cache / "below"), str(alias)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        aliased = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--verify", "stamp", "--stamp-dir",
                                             str(alias)))
    finally:
        subprocess.run(["umount", str(alias)], check=True)
    assert aliased.returncode == 2 and "is on the cache volume" in aliased.stderr, aliased.stderr
    assert not list((cache / "below").iterdir())  # nothing was stamped there


def test_a_stamp_that_cannot_be_written_costs_a_hash_and_one_warning_never_the_hit(model: Path, cache: Path,
                                                                                  tmp_path: Path) -> None:
    engine = _built(model, cache, tmp_path)
    stamps = tmp_path / "h" / "stamps"
    stamps.mkdir(parents=True, mode=0o700)
    st = engine.stat()
    (stamps / f"{st.st_dev:x}-{st.st_ino:x}.json").mkdir()  # something in the way of the record
    run = _stamped_hit(model, cache, tmp_path)
    assert run.summary["result"] == "hit" and "stamps are not being written" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "unexpected" not in run.stderr
    again = _stamped_hit(model, cache, tmp_path)
    assert "0 file(s) by stamp, 1 hashed" in again.stderr  # still verified, by its hash


def test_stamps_past_max_age_are_removed_when_a_new_one_is_written(model: Path, cache: Path, tmp_path: Path) -> None:
    """The stamp directory (a hostPath shared by a node's Pods, for months) does not only grow: a process that
    writes a stamp also removes those past ``--stamp-max-age``, which would never be trusted again."""
    _built(model, cache, tmp_path)
    stamps = tmp_path / "h" / "stamps"
    stamps.mkdir(mode=0o700, parents=True)
    old, young, users = stamps / "fd01-1234.json", stamps / f"sig-{'0' * 64}.json", stamps / "engine.json"
    for path, age in ((old, 3 * 3600), (young, 60), (users, 3 * 3600)):
        path.write_text("{}")
        os.utime(path, (time.time() - age, time.time() - age))
    run = _stamped_hit(model, cache, tmp_path, "--stamp-max-age", "1h")
    assert "0 file(s) by stamp, 1 hashed" in run.stderr  # the engine was stamped just now...
    assert not old.exists() and young.exists()  # ...and only what max age no longer trusts was removed
    assert users.exists()  # a file that is no stamp is never touched (a directory shared with other files)
    assert len(list(stamps.glob("*.json"))) == 3
