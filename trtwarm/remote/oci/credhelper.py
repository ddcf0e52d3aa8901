"""Docker credential helpers: ``credHelpers`` and ``credsStore`` of a Docker config (or any auth file trtwarm reads).

Which helper a registry gets, as Docker and ORAS decide: ``credHelpers[registry]`` (the registry's ``host[:port]``;
ECR's ``docker-credential-ecr-login``, GCR's ``docker-credential-gcr``...), else ``credsStore``. The helper is run as
``docker-credential-<name> get`` with the server on stdin (``host[:port]``; for Docker Hub
``https://index.docker.io/v1/``) and answers ``{"ServerURL": ..., "Username": ..., "Secret": ...}`` on stdout; a ``Username`` of ``<token>`` makes the
secret an identity token. A helper that exits non-zero saying ``credentials not found in native keychain`` has none
for this registry: the auth file's own entry is used if it has one, else the pull is anonymous.

Bounded: the helper runs in its own session, and after :data:`DEFAULT_TIMEOUT` (``TRTWARM_CREDENTIAL_HELPER_TIMEOUT``)
or :data:`OUTPUT_LIMIT` bytes of output its whole process group is killed. Its answer (or failure) is remembered for
the process, so a hung helper costs its timeout once. Its secret never reaches a message, a log line or a traceback:
errors name the helper and the registry, never its output when that could hold the secret.
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from trtwarm.config import parse_duration
from trtwarm.errors import ConfigError, RemoteAuthError
from trtwarm.remote.oci.auth import AUTH_FILE_LIMIT, Credentials
from trtwarm.strictjson import JSONRefused, loads_object

DEFAULT_TIMEOUT = "10s"
OUTPUT_LIMIT = 64 << 10
NOT_FOUND = "credentials not found in native keychain"
#: a helper name becomes part of a program name looked up on PATH: never a path
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")

log = logging.getLogger("trtwarm.remote")
_answers: dict[tuple[str, str], Credentials | None | Exception] = {}
_lock = threading.Lock()


def helper_named(data: bytes, registry: str, source: str) -> str | None:
    """The helper the auth file *data* (at *source*) names for *registry*, or None.

    :raises JSONRefused: not a JSON object; :raises ConfigError: a helper name that is not a program-name suffix
    """
    return helper_for(loads_object(data, limit=AUTH_FILE_LIMIT), registry, source)


def helper_for(doc: Mapping[str, Any], registry: str, source: str) -> str | None:
    """The helper an auth file's document names for *registry* (``credHelpers``, else ``credsStore``), or None.

    :raises ConfigError: a helper name that is not a plain program-name suffix
    """
    helpers = doc.get("credHelpers")
    name: Any = None
    if isinstance(helpers, dict):
        wanted = _host(registry)
        name = next((v for k, v in helpers.items() if isinstance(k, str) and _host(k) == wanted), None)
    if name is None:
        name = doc.get("credsStore")
    if name is None or name == "":
        return None
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"the registry auth file {source} names the credential helper {str(name)[:80]!r} for "
                          f"{registry}, which is not a helper name", hint="a helper is named by the suffix of its "
                          "program, e.g. \"ecr-login\" for docker-credential-ecr-login")
    return name


def _host(key: str) -> str:
    """A ``credHelpers`` key or a registry as ``host[:port]`` (scheme and path dropped, Docker Hub's aliases one)."""
    host = re.sub(r"^[a-z]+://", "", key.strip().lower()).split("/", 1)[0]
    return "docker.io" if host in _HUB else host


def server_url(registry: str) -> str:
    """What Docker sends a helper for *registry*: ``host[:port]``, or ``https://index.docker.io/v1/`` for Docker Hub."""
    return "https://index.docker.io/v1/" if _host(registry) == "docker.io" else registry


def get(name: str, registry: str, environ: Mapping[str, str], source: str) -> Credentials | None:
    """The credentials ``docker-credential-<name>`` holds for *registry*, or None when it has none (remembered for
    the process, failures included).

    :raises ConfigError: the helper is not on PATH, or the timeout setting is malformed (exit 2)
    :raises RemoteAuthError: the helper hung, failed or answered something unusable (exit 11)
    """
    program = f"docker-credential-{name}"
    found = shutil.which(program, path=environ.get("PATH", os.defpath))
    if found is None:
        raise ConfigError(f"the registry auth file {source} leaves {registry} to the credential helper {program}, "
                          "which is not on PATH", hint=f"install {program} where trtwarm runs (or fix PATH), or "
                          "write the credentials into an auth file (`podman login --authfile FILE`) and set "
                          "REGISTRY_AUTH_FILE=FILE")
    timeout = parse_duration(environ.get("TRTWARM_CREDENTIAL_HELPER_TIMEOUT", DEFAULT_TIMEOUT),
                             "TRTWARM_CREDENTIAL_HELPER_TIMEOUT", positive=True)
    key = (found, server_url(registry))
    with _lock:  # one run per helper and server, even when several threads need credentials at once
        if key not in _answers:
            log.debug("asking the credential helper %s for the credentials of %s", found, key[1])
            try:
                _answers[key] = _ask(found, program, key[1], registry, environ, timeout)
            except RemoteAuthError as exc:
                _answers[key] = exc
        answer = _answers[key]
    if isinstance(answer, Exception):
        raise answer
    return answer


def _ask(path: str, program: str, server: str, registry: str, environ: Mapping[str, str],
         timeout: float) -> Credentials | None:
    """Run the helper once and read its answer. :raises RemoteAuthError:"""
    hint = (f"run `printf %s {server} | {program} get` where trtwarm runs: it must print the credentials as JSON; "
            "or write them into an auth file (REGISTRY_AUTH_FILE)")
    code, out, why = _run(path, server, dict(environ), timeout)
    where = f"the credential helper {program} for {registry}"
    if why:
        raise RemoteAuthError(f"{where} {why}", hint=hint)
    text = out.decode("utf-8", "replace").strip()
    if code != 0:
        if text == NOT_FOUND:
            return None
        said = text.splitlines()[0][:200] if text and "{" not in text and "Secret" not in text else ""
        raise RemoteAuthError(f"{where} failed (exit status {code}" + (f": {said})" if said else ")"), hint=hint)
    try:
        return parse_answer(out, f"{program} (credential helper)")
    except ValueError as exc:
        raise RemoteAuthError(f"{where} answered something that is not its credentials: {exc}", hint=hint) from None


def parse_answer(out: bytes, source: str) -> Credentials | None:
    """The credentials of a helper's answer ``{"Username": ..., "Secret": ...}``, or None for an empty secret.

    :raises ValueError: not a JSON object with a string ``Username`` and ``Secret`` (the message never quotes them)
    """
    doc = loads_object(out, limit=OUTPUT_LIMIT)
    user, secret = doc.get("Username"), doc.get("Secret")
    if not isinstance(user, str) or not isinstance(secret, str):
        raise ValueError("no string Username and Secret in it")
    if not secret:
        return None
    return Credentials(identity_token=secret, source=source) if user == "<token>" else Credentials(user, secret,
                                                                                                 source=source)


def _run(path: str, server: str, env: dict[str, str], timeout: float) -> tuple[int | None, bytes, str]:
    """``(exit status, stdout, "")``, or ``(None, b"", why)`` when the helper could not be run to its end; its
    process group is killed on the way out whatever happens (a timeout, too much output, a signal)."""
    try:
        proc = subprocess.Popen([path, "get"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as exc:
        return None, b"", f"could not be started ({exc.strerror})"
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        try:
            proc.stdin.write(server.encode())  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass  # a helper that does not read its input; its answer still says what it has
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, b"", f"gave no answer within {timeout:g} s (TRTWARM_CREDENTIAL_HELPER_TIMEOUT)"
                if sel.select(left):
                    data = os.read(proc.stdout.fileno(), 8192)  # type: ignore[union-attr]
                    if not data:
                        break
                    out += data
                    if len(out) > OUTPUT_LIMIT:
                        return None, b"", f"printed more than {OUTPUT_LIMIT} bytes"
        try:
            return proc.wait(max(deadline - time.monotonic(), 0.1)), bytes(out), ""
        except subprocess.TimeoutExpired:
            return None, b"", f"gave no answer within {timeout:g} s (TRTWARM_CREDENTIAL_HELPER_TIMEOUT)"
    finally:
        _end(proc)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill what is left of a helper that did not finish (its whole process group: a grandchild holding its pipe
    too) and reap it. A helper already reaped is left alone: its group id may no longer be its own."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the unreaped leader keeps the id: no other group has it
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    proc.stdout.close()  # type: ignore[union-attr]


__all__ = ["DEFAULT_TIMEOUT", "NOT_FOUND", "get", "helper_for", "helper_named", "parse_answer", "server_url"]
