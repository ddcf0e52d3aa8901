"""Docker credential helpers (``credHelpers``, ``credsStore``) against a real registry with htpasswd auth: each test
writes a real helper program (a shell script ``docker-credential-<name>``) into a directory it puts on PATH, as an
ECR, GCR or desktop helper would be installed, and runs trtwarm as a user would. A helper that works, one that has
nothing for the registry, one that hangs, one that fails, one that answers garbage or a duplicated key, one that is
not installed: each gives its documented result and exit code, and the secret is never printed or logged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ort_init_args, run_trtwarm
from registry import Registry, anonymous_env, registry_binary

if registry_binary() is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("docker-registry is missing (apt-get install docker-registry): CI must run these tests")
    pytest.skip("docker-registry is not installed (apt-get install docker-registry)", allow_module_level=True)

USER, SECRET = "ci", "helper-secret-93517"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = Registry(tmp_path_factory.mktemp("helpers"), user=(USER, SECRET)).start()
    yield server
    server.stop()


def helper(bindir: Path, name: str, body: str) -> Path:
    """Install ``docker-credential-<name>`` (a shell script) in *bindir*; it logs the server it was asked about."""
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / f"docker-credential-{name}"
    path.write_text(f'#!/bin/sh\n[ "$1" = get ] || exit 3\nserver=$(cat)\necho "$server" >> "{bindir}/asked"\n'
                    f"{body}\n")
    path.chmod(0o755)
    return path


def config(home: Path, doc: dict[str, Any]) -> dict[str, str]:
    """A Docker config in ``$HOME/.docker/config.json`` and the environment that finds it and the helpers."""
    env = anonymous_env(home)
    (home / ".docker").mkdir(exist_ok=True)
    (home / ".docker" / "config.json").write_text(json.dumps(doc))
    return {**env, "PATH": f"{home / 'bin'}:{os.environ['PATH']}"}


def answer(user: str = USER, secret: str = SECRET) -> str:
    return f"printf '%s' '{json.dumps({'ServerURL': '', 'Username': user, 'Secret': secret})}'"


def test_a_cred_helpers_entry_pushes_and_pulls_and_its_secret_is_never_printed(
        locked: Registry, model: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    helper(home / "bin", "ecr-login", answer())
    env = config(home, {"auths": {}, "credHelpers": {locked.addr: "ecr-login", "other.example.com": "gcr"}})
    url = f"oci://{locked.addr}/engines/helper"
    push = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", url), env=env)
    assert push.returncode == 0, push.stderr
    assert json.loads((tmp_path / "ha" / "engine.json").read_text())["remote"]["push"] == "pushed"
    pull = run_trtwarm(*ort_init_args(model, tmp_path / "b", tmp_path / "hb", "--remote", url, "--read-only"), env=env)
    assert pull.returncode == 0 and pull.summary["result"] == "pulled", pull.stderr
    listing = run_trtwarm("remote", "ls", "--remote", url, "--json", env=env)
    assert listing.returncode == 0, listing.stderr
    said = push.stdout + push.stderr + pull.stdout + pull.stderr + listing.stdout + listing.stderr
    assert SECRET not in said and SECRET not in (tmp_path / "hb" / "engine.json").read_text()
    assert set((home / "bin" / "asked").read_text().split()) == {locked.addr}  # the registry, on stdin


def test_a_creds_store_answers_for_every_registry_and_not_found_falls_back_to_the_file_then_anonymous(
        locked: Registry, tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = f"oci://{locked.addr}/engines/store"
    helper(home / "bin", "desktop", answer())
    env = config(home, {"auths": {locked.addr: {}}, "credsStore": "desktop"})  # Docker Desktop's shape
    assert run_trtwarm("remote", "ls", "--remote", url, env=env).returncode == 0
    # "credentials not found" (what every helper says for a registry it does not hold): the file's own entry ...
    helper(home / "bin", "desktop", 'echo "credentials not found in native keychain"; exit 1')
    token = __import__("base64").b64encode(f"{USER}:{SECRET}".encode()).decode()
    env = config(home, {"auths": {locked.addr: {"auth": token}}, "credsStore": "desktop"})
    assert run_trtwarm("remote", "ls", "--remote", url, env=env).returncode == 0
    # ... else anonymous, which this registry refuses with its own code
    env = config(home, {"auths": {}, "credsStore": "desktop"})
    none = run_trtwarm("remote", "ls", "--remote", url, env=env)
    assert none.returncode == 11 and "none are configured" in none.stderr, none.stderr


def test_helpers_of_a_podman_auth_file_given_by_registry_auth_file(locked: Registry, tmp_path: Path) -> None:
    """``credHelpers`` in any auth file trtwarm reads (containers-auth.json, ``REGISTRY_AUTH_FILE``), as podman."""
    home = tmp_path / "home"
    helper(home / "bin", "secretservice", answer())
    env = config(home, {"auths": {}})  # the Docker config has nothing; the file REGISTRY_AUTH_FILE names is read
    (tmp_path / "auth.json").write_text(json.dumps({"auths": {}, "credHelpers": {locked.addr: "secretservice"}}))
    run = run_trtwarm("remote", "ls", "--remote", f"oci://{locked.addr}/engines/podman",
                      env={**env, "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")})
    assert run.returncode == 0 and (home / "bin" / "asked").read_text().split() == [locked.addr], run.stderr


def test_a_hung_helper_costs_its_timeout_once_then_exit_11_and_leaves_no_process(
        locked: Registry, model: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    helper(home / "bin", "hangs", f'sleep 600 & echo $! > "{home}/bin/sleeper"; wait')
    env = {**config(home, {"credHelpers": {locked.addr: "hangs"}}), "TRTWARM_CREDENTIAL_HELPER_TIMEOUT": "3s"}
    started = time.monotonic()
    run = run_trtwarm(*ort_init_args(model, tmp_path / "a", tmp_path / "ha", "--remote", f"oci://{locked.addr}/e/h",
                                     "--read-only", "--lock-timeout", "2s"), env=env)
    took = time.monotonic() - started
    assert run.returncode == 11, run.stderr
    assert "docker-credential-hangs" in run.stderr and "gave no answer within 3 s" in run.stderr
    assert "hint:" in run.stderr and "Traceback" not in run.stderr
    assert took < 60, took  # the helper's 3 s and a Python start, not its 600 s
    assert (home / "bin" / "asked").read_text().count("\n") == 1  # remembered: asked once, not per request
    sleeper = int((home / "bin" / "sleeper").read_text())
    assert not Path(f"/proc/{sleeper}").exists() or "Z" in Path(f"/proc/{sleeper}/stat").read_text().split()[2]


@pytest.mark.parametrize(("body", "says"), [
    ("printf '%s' '{\"Username\": \"ci\", \"Secret\": \"wrong\", \"Secret\": \"" + SECRET + "\"}'",
     "is given twice"),
    ("printf 'Username=ci Secret=" + SECRET + "'", "not valid JSON"),
    ("printf '%s' '[\"ci\", \"" + SECRET + "\"]'", "not an object"),
    ("printf '%s' '{\"Username\": \"ci\"}'", "no string Username and Secret"),
    ("printf '%s' '{\"Username\": \"ci\", \"Secret\": \"" + SECRET + "\"}'; exit 1", "exit status 1)"),
    ('echo "the keychain is locked" >&1; exit 4', "exit status 4: the keychain is locked"),
])
def test_a_helper_that_fails_or_answers_garbage_is_exit_11_and_its_output_is_never_echoed(
        locked: Registry, tmp_path: Path, body: str, says: str) -> None:
    home = tmp_path / "home"
    helper(home / "bin", "broken", body)
    env = config(home, {"credHelpers": {locked.addr: "broken"}})
    run = run_trtwarm("remote", "ls", "--remote", f"oci://{locked.addr}/engines/x", env=env)
    assert run.returncode == 11, run.stderr
    assert "docker-credential-broken" in run.stderr and says in run.stderr, run.stderr
    assert SECRET not in run.stdout + run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(("doc", "says"), [
    ({"credsStore": "nothere"}, "docker-credential-nothere, which is not on PATH"),
    ({"credHelpers": {"REGISTRY": "../../bin/sh"}}, "which is not a helper name"),
    ({"credsStore": 7}, "which is not a helper name"),
])
def test_an_absent_or_unsafe_helper_is_a_configuration_error_naming_it(
        locked: Registry, tmp_path: Path, doc: dict[str, Any], says: str) -> None:
    doc = json.loads(json.dumps(doc).replace("REGISTRY", locked.addr))
    env = config(tmp_path / "home", doc)
    run = run_trtwarm("remote", "ls", "--remote", f"oci://{locked.addr}/engines/x", env=env)
    assert run.returncode == 2 and says in run.stderr and "hint:" in run.stderr, run.stderr
    assert not (tmp_path / "home" / "bin" / "asked").exists()


def test_an_anonymous_registry_never_runs_the_helper(tmp_path: Path) -> None:
    """Credentials are loaded on a 401 only: a Docker config's credsStore does not run for an open registry."""
    (tmp_path / "reg").mkdir()
    server = Registry(tmp_path / "reg").start()
    try:
        home = tmp_path / "home"
        helper(home / "bin", "desktop", "sleep 600")
        env = config(home, {"credsStore": "desktop"})
        run = run_trtwarm("remote", "ls", "--remote", f"oci://{server.addr}/engines/open", env=env)
        assert run.returncode == 0 and not (home / "bin" / "asked").exists(), run.stderr
    finally:
        server.stop()


def test_the_secret_stays_out_of_debug_logs_and_error_chains(
        locked: Registry, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """In-process, every logger at DEBUG (urllib3's included), through the helper, a push and a refused one."""
    import traceback

    from trtwarm.errors import RemoteAuthError
    from trtwarm.remote.oci import credhelper
    from trtwarm.remote.oci.client import OciClient
    from trtwarm.remote.oci.url import parse

    home = tmp_path / "home"
    helper(home / "bin", "dbg", answer())
    helper(home / "bin", "dbgbad", answer(secret="wrong-" + SECRET))
    credhelper._answers.clear()
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="trtwarm")  # an in-process main() earlier in the session set it to INFO
    logging.getLogger("trtwarm").propagate = True
    env = config(home, {"credHelpers": {locked.addr: "dbg"}})
    client = OciClient(parse(f"oci://{locked.addr}/engines/dbg", env))
    client.upload("sha256:" + __import__("hashlib").sha256(b"x").hexdigest(), b"x", 1)
    assert client.blob_size("sha256:" + __import__("hashlib").sha256(b"x").hexdigest()) == 1
    env = config(home, {"credHelpers": {locked.addr: "dbgbad"}})
    with pytest.raises(RemoteAuthError) as refused:
        OciClient(parse(f"oci://{locked.addr}/engines/dbg", env)).check_bucket()
    chain = "".join(traceback.format_exception(refused.value))
    assert "asking the credential helper" in caplog.text
    assert SECRET not in caplog.text and SECRET not in chain and SECRET not in repr(client.credentials)
