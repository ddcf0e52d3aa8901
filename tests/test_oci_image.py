"""Engine images (``prebuild --oci-image``) in a real registry, and ``init --seed-cache`` on them: the image's shape
and content, a hit from its unpacked layer on a read-only, noexec mount under an enforce policy, an empty tier
failing at once, and the image mounted by a real container runtime (``podman run --mount type=image``, as the
kubelet mounts an image volume) and hit with no build.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, run_trtwarm
from registry import Registry, anonymous_env, registry_binary

if registry_binary() is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("docker-registry is missing (apt-get install docker-registry): CI must run these tests")
    pytest.skip("docker-registry is not installed (apt-get install docker-registry)", allow_module_level=True)

ONNX = ["--builder", "onnxruntime", "--shape", "input=1x16:8x16:32x16"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return anonymous_env(tmp_path / "home")


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    """(signing key, enforce policy trusting it)."""
    done = run_trtwarm("keys", "generate", "--out", str(tmp_path / "ci"))
    assert done.returncode == 0, done.stderr
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"mode": "enforce", "keys": [{"name": "ci", "public_key_file": "ci.pub"}]}))
    return tmp_path / "ci.key", policy


def prebuild_image(registry: Registry, env: dict[str, str], model: Path, tmp_path: Path, tag: str,
                   signing_key: Path | None = None, refs: str | None = None) -> str:
    """Prebuild the matrix into the repository ``engines/refs-TAG`` (or *refs*) and push the image ``:TAG``."""
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"models": [{"model": model.name, "shape": ["input=1x16:8x16:32x16"]}],
                                  "options": {"builder": "onnxruntime"}}))
    if not (tmp_path / model.name).exists():
        (tmp_path / model.name).write_bytes(model.read_bytes())
    extra = {"TRTWARM_SIGNING_KEY": str(signing_key)} if signing_key else {}
    repository = f"oci://{registry.addr}/engines/{refs or 'refs-' + tag}"
    run = run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", repository, "--oci-image",
                      f"{registry.addr}/engines/image:{tag}", env={**env, **extra})
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().splitlines()[-1].rsplit("@", 1)[1]


def layer_of(registry: Registry, tag: str) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    manifest = json.loads(registry.get(f"engines/image/manifests/{tag}")[0])
    config = json.loads(registry.get(f"engines/image/blobs/{manifest['config']['digest']}")[0])
    return manifest, config, registry.get(f"engines/image/blobs/{manifest['layers'][0]['digest']}")[0]


def test_the_engine_image_is_a_real_image_whose_layer_is_the_volume_layout(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path, signed: tuple[Path, Path]) -> None:
    digest = prebuild_image(registry, env, model, tmp_path, "v1", signed[0])
    manifest, config, layer = layer_of(registry, "v1")
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    [desc] = manifest["layers"]
    assert desc["mediaType"] == "application/vnd.oci.image.layer.v1.tar"  # uncompressed: engines do not compress
    assert config["os"] == "linux" and config["architecture"] in ("amd64", "arm64")
    assert config["rootfs"] == {"type": "layers", "diff_ids": [desc["digest"]]}
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = tar.getmembers()
    names = {m.name for m in members}
    [entry] = {n.split("/")[2] for n in names if n.count("/") >= 2 and n.startswith("cache/entries/")}
    assert {"cache/VERSION", "cache/CACHEDIR.TAG", f"cache/entries/{entry}/manifest.json",
            f"cache/entries/{entry}/manifest.sig.json", f"cache/entries/{entry}/model.ort.onnx"} <= names
    assert not any(part.startswith(".") for n in names for part in n.split("/"))  # no working directories
    for m in members:
        assert (m.uid, m.gid, m.mtime) == (0, 0, 0)
        assert m.mode == (0o755 if m.isdir() else 0o644) and (m.isdir() or m.isfile()), m.name
    again = prebuild_image(registry, env, model, tmp_path, "v2", signed[0], refs="refs-v1")  # pulls the same entries
    assert again == digest  # same entries, same image


def test_an_engine_image_without_a_repository_and_a_dead_registry_before_any_build(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"models": [{"model": str(model), "shape": ["input=1x16:8x16:32x16"]}],
                                  "options": {"builder": "onnxruntime"}}))
    alone = run_trtwarm("prebuild", "--matrix", str(matrix), "--oci-image", f"{registry.addr}/engines/image:alone",
                        env=env)
    assert alone.returncode == 0 and "engine image" in alone.stdout, alone.stderr
    with tarfile.open(fileobj=io.BytesIO(layer_of(registry, "alone")[2])) as tar:
        assert any(n.endswith("/model.ort.onnx") for n in tar.getnames())
    dead = run_trtwarm("prebuild", "--matrix", str(matrix), "--oci-image", "127.0.0.1:9/engines/image:x",
                       env={**env, "TRTWARM_REMOTE_RETRIES": "1"})
    assert dead.returncode == 13 and "building" not in dead.stderr, dead.stderr
    bad = run_trtwarm("prebuild", "--matrix", str(matrix), "--oci-image", f"{registry.addr}/engines/image", env=env)
    assert bad.returncode == 2 and "has no tag" in bad.stderr, bad.stderr


def _unpack(layer: bytes, dest: Path) -> Path:
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "cache"


@pytest.mark.mount
def test_the_unpacked_layer_on_a_read_only_noexec_mount_is_a_hit_under_enforce_with_no_build(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path, signed: tuple[Path, Path]) -> None:
    prebuild_image(registry, env, model, tmp_path, "ro", signed[0])
    seed = _unpack(layer_of(registry, "ro")[2], tmp_path / "layer")
    mnt, bound, empty = tmp_path / "mnt", tmp_path / "bound", tmp_path / "empty"
    for made in (mnt, bound, empty):
        made.mkdir()
    try:  # an image volume as CRI-O and podman mount one: the layers as an overlay's lower directories only
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={seed.parent}:{empty},noexec,nosuid,nodev", str(mnt)], check=True,
                       capture_output=True)
        subprocess.run(["mount", "--bind", str(seed.parent), str(bound)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "remount,bind,ro,noexec,nosuid,nodev", str(bound)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount here (needs root / CAP_SYS_ADMIN): {exc}")
    try:
        base = ["init", "--model", str(model), *ONNX, "--trust-policy", str(signed[1])]
        run = run_trtwarm(*base, "--cache-dir", str(tmp_path / "local"), "--handoff-dir", str(tmp_path / "h1"),
                          "--seed-cache", str(mnt / "cache"), env=env)
        assert run.returncode == 0 and run.summary["result"] == "hit", run.stderr
        assert "in the seed cache" in run.stderr and "building" not in run.stderr
        assert os.readlink(tmp_path / "h1" / "engine").startswith(str(mnt / "cache/entries/"))  # in place, no copy
        # a read-only bind of a directory that is writable elsewhere is no image volume: this Pod's copy instead
        copied = run_trtwarm(*base, "--cache-dir", str(tmp_path / "local"), "--handoff-dir", str(tmp_path / "hb"),
                             "--seed-cache", str(bound / "cache"), env=env)
        assert copied.returncode == 0 and copied.summary["result"] == "hit", copied.stderr
        assert os.readlink(tmp_path / "hb" / "engine").startswith(str(tmp_path / "hb" / "copies"))
        # the image as the cache itself, pull-only: the model's digest is memoised node-locally, not re-hashed
        for attempt in range(2):
            again = run_trtwarm(*base, "--cache-dir", str(mnt / "cache"), "--read-only", "--handoff-dir",
                                str(tmp_path / "h2"), "--stamp-dir", str(tmp_path / "stamps"), env=env)
            assert again.returncode == 0 and again.summary["result"] == "hit", again.stderr
            assert list((tmp_path / "stamps" / "statcache").glob("*.json")), "the model's digest was not memoised"
        tampered = _unpack(layer_of(registry, "ro")[2], tmp_path / "tampered")
        engine = next(tampered.glob("entries/*/model.ort.onnx"))
        engine.write_bytes(engine.read_bytes()[:-1] + b"\0")
        bad = run_trtwarm(*base, "--cache-dir", str(tmp_path / "local2"), "--handoff-dir", str(tmp_path / "h3"),
                          "--seed-cache", str(tampered), "--read-only", "--lock-timeout", "1s", env=env)
        assert bad.returncode in (5, 7) and "refused" in bad.stderr, bad.stderr  # never handed over
        assert not (tmp_path / "h3" / "engine").exists()
    finally:
        for mounted in (mnt, bound):
            subprocess.run(["umount", "-l", str(mounted)], check=False, capture_output=True)


@pytest.mark.parametrize("tier", ["missing", "empty", "no-version"])
def test_an_unmounted_or_empty_seed_cache_fails_at_once_with_exit_6(
        model: Path, tmp_path: Path, tier: str) -> None:
    path = tmp_path / "models" / "cache"
    if tier != "missing":
        path.mkdir(parents=True)
    if tier == "no-version":
        (path / "entries").mkdir()
    started = time.monotonic()
    run = run_trtwarm("init", "--model", str(model), *ONNX, "--cache-dir", str(tmp_path / "c"), "--handoff-dir",
                      str(tmp_path / "h"), "--seed-cache", str(path), "--read-only", "--lock-timeout", "1h")
    assert run.returncode == 6 and "--seed-cache" in run.stderr and "hint:" in run.stderr, run.stderr
    assert time.monotonic() - started < 60 and "Traceback" not in run.stderr


def _podman_env(tmp_path: Path) -> dict[str, str]:
    sys.path.insert(0, str(Path(__file__).parent))
    from podman_images import _containers_conf

    return {**os.environ, "CONTAINERS_CONF": str(_containers_conf(tmp_path / "containers.conf")),
            "REGISTRY_AUTH_FILE": ""}


def test_podman_mounts_the_engine_image_as_a_volume_and_init_hits_it_with_no_build(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    missing = [t for t in ("podman", "skopeo", "runc") if shutil.which(t) is None]
    reason = (f"{', '.join(missing)} not installed (bash .ci/run installs them)" if missing
              else "podman image mounts need root" if os.geteuid() != 0 else None)
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    prebuild_image(registry, env, model, tmp_path, "mount")
    penv = _podman_env(tmp_path)
    local = f"localhost/trtwarm-test-engines:t{os.getpid()}"
    subprocess.run(["skopeo", "copy", "--src-tls-verify=false", "--preserve-digests",
                    f"docker://{registry.addr}/engines/image:mount", f"containers-storage:{local}"],
                   check=True, capture_output=True, env=penv, timeout=120)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(model, out / "mlp.onnx")
    try:
        proc = subprocess.run(
            ["podman", "run", "--rm", "--network", "none", "--mount",
             f"type=image,source={local},destination=/models", "-v", f"{out}:/out", "-e", f"PYTHONPATH={ROOT}",
             "-e", "HOME=/out", "--rootfs", "/:O", sys.executable, "-m", "trtwarm", "init", "--model",
             "/out/mlp.onnx", *ONNX, "--cache-dir", "/out/cache", "--handoff-dir", "/out/h", "--seed-cache",
             "/models/cache", "--read-only", "--lock-timeout", "5s"],
            capture_output=True, text=True, env=penv, timeout=300)
    finally:
        subprocess.run(["podman", "rmi", "-f", local], capture_output=True, env=penv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["result"] == "hit"
    assert "in the seed cache /models/cache" in proc.stderr and "building" not in proc.stderr
    assert os.readlink(out / "h" / "engine").startswith("/models/cache/entries/")
