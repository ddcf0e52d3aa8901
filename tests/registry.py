"""A real OCI registry on loopback for tests and the bench: CNCF Distribution 2.8 (Debian's ``docker-registry``).

Its config binds ``127.0.0.1:0`` (the kernel picks the port, read back from its log), keeps storage in the given
directory and enables deletes; an optional htpasswd user turns on Basic auth. Distribution reads every
``REGISTRY_*`` environment variable as a configuration override (``REGISTRY_AUTH_FILE``, common for podman users,
makes it exit), so it starts with none. It runs in its own session and is stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def registry_binary() -> str | None:
    """``docker-registry`` on PATH (apt-get install docker-registry)."""
    return shutil.which("docker-registry")


@dataclass
class Registry:
    """One ``docker-registry serve`` in *workdir*; :meth:`start` returns once ``/v2/`` answers."""

    workdir: Path
    user: tuple[str, str] | None = None  # (name, password): htpasswd auth
    proc: subprocess.Popen[bytes] | None = None
    addr: str = ""
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.workdir / "registry.log"

    @property
    def data(self) -> Path:
        """The storage root (``docker/registry/v2/{blobs,repositories}``)."""
        return self.workdir / "data"

    def start(self) -> Registry:
        self.data.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.user:
            hashed = subprocess.run(["htpasswd", "-Bbn", *self.user], check=True, capture_output=True, text=True)
            (self.workdir / "htpasswd").write_text(hashed.stdout)
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {self.workdir / 'htpasswd'}\n"
        (self.workdir / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.data}\n  delete:\n    enabled: true\n"
            "  maintenance:\n    uploadpurging:\n      enabled: false\n"
            f"http:\n  addr: 127.0.0.1:0\n  secret: {secrets.token_hex(16)}\n{auth}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(registry_binary()), "serve", str(self.workdir / "config.yml")],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log.read_text()[-2000:]}")
            found = re.search(r"listening on (127\.0\.0\.1:\d+)", self.log.read_text())
            if found and self._answers(found[1]):
                self.addr = found[1]
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer: {self.log.read_text()[-2000:]}")

    @staticmethod
    def _answers(addr: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{addr}/v2/", timeout=2):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def auth_file(self, path: Path, user: tuple[str, str] | None = None) -> Path:
        """A Docker/Podman auth file for this registry (*user*, else its own user)."""
        name, password = user or self.user or ("", "")
        token = base64.b64encode(f"{name}:{password}".encode()).decode()
        path.write_text(json.dumps({"auths": {self.addr: {"auth": token}}}))
        return path

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps the bytes of *digest* (``sha256:<hex>``)."""
        hexa = digest.split(":", 1)[1]
        return self.data / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"

    def get(self, path: str, accept: str = "application/vnd.oci.image.manifest.v1+json") -> tuple[bytes, dict]:
        """GET ``/v2/<path>`` (no auth): the body and headers."""
        request = urllib.request.Request(f"http://{self.addr}/v2/{path}", headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read(), dict(response.headers)
