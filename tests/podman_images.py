"""Real images for the image tests and the image benchmarks: podman with a registry-free base made from Debian.

Nothing here pulls from a registry. The base is made once by ``images/debian-base.sh`` (mmdebstrap → ``podman
import``) and kept under a tag that names its recipe, so later runs reuse it; the images are built from this
checkout by ``images/build.sh`` (the release's own path) under tags unique to this process, removed by
:meth:`Podman.cleanup` (which also drops their now-unused layers).

Podman runs with its own ``containers.conf`` (``CONTAINERS_CONF``), written for hosts like CI's: ``runc`` (``crun``
fails on hybrid cgroups), the ``cgroupfs`` manager (no systemd), file events, and default ulimits that do not
exceed this host's hard limits (a container asking for more fails to start).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_SCRIPT = ROOT / "images" / "debian-base.sh"
BUILD_SCRIPT = ROOT / "images" / "build.sh"
CA_DIR = Path("/usr/local/share/ca-certificates")
#: the context files a build reads (the Dockerfile's COPY sources), for a private copy of the context
CONTEXT = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "trtwarm", "cmd", "images")


class Unavailable(Exception):
    """Podman cannot build or run images here; the message says why (a test skips with it, or fails in CI)."""


def _containers_conf(path: Path) -> Path:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    limits = [f"nofile={nofile}:{nofile}" if nofile != resource.RLIM_INFINITY else "nofile=1048576:1048576"]
    if nproc == resource.RLIM_INFINITY or nproc >= 32768:
        limits.append("nproc=32768:32768")
    runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""
    path.write_text(f"[containers]\ndefault_ulimits = {json.dumps(limits)}\n\n"
                    f'[engine]\n{runtime}cgroup_manager = "cgroupfs"\nevents_logger = "file"\n')
    return path


def base_recipe_digest() -> str:
    """What the base is made of (the script and the CA certificates it copies in); its tag names this."""
    digest = hashlib.sha256(BASE_SCRIPT.read_bytes())
    for cert in sorted(CA_DIR.glob("*.crt")):
        digest.update(cert.name.encode() + b"\0" + cert.read_bytes())
    return digest.hexdigest()[:12]


@dataclass
class Podman:
    """One test session's podman: its configuration, the base, and the tags it made."""

    work: Path
    env: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)

    @classmethod
    def start(cls) -> Podman:
        """Check that podman, runc and mmdebstrap are here and that a container runs.

        :raises Unavailable: with the reason (not installed, not root, the runtime cannot start a container)
        """
        missing = [tool for tool in ("podman", "mmdebstrap") if shutil.which(tool) is None]
        if missing:
            raise Unavailable(f"{' and '.join(missing)} not installed (bash .ci/run installs them)")
        if os.geteuid() != 0:
            raise Unavailable("the image tests need root podman (rootful overlay storage, host ports)")
        work = Path(tempfile.mkdtemp(prefix="trtwarm-podman-"))
        env = {**os.environ, "CONTAINERS_CONF": str(_containers_conf(work / "containers.conf")), "ENGINE": "podman"}
        return cls(work=work, env=env)

    def run(self, *args: str, check: bool = True, timeout: float = 600,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``podman ARGS``; on failure (with *check*) an AssertionError carrying podman's output."""
        proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env, timeout=timeout,
                              input=input, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def popen(self, *args: str, log: Path) -> subprocess.Popen[str]:
        """Start ``podman ARGS`` (e.g. ``run`` in the foreground), its stderr in *log*, stdout piped."""
        with open(log, "w") as handle:
            return subprocess.Popen(["podman", *args], stdout=subprocess.PIPE, stderr=handle, text=True,
                                    env=self.env)

    def base(self) -> str:
        """The Debian base, made once per recipe (about half a minute), then reused."""
        tag = f"localhost/trtwarm-test-base:{base_recipe_digest()}"
        if self.run("image", "exists", tag, check=False).returncode != 0:
            proc = subprocess.run(["bash", str(BASE_SCRIPT), tag], capture_output=True, text=True, env=self.env,
                                  timeout=900, check=False)
            if proc.returncode != 0:
                raise Unavailable(f"cannot make the Debian base image: {(proc.stderr or proc.stdout)[-600:]}")
            self._forget_older("localhost/trtwarm-test-base", keep=tag)
        probe = self.run("run", "--rm", "--network", "none", tag, "python3", "-c", "print('ok')", check=False)
        if probe.stdout.strip() != "ok":
            raise Unavailable(f"podman cannot run a container here: {probe.stderr.strip()[-600:]}")
        return tag

    def _forget_older(self, repository: str, keep: str) -> None:
        """Untag the bases of earlier recipes (each a few hundred MB), so a machine keeps one of each."""
        listed = self.run("images", "--format", "{{.Repository}}:{{.Tag}}", repository, check=False).stdout.split()
        older = [tag for tag in listed if tag != keep]
        if older:
            self.run("rmi", *older, check=False)

    def derived(self, base: str, name: str, dockerfile: str) -> str:
        """A base derived from *base* by *dockerfile* lines (no network), tagged after both and kept like the base."""
        digest = hashlib.sha256((base + dockerfile).encode()).hexdigest()[:12]
        tag = f"localhost/trtwarm-test-{name}:{digest}"
        if self.run("image", "exists", tag, check=False).returncode != 0:
            context = self.work / f"derived-{name}"
            context.mkdir()
            (context / "Dockerfile").write_text(f"FROM {base}\n{dockerfile}\n")
            self.run("build", "--network", "none", "-t", tag, str(context))
            self._forget_older(f"localhost/trtwarm-test-{name}", keep=tag)
            self._forget_older(base.rsplit(":", 1)[0], keep=base)  # an older base is free once its child is gone
        return tag

    def build(self, target: str, name: str, *build_args: str, context: Path = ROOT) -> str:
        """``images/build.sh TARGET TAG BUILD_ARGS`` in *context* (a checkout, or a copy of one); returns the tag."""
        tag = f"localhost/trtwarm-test-{name}:{os.getpid()}"
        self.tags.append(tag)
        proc = subprocess.run(["bash", str(context / "images" / "build.sh"), target, tag, *build_args],
                              capture_output=True, text=True, env=self.env, timeout=900, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"building {target} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        return tag

    def context_copy(self, name: str) -> Path:
        """A private copy of the build context, to add wheels to its wheelhouse without touching the checkout."""
        context = self.work / name
        for item in CONTEXT:
            source, target = ROOT / item, context / item
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        for wheel in (context / "images" / "wheelhouse").glob("*.whl"):
            wheel.unlink()  # only what the test puts there
        return context

    def labels(self, image: str) -> dict[str, str]:
        """The image's labels."""
        return json.loads(self.run("image", "inspect", "--format", "{{json .Labels}}", image).stdout)

    def size(self, image: str) -> int:
        """The image's size in bytes, as ``podman images`` reports it."""
        return int(self.run("image", "inspect", "--format", "{{.Size}}", image).stdout)

    def cleanup(self) -> None:
        """Remove the images this session built (the base stays for the next run) and the work dir."""
        if self.tags:
            self.run("rmi", "--force", *self.tags, check=False)
        shutil.rmtree(self.work, ignore_errors=True)
