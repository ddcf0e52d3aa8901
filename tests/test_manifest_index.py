"""The manifest index ``.manifest-index.json``: ``ls`` lists the same with it as without it, uses a row only while the
entry's directory and manifest keep their stat identity, still shows every damage it showed by reading manifests, and
treats a missing, corrupt or foreign index as absent (read-only volumes: tests/test_volume.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import cmd_init_args, debris, run_trtwarm, settle

from trtwarm.lifecycle.manifest_index import INDEX, SCHEMA


def build(model: Path, cache: Path, tmp_path: Path, tag: str) -> str:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{tag}", "--key-extra", f"tag={tag}"))
    assert run.returncode == 0, run.stderr
    return str(run.summary["name"])


def ls_json(cache: Path) -> list[dict[str, Any]]:
    run = run_trtwarm("ls", "--cache-dir", str(cache), "--json")
    rows = json.loads(run.stdout)
    damaged = sum(r["status"] == "damaged" for r in rows)  # ls answers for all, and exits 8 if any is damaged
    assert run.returncode == (8 if damaged else 0), run.stderr
    assert (f"{damaged} of the entries listed" in run.stderr) if damaged else run.stderr == "", run.stderr
    return rows


def status(rows: list[dict[str, Any]], name: str) -> tuple[str, str | None]:
    row = next(r for r in rows if r["name"] == name)
    return row["status"], row["problem"]


def read_index(cache: Path) -> dict[str, Any]:
    head, _, body = (cache / INDEX).read_bytes().partition(b"\n")
    assert json.loads(head)["sha256"] == hashlib.sha256(body).hexdigest()
    return json.loads(body)


def write_index(cache: Path, doc: dict[str, Any]) -> None:
    """Rewrite the index with a valid header, as a writer of the volume could."""
    body = json.dumps(doc).encode()
    head = json.dumps({"schema": SCHEMA, "sha256": hashlib.sha256(body).hexdigest()}).encode()
    (cache / INDEX).write_bytes(head + b"\n" + body)


@pytest.fixture
def volume(model: Path, cache: Path, tmp_path: Path) -> dict[str, str]:
    names = {tag: build(model, cache, tmp_path, tag) for tag in ("a", "b", "c")}
    settle(cache)
    return names


def test_ls_lists_the_same_with_the_index_and_writes_it_only_when_stale(cache: Path, volume: dict[str, str]) -> None:
    first = ls_json(cache)  # reads every manifest, writes the index
    assert sorted(read_index(cache)["rows"]) == sorted(volume.values())
    written = (cache / INDEX).stat()
    assert ls_json(cache) == first  # through the index
    assert (cache / INDEX).stat().st_mtime_ns == written.st_mtime_ns  # nothing changed: not rewritten
    table = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "name,builder,device,status")
    (cache / INDEX).unlink()
    assert ls_json(cache) == first
    again = run_trtwarm("ls", "--cache-dir", str(cache), "--columns", "name,builder,device,status")
    assert table.stdout == again.stdout and "3 entries" in table.stdout
    assert debris(cache) == []


def test_a_row_is_used_only_while_the_manifest_keeps_its_identity(cache: Path, volume: dict[str, str]) -> None:
    ls_json(cache)
    doc = read_index(cache)
    doc["rows"][volume["a"]][3]["engine_bytes"] = 42  # what the row says, not what the manifest says
    write_index(cache, doc)
    assert next(r for r in ls_json(cache) if r["name"] == volume["a"])["engine_bytes"] == 42  # the row was used

    manifest = cache / "entries" / volume["a"] / "manifest.json"
    os.utime(manifest, ns=(manifest.stat().st_atime_ns, manifest.stat().st_mtime_ns))  # same mtime, new ctime
    rows = ls_json(cache)
    assert next(r for r in rows if r["name"] == volume["a"])["engine_bytes"] != 42  # read again
    assert status(rows, volume["a"]) == ("ok", None)


def test_damage_shows_through_the_index_as_without_it(cache: Path, volume: dict[str, str]) -> None:
    ls_json(cache)
    a, b, c = (cache / "entries" / volume[t] for t in "abc")
    (a / "engine.plan").write_bytes(b"short")  # truncated in place: neither the directory nor the manifest changes
    (b / "engine.plan").unlink()
    (b / "engine.plan").mkdir()  # replaced by a directory
    (c / "stray.bin").write_bytes(b"x")  # an unlisted file
    rows = ls_json(cache)
    size = json.loads((a / "manifest.json").read_text())["engine_bytes"]
    assert status(rows, volume["a"]) == ("damaged", f"engine file is 5 bytes, manifest says {size} (truncated)")
    assert status(rows, volume["b"]) == ("damaged", "engine file is not a regular file")
    assert status(rows, volume["c"]) == ("damaged", "unlisted file stray.bin (not in manifest.json)")
    (cache / INDEX).unlink()
    assert [status(ls_json(cache), n) for n in volume.values()] == [status(rows, n) for n in volume.values()]

    (c / "stray.bin").unlink()
    (a / "engine.plan").unlink()
    rows = ls_json(cache)
    assert status(rows, volume["a"]) == ("damaged", "engine file is missing")
    assert status(rows, volume["c"]) == ("ok", None)


def test_corruption_found_by_verify_shows_through_the_index(cache: Path, volume: dict[str, str]) -> None:
    ls_json(cache)
    engine = cache / "entries" / volume["a"] / "engine.plan"
    engine.write_bytes(b"X" + engine.read_bytes()[1:])  # same size: only hashing finds it
    assert status(ls_json(cache), volume["a"]) == ("ok", None)
    assert run_trtwarm("verify", "--cache-dir", str(cache)).returncode == 8
    assert status(ls_json(cache), volume["a"]) == (
        "damaged", "engine SHA-256 does not match the manifest (corrupt) (found by trtwarm verify)")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "digest", "foreign", "directory", "rows", "files",
                                    "shared"])
def test_a_corrupt_or_foreign_index_is_a_full_read(cache: Path, volume: dict[str, str], damage: str) -> None:
    first = ls_json(cache)
    index = cache / INDEX
    good = index.read_bytes()
    if damage == "garbage":
        index.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        index.write_bytes(good[: len(good) // 2])
    elif damage == "digest":  # valid JSON, but not what its header's SHA-256 says
        index.write_bytes(good.replace(b'"engine.plan"', b'"engine.plXn"', 1))
    elif damage == "foreign":
        index.write_bytes(good.replace(SCHEMA.encode(), b"trtwarm.manifest-index/v9", 1))
    elif damage == "directory":
        index.unlink()
        index.mkdir()
    elif damage == "rows":  # sealed (a valid SHA-256 header), but rows of the wrong shape
        write_index(cache, {"rows": {n: [1, "x", None, 4] for n in volume.values()}, "shared": []})
    elif damage == "files":  # sealed, the right identities, but files the size checks cannot read
        doc = read_index(cache)
        for row in doc["rows"].values():
            row[3]["files"] = [{"path": "engine.plan"}]
        write_index(cache, doc)
    else:  # sealed, but a key document ls could not describe
        doc = read_index(cache)
        doc["shared"] = [{"builder": "not a dict"}]
        write_index(cache, doc)
    assert ls_json(cache) == first
    if damage == "directory":
        assert index.is_dir()  # nothing written over it, and ls still worked
    else:
        assert sorted(read_index(cache)["rows"]) == sorted(volume.values())  # rewritten whole
    assert debris(cache) == []


def test_an_entry_replaced_within_the_racy_window_is_read_again(model: Path, cache: Path, tmp_path: Path,
                                                                volume: dict[str, str]) -> None:
    ls_json(cache)
    # replace entry a by a rebuild of it (another creation time) under its name, as rm and a publish of it do
    a = cache / "entries" / volume["a"]
    staged = cache / ".staging" / "replacement"
    shutil.copytree(a, staged)
    manifest = json.loads((staged / "manifest.json").read_text())
    manifest["created"] += 1000.0
    (staged / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(a)
    os.rename(staged, a)
    rows = ls_json(cache)
    assert next(r for r in rows if r["name"] == volume["a"])["created_ts"] == manifest["created"]  # not the old row
    assert volume["a"] not in read_index(cache)["rows"]  # changed just now: no row until it is older than the window
    (a / "extra.bin").write_bytes(b"x")  # changed again, within the same second
    assert status(ls_json(cache), volume["a"]) == ("damaged", "unlisted file extra.bin (not in manifest.json)")
    settle(cache)
    ls_json(cache)
    assert volume["a"] in read_index(cache)["rows"]
    assert status(ls_json(cache), volume["a"]) == ("damaged", "unlisted file extra.bin (not in manifest.json)")


def test_entries_removed_by_rm_and_gc_leave_the_index(cache: Path, volume: dict[str, str]) -> None:
    ls_json(cache)
    assert run_trtwarm("rm", volume["a"], "--cache-dir", str(cache), "--yes", "--force").returncode == 0
    shutil.rmtree(cache / ".leases")  # the Pods that built them are gone: gc may remove all but the newest
    gc = run_trtwarm("gc", "--cache-dir", str(cache), "--keep-per-model", "1", "--yes")
    assert gc.returncode == 0 and "removed 1" in gc.stdout, gc.stdout + gc.stderr
    listed = {r["name"] for r in ls_json(cache)}
    assert volume["a"] not in listed
    assert sorted(read_index(cache)["rows"]) == sorted(listed)


def test_an_entry_with_a_subdirectory_is_listed_without_a_row(cache: Path, volume: dict[str, str]) -> None:
    entry = cache / "entries" / volume["a"]
    (entry / "sub").mkdir()
    (entry / "sub" / "stray.bin").write_bytes(b"x")
    settle(cache)
    rows = ls_json(cache)
    assert status(rows, volume["a"]) == ("damaged", "unlisted file sub/stray.bin (not in manifest.json)")
    assert volume["a"] not in read_index(cache)["rows"] and volume["b"] in read_index(cache)["rows"]
    (entry / "sub" / "stray.bin").unlink()  # only the subdirectory changes
    rows = ls_json(cache)
    assert status(rows, volume["a"]) == ("damaged", "unlisted file sub (not in manifest.json)")
