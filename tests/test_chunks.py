"""Chunk digests as pure logic: the one-pass hash, the strict checks of a manifest row, and the signed Statement
(unchanged for a manifest without them, so envelopes signed before still verify)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from trtwarm.trust.envelope import PREDICATE_TYPE, PREDICATE_TYPE_CHUNKS, statement
from trtwarm.fs.chunked import hash_fd
from trtwarm.volume.chunks import MIN_CHUNK_BYTES, chunk_fields, chunk_problem

MiB = 1 << 20


@pytest.mark.parametrize("size", [0, 1, MiB - 1, MiB, MiB + 1, 3 * MiB, 5 * MiB + 7])
def test_one_read_pass_gives_the_whole_digest_and_every_chunk_digest(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        whole, got, chunks = hash_fd(fd, MIN_CHUNK_BYTES)
    finally:
        os.close(fd)
    assert (whole, got) == (hashlib.sha256(data).hexdigest(), size)
    assert chunks == [hashlib.sha256(data[i:i + MiB]).hexdigest() for i in range(0, size, MiB)]
    assert chunk_fields(size, chunks, MiB) == ({} if size <= MiB else {"chunk_bytes": MiB, "chunk_sha256": chunks})


def _row(size: int = 3 * MiB + 1, **extra: Any) -> dict[str, Any]:
    return {"path": "engine.plan", "role": "engine", "bytes": size, "sha256": "a" * 64, **extra}


@pytest.mark.parametrize(("extra", "said"), [
    ({"chunk_bytes": MiB}, "without chunk_sha256"),
    ({"chunk_sha256": ["b" * 64] * 4}, "without chunk_sha256"),
    ({"chunk_bytes": MiB + 1, "chunk_sha256": ["b" * 64] * 4}, "not a power of two"),
    ({"chunk_bytes": MiB // 2, "chunk_sha256": ["b" * 64] * 7}, "not a power of two from 1 MiB"),
    ({"chunk_bytes": 2 << 30, "chunk_sha256": ["b" * 64]}, "to 1 GiB"),
    ({"chunk_bytes": True, "chunk_sha256": ["b" * 64]}, "not a power of two"),
    ({"chunk_bytes": MiB, "chunk_sha256": ["b" * 64] * 3}, "has 3 chunk digests, not 4"),
    ({"chunk_bytes": MiB, "chunk_sha256": {"0": "b" * 64}}, "has dict chunk digests"),
    ({"chunk_bytes": MiB, "chunk_sha256": ["b" * 64] * 3 + ["B" * 64]}, "64 lower-case hex"),
    ({"chunk_bytes": MiB, "chunk_sha256": ["b" * 64] * 3 + [7]}, "64 lower-case hex"),
])
def test_a_malformed_chunk_list_is_named(extra: dict[str, Any], said: str) -> None:
    problem = chunk_problem(_row(**extra))
    assert problem is not None and said in problem


def test_an_empty_file_has_no_chunks_to_check_so_a_chunk_list_for_it_is_refused() -> None:
    """(else the pull would check nothing, not even the whole-file digest of zero bytes)"""
    assert "empty file" in str(chunk_problem(_row(0, chunk_bytes=MiB, chunk_sha256=[])))


def test_well_formed_and_absent_chunk_lists_pass_and_one_chunk_must_be_the_whole_file() -> None:
    assert chunk_problem(_row()) is None
    assert chunk_problem(_row(chunk_bytes=MiB, chunk_sha256=["b" * 64] * 4)) is None
    assert chunk_problem(_row(MiB, chunk_bytes=MiB, chunk_sha256=["a" * 64])) is None
    assert "differs from the file's" in str(chunk_problem(_row(MiB, chunk_bytes=MiB, chunk_sha256=["b" * 64])))


def _manifest(files: list[dict[str, Any]]) -> dict[str, Any]:
    return {"key": "k" * 64, "name": "m", "key_document": {"a": 1}, "files": files, "engine_file": "engine.plan",
            "created_utc": "2026-12-03T00:00:00Z", "trtwarm_version": "0.1.0", "built_by": {"pod": "p", "pid": 3}}


def test_the_statement_of_a_manifest_without_chunks_is_the_v1_statement_byte_for_byte() -> None:
    """What every envelope signed before chunk digests existed signed: the verifier rebuilds exactly this."""
    files = [_row()]
    assert statement(_manifest(files), files) == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "engine.plan", "digest": {"sha256": "a" * 64}}],
        "predicateType": "https://trtwarm.dev/engine/v1",
        "predicate": {"key": "k" * 64, "name": "m", "key_document": {"a": 1},
                      "files": [{"path": "engine.plan", "role": "engine", "bytes": 3 * MiB + 1}],
                      "engine_file": "engine.plan", "created_utc": "2026-12-03T00:00:00Z", "trtwarm_version": "0.1.0",
                      "built_by": {"pod": "p", "namespace": None, "node": None, "ci_job": None}}}
    assert PREDICATE_TYPE == "https://trtwarm.dev/engine/v1"


def test_the_statement_of_a_manifest_with_chunks_signs_them_and_says_so_in_its_type() -> None:
    chunked = [_row(chunk_bytes=MiB, chunk_sha256=["b" * 64] * 4), {**_row(5), "path": "small.bin", "role": "other"}]
    doc = statement(_manifest(chunked), chunked)
    assert doc["predicateType"] == PREDICATE_TYPE_CHUNKS
    assert doc["predicate"]["files"][0]["chunk_sha256"] == ["b" * 64] * 4
    assert doc["predicate"]["files"][0]["chunk_bytes"] == MiB and "chunk_bytes" not in doc["predicate"]["files"][1]
    altered = [{**chunked[0], "chunk_sha256": ["b" * 64] * 3 + ["c" * 64]}, chunked[1]]
    assert statement(_manifest(altered), altered) != doc
