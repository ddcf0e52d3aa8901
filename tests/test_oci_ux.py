"""What a user of the OCI backend sees and pastes, against a real registry (Debian's ``docker-registry``): the
manifest digest of every push and in ``remote ls|show``; engine image references without ``oci://``, usable as they
are by skopeo (and a Pod spec); ``--plain-http`` and its older aliases for a plain-HTTP registry that is not on
loopback; a registry whose certificate a private CA signed (made with ``openssl`` here), trusted only through
``SSL_CERT_FILE``; and a registry (here a proxy before it) that answers 201 to a manifest and stores nothing.

A registry "not on loopback" is the loopback registry under the name ``registry.test``, which only trtwarm sees:
it runs in a private mount namespace whose ``/etc/hosts`` maps that name to 127.0.0.1 (root, ``unshare``).
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Run, env_for, ort_init_args, run_trtwarm, trtwarm_argv
from registry import Registry, anonymous_env, registry_binary

if registry_binary() is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("docker-registry is missing (apt-get install docker-registry): CI must run these tests")
    pytest.skip("docker-registry is not installed (apt-get install docker-registry)", allow_module_level=True)

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return anonymous_env(tmp_path / "home")


def digest_of(registry: Registry, path: str) -> str:
    """``sha256:`` of the manifest bytes the registry serves at ``/v2/<path>``."""
    return "sha256:" + hashlib.sha256(registry.get(path)[0]).hexdigest()


def test_every_push_prints_its_manifest_digest_and_remote_ls_and_show_carry_it(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    url = f"oci://{registry.addr}/engines/digests"
    push = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env)
    assert push.returncode == 0, push.stderr
    key = json.loads((tmp_path / "ha" / "engine.json").read_text())["key"]
    digest = digest_of(registry, f"engines/digests/manifests/{key}")
    pinned = f"{registry.addr}/engines/digests@{digest}"
    assert f"({pinned})" in push.stderr, push.stderr  # the push's log line
    assert json.loads((tmp_path / "ha" / "engine.json").read_text())["remote"]["manifest_digest"] == digest
    pull = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"), env=env)
    assert pull.returncode == 0 and f"({pinned})" in pull.stderr, pull.stderr
    listing = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert listing.returncode == 0 and "DIGEST" in listing.stdout and digest[:19] in listing.stdout, listing.stdout
    rows = json.loads(run_trtwarm("remote", "ls", "--remote", url, "--json", env=env).stdout)
    assert [(r["digest"], r["reference"]) for r in rows] == [(digest, pinned)]
    shown = json.loads(run_trtwarm("remote", "show", key[:12], "--remote", url, env=env).stdout)
    assert shown["digest"] == digest and shown["reference"] == pinned and shown["manifest"]["key"] == key
    # what other registry tools do with the printed reference: it names this very manifest
    inspected = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{pinned}"],
                               capture_output=True, check=False, timeout=60) if shutil.which("skopeo") else None
    assert inspected is None or hashlib.sha256(inspected.stdout).hexdigest() == digest.split(":")[1]


def test_prebuild_prints_each_rows_digest_and_an_engine_image_reference_without_the_scheme(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"models": [{"model": str(model), "shape": ["input=1x16:8x16:32x16"]}],
                                  "options": {"builder": "onnxruntime"}}))
    run = run_trtwarm("prebuild", "--matrix", str(matrix), "--remote", f"oci://{registry.addr}/engines/pre",
                      "--oci-image", f"oci://{registry.addr}/engines/pre-image:v1", env=env)
    assert run.returncode == 0, run.stderr
    [key] = json.loads(registry.get("engines/pre/tags/list")[0])["tags"]
    assert f"manifest {digest_of(registry, f'engines/pre/manifests/{key}')}" in run.stdout, run.stdout
    image = digest_of(registry, "engines/pre-image/manifests/v1")
    last = run.stdout.strip().splitlines()[-1]
    assert last == f"engine image {registry.addr}/engines/pre-image@{image}", last  # a Pod spec's image reference
    assert "oci://" not in last


def hosts_namespace(tmp_path: Path) -> list[str]:
    """A command prefix that runs its command where ``registry.test`` is 127.0.0.1 (skips where it cannot)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        reason = "a private /etc/hosts needs root and unshare (util-linux)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.0.1 registry.test\n")
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-ec",
              'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]
    probe = subprocess.run([*prefix, "getent", "hosts", "registry.test"], capture_output=True, text=True,
                           check=False, timeout=30)
    if probe.returncode != 0 or "127.0.0.1" not in probe.stdout:
        pytest.skip(f"cannot give trtwarm a private /etc/hosts here: {probe.stderr.strip()[-300:]}")
    return prefix


def run_as(prefix: list[str], *args: str, env: dict[str, str]) -> Run:
    proc = subprocess.run([*prefix, *trtwarm_argv(*args)], capture_output=True, text=True, env=env_for(env),
                          timeout=180, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def test_plain_http_and_its_older_aliases_reach_a_plain_registry_that_is_not_on_loopback(
        registry: Registry, env: dict[str, str], tmp_path: Path) -> None:
    prefix = hosts_namespace(tmp_path)
    url = f"oci://registry.test:{registry.addr.rsplit(':', 1)[1]}/engines/plain"
    tls = run_as(prefix, "remote", "ls", "--remote", url, env={**env, "TRTWARM_REMOTE_RETRIES": "0"})
    assert tls.returncode == 13 and "did not answer in TLS" in tls.stderr and "--plain-http" in tls.stderr, tls.stderr
    for how, extra in ((["--plain-http"], {}), (["--insecure-registry"], {}), ([], {"TRTWARM_PLAIN_HTTP": "true"}),
                       ([], {"TRTWARM_INSECURE_REGISTRY": "1"}), ([], {"TRTWARM_OCI_ALLOW_HTTP": "yes"})):
        run = run_as(prefix, "remote", "ls", "--remote", url, *how, env={**env, **extra})
        assert run.returncode == 0 and "0 refs" in run.stdout, (how, extra, run.stderr)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=120)


@pytest.fixture
def private_ca(tmp_path: Path) -> Iterator[tuple[Registry, Path]]:
    """A registry serving HTTPS for ``registry.test`` with a certificate of a CA made here: ``(registry, CA)``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    pki = tmp_path / "pki"
    pki.mkdir()
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=trtwarm test private CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=registry.test", cwd=pki)
    (pki / "server.ext").write_text("subjectAltName=DNS:registry.test\nbasicConstraints=CA:FALSE\n"
                                    "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                                    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=pki)
    (tmp_path / "reg").mkdir()
    server = Registry(tmp_path / "reg", tls=(pki / "server.crt", pki / "server.key")).start()
    yield server, pki / "ca.crt"
    server.stop()


def test_a_private_ca_is_trusted_through_ssl_cert_file_and_only_then(
        private_ca: tuple[Registry, Path], env: dict[str, str], model: Path, tmp_path: Path) -> None:
    server, ca = private_ca
    prefix = hosts_namespace(tmp_path)
    url = f"oci://registry.test:{server.addr.rsplit(':', 1)[1]}/engines/private"
    untrusted = run_as(prefix, "remote", "ls", "--remote", url, env={**env, "TRTWARM_REMOTE_RETRIES": "0"})
    assert untrusted.returncode == 13, untrusted.stderr
    assert "is not trusted here" in untrusted.stderr and "SSL_CERT_FILE" in untrusted.stderr, untrusted.stderr
    # docs/oci.md "A private CA": a bundle of the system's CAs and the private one (SSL_CERT_FILE replaces the default)
    bundle = tmp_path / "registry-cas.pem"
    bundle.write_bytes((SYSTEM_CAS.read_bytes() if SYSTEM_CAS.exists() else b"") + ca.read_bytes())
    trusting = {**env, "SSL_CERT_FILE": str(bundle)}
    push = run_as(prefix, *ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--remote-push",
                                         "required"), env=trusting)
    assert push.returncode == 0, push.stderr
    assert json.loads((tmp_path / "ha" / "engine.json").read_text())["remote"]["push"] == "pushed"
    listing = run_as(prefix, "remote", "ls", "--remote", url, env=trusting)
    assert listing.returncode == 0 and "1 refs" in listing.stdout, listing.stderr
    other = tmp_path / "other-ca.pem"  # a CA bundle without this one: refused again
    other.write_bytes(SYSTEM_CAS.read_bytes() if SYSTEM_CAS.exists() else (tmp_path / "pki" / "server.crt")
                      .read_bytes())
    refused = run_as(prefix, "remote", "ls", "--remote", url, env={**env, "SSL_CERT_FILE": str(other),
                                                                   "TRTWARM_REMOTE_RETRIES": "0"})
    assert refused.returncode == 13 and "is not trusted here" in refused.stderr, refused.stderr


class _Swallower(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the registry, except a manifest PUT: answered 201 and dropped (as a read-only
    mirror or a caching proxy that acknowledges writes it never makes)."""

    protocol_version = "HTTP/1.1"
    target = ""

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command == "PUT" and "/manifests/" in self.path:
            self.send_response(201)
            self.send_header("Docker-Content-Digest", "sha256:" + hashlib.sha256(body or b"").hexdigest())
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        upstream = http.client.HTTPConnection(self.target, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", answer.getheader("Content-Length") or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

    def log_message(self, *args: Any) -> None:
        pass


def test_a_registry_that_answers_201_and_stores_nothing_is_named_as_such(
        registry: Registry, env: dict[str, str], model: Path, tmp_path: Path) -> None:
    handler = type("Handler", (_Swallower,), {"target": registry.addr})
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        url = f"oci://127.0.0.1:{proxy.server_address[1]}/engines/swallowed"
        run = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url, "--remote-push",
                                         "required"), env=env)
    finally:
        proxy.shutdown()
    assert run.returncode == 10, run.stderr
    assert "answered the manifest PUT with 201 but does not have it when read back" in run.stderr, run.stderr
    assert "pull-through cache or a read-only mirror" in run.stderr and "remote rm" not in run.stderr
    entries = tmp_path / "a" / "entries"
    assert not entries.exists() or not any(entries.iterdir())  # required: nothing published locally either
