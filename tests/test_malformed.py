"""One bad entry never hides the others: malformed manifests, ref documents and lease files, against every reader.

The cases an operator met (a ``key_document`` that is a string or a list, a ``built_by`` string, a
``key_document.model`` string) run as real processes; a Hypothesis fuzz test then mutates manifests, lease files and
remote refs and runs every reader in-process (the CLI's ``main``, the sidecar's volume scan and metrics, init's
lookup, the remote readers): never exit 1, never a traceback, the good entry always answered, and one verdict on the
bad entry from every reader (``ls``, ``verify``, ``sign`` and ``init`` agree).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import cmd_init_args, run_trtwarm
from trtwarm.cli.main import main
from trtwarm.errors import EntryInvalid, RemoteError
from trtwarm.volume.layout import Layout
from trtwarm.volume.store import EngineStore
from trtwarm.volume.entry import read_manifest

CMD_FLAGS = ["--builder", "command", "--builder-version", "test-1", "--device", "cpu"]


def _build(model: Path, cache: Path, tmp_path: Path, tag: str) -> dict[str, Any]:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{tag}", "--key-extra", f"tag={tag}"))
    assert run.returncode == 0, run.stderr
    return run.summary


def _edit(entry: Path, change: Any) -> None:
    path = entry / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


CASES = {
    "key_document a string": lambda d: d.update(key_document="garbage"),
    "key_document a list": lambda d: d.update(key_document=[1, 2]),
    "built_by a string": lambda d: d.update(built_by="ci"),
    "key_document.model a string": lambda d: d["key_document"].update(model="m"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_malformed_manifest_is_damaged_and_every_reader_answers_for_the_rest(
        model: Path, cache: Path, tmp_path: Path, case: str) -> None:
    bad, good = _build(model, cache, tmp_path, "bad"), _build(model, cache, tmp_path, "good")
    entry = Path(bad["path"]).parent
    _edit(entry, CASES[case])
    c = ["--cache-dir", str(cache)]
    ls = run_trtwarm("ls", "--json", *c)
    assert ls.returncode == 8 and "Traceback" not in ls.stderr, ls.stderr
    rows = {r["name"]: r for r in json.loads(ls.stdout)}
    assert rows[good["name"]]["status"] == "ok"
    assert rows[bad["name"]]["status"] == "damaged" and rows[bad["name"]]["problem"].startswith("manifest.json")
    table = run_trtwarm("ls", *c)
    assert table.returncode == 8 and f"{bad['name']}" in table.stderr and "damaged: manifest.json" in table.stdout
    shown = run_trtwarm("show", bad["name"], *c)
    assert shown.returncode == 8 and "status       damaged: manifest.json" in shown.stdout, shown.stdout + shown.stderr
    assert run_trtwarm("show", good["name"], *c).returncode == 0
    verify = run_trtwarm("verify", "--json", *c)
    assert verify.returncode == 8, verify.stderr
    assert [Path(p["path"]).name for p in json.loads(verify.stdout)["problems"]] == [bad["name"]]
    assert run_trtwarm("keys", "generate", "--out", str(tmp_path / "k")).returncode == 0
    sign = run_trtwarm("sign", bad["name"], good["name"], "--key", str(tmp_path / "k.key"), *c)
    assert sign.returncode == 8 and f"refused    {bad['name']}" in sign.stdout and f"signed     {good['name']}" \
        in sign.stdout, sign.stdout + sign.stderr
    assert not (entry / "manifest.sig.json").exists()
    for argv in (["stats"], ["gc", "--max-age", "30d", "--dry-run"]):
        run = run_trtwarm(*argv, *c)
        assert run.returncode == 0 and "Traceback" not in run.stderr, (argv, run.stderr)
    explain = run_trtwarm("key", "--explain", *CMD_FLAGS, "--build-command", "cp {model} {output}",
                          "--model", str(model), "--key-extra", "tag=other", *c)
    assert explain.returncode == 0 and "miss: key" in explain.stdout, explain.stderr
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h-again", "--key-extra", "tag=bad"))
    assert again.returncode == 0 and again.summary["result"] == "built", again.stderr  # as verify judged it
    assert "failed verification: manifest.json" in again.stderr and "quarantin" in again.stderr


# --- the fuzz test -------------------------------------------------------------------------------------------------

JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8)
PATHS = [("key",), ("engine_file",), ("engine_sha256",), ("engine_bytes",), ("schema",), ("name",), ("created",),
         ("created_utc",), ("build_seconds",), ("trtwarm_version",), ("built_by",), ("built_by", "pod"), ("extra",),
         ("extra", "engine_info"), ("key_document",), ("key_document", "model"), ("key_document", "model", "sha256"),
         ("key_document", "builder"), ("key_document", "builder", "name"), ("key_document", "build"),
         ("key_document", "build", "shapes"), ("key_document", "build", "shapes", "input"),
         ("key_document", "build", "precision"), ("key_document", "device"), ("key_document", "device", "kind"),
         ("files",), ("files", 0), ("files", 0, "path"), ("files", 0, "bytes"), ("files", 0, "role"),
         ("files", 0, "sha256"), ("files", 0, "chunk_bytes")]
EDITS = st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(st.just("delete"), JSON)), min_size=1, max_size=3)
#: what replaces a manifest: edits of the real one (most), any JSON document, or bytes that are not JSON at all
MANIFESTS = st.one_of(EDITS, EDITS, EDITS, JSON.map(lambda doc: ("whole", doc)),
                      st.sampled_from([b"", b"{", b"[" * 100000, b"\xff\xfe", b"null", b'{"key": NaN}']))
LEASES = st.one_of(JSON, st.sampled_from([b"", b"{", b"\xff", b"[" * 100000]))


def _apply(doc: dict[str, Any], edits: list[tuple[tuple[Any, ...], Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for path, value in edits:
        parent: Any = doc
        for part in path[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        last = path[-1]
        if isinstance(parent, dict) or (isinstance(parent, list) and isinstance(last, int) and last < len(parent)):
            if value == "delete":
                parent.pop(last) if isinstance(parent, dict) and last in parent else None
            else:
                parent[last] = value
    return doc


def _raw(mutation: Any, original: dict[str, Any]) -> bytes:
    if isinstance(mutation, bytes):
        return mutation
    if isinstance(mutation, tuple) and mutation[0] == "whole":
        return json.dumps(mutation[1]).encode()
    return json.dumps(_apply(original, mutation)).encode()


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv), environ={})
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A volume with two entries (one to mutate, one that must stay answered), a signing key, a lease."""
    from trtwarm.cli.demo import make_model

    root = tmp_path_factory.mktemp("pristine")
    model = make_model(root / "m" / "mlp.onnx")
    cache = root / "cache"
    built = {tag: _build(model, cache, root, tag) for tag in ("bad", "good")}
    assert run_trtwarm("keys", "generate", "--out", str(root / "k")).returncode == 0
    entry = Path(built["bad"]["path"]).parent
    [lease] = list((cache / ".leases" / json.loads((entry / "manifest.json").read_text())["key"]).iterdir())
    return {"root": root, "model": model, "cache": cache, "bad": built["bad"], "good": built["good"],
            "manifest": json.loads((entry / "manifest.json").read_text()), "lease": lease.relative_to(cache)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(mutation=MANIFESTS, lease=LEASES)
def test_fuzzed_manifests_and_leases_never_crash_a_reader_and_get_one_verdict(pristine: dict[str, Any],
                                                                              mutation: Any, lease: Any) -> None:
    with tempfile.TemporaryDirectory(dir=pristine["root"]) as tmp:
        cache = Path(tmp) / "cache"
        shutil.copytree(pristine["cache"], cache, symlinks=True)
        bad, good = pristine["bad"]["name"], pristine["good"]["name"]
        entry = cache / "entries" / bad
        (entry / "manifest.json").write_bytes(_raw(mutation, pristine["manifest"]))
        (cache / pristine["lease"]).write_bytes(lease if isinstance(lease, bytes) else json.dumps(lease).encode())
        c = ("--cache-dir", str(cache))
        results = {}
        for argv in (("ls", "--json"), ("ls", "--all"), ("show", bad), ("show", bad, "--json"), ("stats",),
                     ("gc", "--max-age", "0s", "--dry-run", "--json"), ("verify", "--json", "--dry-run"),
                     ("sign", bad, "--key", str(pristine["root"] / "k.key"), "--dry-run", "--json"),
                     ("key", "--explain", *CMD_FLAGS, "--build-command", "cp {model} {output}", "--model",
                      str(pristine["model"]), "--key-extra", "tag=other")):
            code, out, err = _cli(*argv, *c)
            assert code in (0, 8) and "unexpected error" not in err, (argv, code, err)
            results[argv[0] + ("-json" if "--json" in argv else "")] = (code, out)
        rows = {r["name"]: r for r in json.loads(results["ls-json"][1])}
        assert rows[good]["status"] == "ok"  # the good entry is always answered
        problems = {Path(p["path"]).name for p in json.loads(results["verify-json"][1])["problems"]}
        assert good not in problems
        _one_verdict(entry, rows[bad], bad in problems, results["sign-json"], pristine["manifest"]["key"])
        _sidecar_reads(cache, Path(tmp))


def _one_verdict(entry: Path, row: dict[str, Any], verify_found: bool, sign: tuple[int, str], key: str) -> None:
    """ls, verify, sign and init's lookup judge the entry alike (ls does not hash: it may say ok where the hash
    fails, never damaged where verify finds nothing)."""
    try:
        read_manifest(entry)
        shape_ok = True
    except EntryInvalid:
        shape_ok = False
    if not shape_ok:
        assert row["status"] == "damaged" and verify_found
    if row["status"] == "damaged":
        assert verify_found
    [signed] = json.loads(sign[1])["entries"]
    assert (signed["result"] == "refused") == verify_found and sign[0] == (8 if verify_found else 0)
    found = EngineStore(Layout(entry.parent.parent)).lookup(key, entry.name)  # init's lookup (quarantines a bad one)
    assert (found is None) == verify_found


def _sidecar_reads(cache: Path, tmp: Path) -> None:
    from trtwarm.sidecar.metrics import Readiness, TrtwarmCollector, VolumeWatcher

    volume = VolumeWatcher(Layout(cache))
    volume.refresh()
    assert volume.problem is None and volume.summary is not None and volume.summary["entries"] >= 1
    collector = TrtwarmCollector(tmp / "handoff", volume, Readiness(tmp / "handoff", volume))
    assert any(m.name == "trtwarm_cache_entries" for m in collector.collect())


REFS = st.one_of(EDITS.map(lambda e: ("manifest", e)), JSON.map(lambda doc: ("whole", doc)),
                 st.tuples(st.just("signature"), JSON))


@settings(max_examples=150, deadline=None)
@given(mutation=REFS)
def test_fuzzed_refs_are_refused_with_a_remote_error_or_read_by_every_remote_reader(mutation: Any) -> None:
    """A ref document a store holds: ``check_ref`` refuses it (RemoteError: ``remote ls`` lists it as unreadable)
    or every reader of refs (``remote ls``'s row, ``coverage``, ``remote gc``'s plan) handles it."""
    from trtwarm.cli.remote import _row
    from trtwarm.remote import coverage, gc
    from trtwarm.remote.repo import check_ref, make_ref

    key = "ab" * 32
    manifest = {"schema": 2, "key": key, "name": "m_cpu_ort_fp32_static--abababababababab", "created": 1e9,
                "key_document": {"schema": 1, "model": {"sha256": "m"}, "builder": {"name": "onnxruntime"},
                                 "build": {"precision": "fp32"}, "device": {"kind": "cpu"}},
                "files": [{"path": "engine.plan", "role": "engine", "bytes": 3, "sha256": "cd" * 32}],
                "engine_file": "engine.plan", "engine_sha256": "cd" * 32, "engine_bytes": 3,
                "built_by": {"pod": "p"}}
    kind, change = mutation
    doc: Any = make_ref(manifest, None)
    if kind == "manifest":
        doc["manifest"] = _apply(manifest, change)
    elif kind == "signature":
        doc["signature"] = change
    else:
        doc = change
    doc = json.loads(json.dumps(doc))  # as read from the store
    try:
        ref = check_ref(doc, key)
    except RemoteError:
        return
    _row(key, ref)
    coverage.cover([("m/fp32", {"schema": 1, "model": {"sha256": "m"}, "builder": {"name": "onnxruntime"},
                                "build": {"precision": "fp32"}, "device": {"kind": "cpu"}})], ["cpu", "gpu"],
                   [(key, ref)])
    gc.plan([(key, ref, "")], [], 2e9, max_age=1.0, keep_per_model=1)


@pytest.mark.parametrize(("change", "words"), [
    ({"engine_bytes": True}, "engine_bytes of type bool"),
    ({"engine_bytes": -1}, "negative engine_bytes"),
    ({"created": float("nan")}, "created of type float"),
    ({"created": 1e300}, "not a time"),
    ({"schema": 3}, "schema 3, not one this trtwarm reads"),
    ({"engine_file": "manifest.sig.json", "schema": 1}, "names manifest.sig.json as its engine"),
    ({"key_document": {"build": {"shapes": {"input": {"opt": 8}}}}}, "shape of 'input' is malformed"),
    ({"key": "K" * 64}, "key is not 64 hex digits"),
])
def test_the_manifest_schema_names_the_wrong_field(change: dict[str, Any], words: str) -> None:
    from trtwarm.errors import ManifestInvalid
    from trtwarm.volume.schema import check_manifest, salvage

    doc = {"schema": 2, "key": "ab" * 32, "engine_file": "engine.plan", "engine_sha256": "cd" * 32,
           "engine_bytes": 3, "name": "m--abababababababab", **change}
    with pytest.raises(ManifestInvalid, match=words):
        check_manifest(doc)
    assert set(salvage(doc)) <= set(doc) and all(salvage(doc)[k] == doc[k] for k in salvage(doc) if k != "created")
