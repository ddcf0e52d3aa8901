"""A real OCI registry on loopback for tests and the bench: CNCF Distribution 2.8 (Debian's ``docker-registry``).

Its config binds ``127.0.0.1:0`` (the kernel picks the port, read back from its log), keeps storage in the given
directory and enables deletes; an optional htpasswd user turns on Basic auth. Distribution reads every
``REGISTRY_*`` environment variable as a configuration override (``REGISTRY_AUTH_FILE``, common for podman users,
makes it exit), so it starts with none. It runs in its own session and is stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from s3server import stop_group


def anonymous_env(home: Path) -> dict[str, str]:
    """An environment whose registry auth files all lie in *home* (created, empty): anonymous unless a test writes
    one, whatever the user running the tests has in theirs."""
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "XDG_RUNTIME_DIR": str(home), "DOCKER_CONFIG": str(home / ".docker"),
            "REGISTRY_AUTH_FILE": ""}


def registry_binary() -> str | None:
    """``docker-registry`` on PATH (apt-get install docker-registry)."""
    return shutil.which("docker-registry")


@dataclass
class Registry:
    """One ``docker-registry serve`` in *workdir*; :meth:`start` returns once ``/v2/`` answers."""

    workdir: Path
    user: tuple[str, str] | None = None  # (name, password): htpasswd auth
    token: TokenServer | None = None  # bearer-token auth through this token service
    accesslog: bool = False  # log every request (path included) to registry.log
    tls: tuple[Path, Path] | None = None  # (certificate, key): serve HTTPS with them
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
        if self.token:
            auth = (f"auth:\n  token:\n    realm: {self.token.realm}\n    service: {TokenServer.SERVICE}\n"
                    f"    issuer: {TokenServer.ISSUER}\n    rootcertbundle: {self.token.cert}\n")
        (self.workdir / "config.yml").write_text(
            f"version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: {str(not self.accesslog).lower()}\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.data}\n  delete:\n    enabled: true\n"
            "  maintenance:\n    uploadpurging:\n      enabled: false\n"
            f"http:\n  addr: 127.0.0.1:0\n  secret: {secrets.token_hex(16)}\n{self._tls()}{auth}")
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
            if found and self._answers(found[1], "https" if self.tls else "http"):
                self.addr = found[1]
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer: {self.log.read_text()[-2000:]}")

    def _tls(self) -> str:
        return f"  tls:\n    certificate: {self.tls[0]}\n    key: {self.tls[1]}\n" if self.tls else ""

    @staticmethod
    def _answers(addr: str, scheme: str) -> bool:
        import ssl

        probe = ssl._create_unverified_context() if scheme == "https" else None  # a probe: is it up at all
        try:
            with urllib.request.urlopen(f"{scheme}://{addr}/v2/", timeout=2, context=probe):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            return False

    def stop(self) -> None:
        stop_group(self.proc)

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


class TokenServer:
    """A bearer-token service for Distribution's ``auth.token``: Basic credentials in, an ES256 JWT out (its
    certificate is the registry's ``rootcertbundle``), granting pull and push on any repository to its one user and
    nothing to anyone else. Runs in a thread of the test process."""

    SERVICE, ISSUER = "trtwarm-test-registry", "trtwarm-test-issuer"

    def __init__(self, workdir: Path, user: tuple[str, str]) -> None:
        import datetime
        import http.server
        import threading

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.user, self.issued = user, 0
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trtwarm test token signer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(self.key, hashes.SHA256()))
        self.cert = workdir / "token.crt"
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.der = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server.answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, request: object) -> None:
        from urllib.parse import parse_qs, urlparse

        query = parse_qs(urlparse(request.path).query)  # type: ignore[attr-defined]
        expected = "Basic " + base64.b64encode(":".join(self.user).encode()).decode()
        given = request.headers.get("Authorization")  # type: ignore[attr-defined]
        if given is not None and given != expected:
            request.send_response(401)  # type: ignore[attr-defined]
            request.end_headers()  # type: ignore[attr-defined]
            return
        access = []
        for scope in query.get("scope", []) if given == expected else []:
            kind, name, actions = scope.split(":", 2)
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        body = json.dumps({"token": self._jwt(access)}).encode()
        self.issued += 1
        request.send_response(200)  # type: ignore[attr-defined]
        request.send_header("Content-Type", "application/json")  # type: ignore[attr-defined]
        request.end_headers()  # type: ignore[attr-defined]
        request.wfile.write(body)  # type: ignore[attr-defined]

    def _jwt(self, access: list[dict[str, object]]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": [self.der]}
        claims = {"iss": self.ISSUER, "sub": self.user[0], "aud": self.SERVICE, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": secrets.token_hex(8), "access": access}
        signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def stop(self) -> None:
        self.httpd.shutdown()
