"""Registry credentials and challenges: the Docker/Podman auth file, Basic, and the bearer-token flow.

Where credentials come from (the first file that exists; Podman's order, which includes Docker's file):
``REGISTRY_AUTH_FILE`` (e.g. a mounted ``kubernetes.io/dockerconfigjson`` Secret's ``.dockerconfigjson``),
``$XDG_RUNTIME_DIR/containers/auth.json``, ``$HOME/.config/containers/auth.json``,
``$DOCKER_CONFIG/config.json`` or ``$HOME/.docker/config.json``. In it, ``auths`` maps a registry (or a
``registry/namespace`` path, the longest match wins, as in Podman) to ``auth`` (base64 ``user:password``),
``username``/``password``, or an ``identitytoken`` (an OAuth2 refresh token). No entry: anonymous. A file that exists
but cannot be read or parsed fails closed (exit 2), never silently anonymous. A Docker credential helper the file
names for the registry (``credHelpers``, else ``credsStore``) is asked first (:mod:`trtwarm.remote.oci.credhelper`);
when it has nothing for the registry, the file's own entry is used.

A 401 names its scheme in ``WWW-Authenticate``: ``Basic`` is answered with the user and password; ``Bearer
realm=...,service=...,scope=...`` with a token fetched from the realm (GET with Basic credentials or anonymously;
POST ``grant_type=refresh_token`` with an identity token), cached per scope for the process.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError

AUTH_FILE_LIMIT = 1 << 20


@dataclass(frozen=True)
class Credentials:
    """One registry's credentials (secrets kept out of ``repr``) and the file they came from."""

    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)
    source: str = ""

    def basic(self) -> str:
        """The ``Authorization`` value for Basic."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

    def secrets(self) -> tuple[str, ...]:
        """What must never appear in a message."""
        return tuple(s for s in (self.password, self.identity_token) if len(s) >= 4)


def auth_file_candidates(environ: Mapping[str, str]) -> list[Path]:
    """The auth files looked at, in order (only the first that exists is read)."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    out = []
    if environ.get("REGISTRY_AUTH_FILE"):
        return [Path(environ["REGISTRY_AUTH_FILE"])]
    if environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    out.append(home / ".config" / "containers" / "auth.json")
    out.append(Path(environ["DOCKER_CONFIG"]) / "config.json" if environ.get("DOCKER_CONFIG")
               else home / ".docker" / "config.json")
    return out


def _normal(key: str) -> str:
    """An ``auths`` key as ``host[/path]``: scheme, Docker Hub's ``/v1/`` suffix and trailing slashes dropped."""
    key = re.sub(r"^[a-z]+://", "", key.strip()).rstrip("/")
    key = re.sub(r"/v[12]$", "", key)
    return {"index.docker.io": "docker.io", "registry-1.docker.io": "docker.io"}.get(key, key)


def parse_auth_file(data: bytes, source: str) -> dict[str, Credentials]:
    """``{normalised registry[/path]: Credentials}`` of an auth file's ``auths`` (or a legacy ``.dockercfg``).

    :raises ValueError: not a JSON object, or an entry whose ``auth`` is not base64 of ``user:password``
    """
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    auths = doc.get("auths", doc if "auths" not in doc and not {"credsStore", "credHelpers"} & set(doc) else {})
    if not isinstance(auths, dict):
        raise ValueError('"auths" is not an object')
    out = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            raise ValueError(f"the entry for {key!r} is not an object")
        user, password = entry.get("username") or "", entry.get("password") or ""
        if entry.get("auth"):
            try:
                user, sep, password = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise ValueError(f"the auth of {key!r} is not base64 of user:password")
        token = entry.get("identitytoken") or ""
        if not all(isinstance(v, str) for v in (user, password, token)):
            raise ValueError(f"the entry for {key!r} has a non-string field")
        out[_normal(str(key))] = Credentials(user, password, token, source)
    return out


def load_credentials(registry: str, repository: str, environ: Mapping[str, str]) -> Credentials | None:
    """The credentials for ``registry/repository`` from the first auth file that exists, or None (anonymous).

    :raises ConfigError: that file cannot be read or parsed (fails closed), ``REGISTRY_AUTH_FILE`` is missing, or
        its credential helper is not installed; :raises RemoteAuthError: the helper failed (hung, exit, garbage)
    """
    from trtwarm.remote.oci import credhelper
    from trtwarm.remote.oci.credhelper import helper_named

    for path in auth_file_candidates(environ):
        try:
            with open(path, "rb") as handle:
                data = handle.read(AUTH_FILE_LIMIT + 1)
        except FileNotFoundError:
            if environ.get("REGISTRY_AUTH_FILE"):
                raise ConfigError(f"REGISTRY_AUTH_FILE {path} does not exist", hint="point it at the registry "
                                  "auth file (e.g. the mounted dockerconfigjson Secret's .dockerconfigjson), or "
                                  "unset it for anonymous pulls") from None
            continue
        except OSError as exc:
            raise ConfigError(f"the registry auth file {path} cannot be read: {exc.strerror}",
                              hint="fix its permissions, or point REGISTRY_AUTH_FILE elsewhere") from None
        try:
            if len(data) > AUTH_FILE_LIMIT:
                raise ValueError(f"larger than {AUTH_FILE_LIMIT} bytes")
            table = parse_auth_file(data, str(path))
            helper = helper_named(data, registry, str(path))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ConfigError(f"the registry auth file {path} is malformed: {str(exc)[:200]}",
                              hint="it must be a Docker/Podman auth file: {\"auths\": {\"REGISTRY\": {\"auth\": "
                              "\"<base64 user:password>\"}}} (`podman login --authfile FILE` writes one)") from None
        from_helper = credhelper.get(helper, registry, environ, str(path)) if helper else None
        return from_helper or match(table, registry, repository)
    return None


def match(table: Mapping[str, Credentials], registry: str, repository: str) -> Credentials | None:
    """The most specific entry of *table* for ``registry/repository``: ``registry/a/b`` before ``registry/a``
    before ``registry`` (Podman's rule)."""
    parts = [_normal(registry), *repository.split("/")]
    for n in range(len(parts), 0, -1):
        found = table.get("/".join(parts[:n]))
        if found is not None:
            return found
    return None


_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]*))\s*(?:,|$)')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``("bearer", {"realm": ..., "service": ..., "scope": ...})`` out of a ``WWW-Authenticate`` value.

    :raises ValueError: no scheme, or parameters that are not ``name=value`` / ``name="value"`` pairs
    """
    match_ = re.match(r"\s*([A-Za-z][A-Za-z0-9_-]*)(?:\s+|$)", header)
    if not match_:
        raise ValueError(f"no scheme in {header[:80]!r}")
    params: dict[str, str] = {}
    rest, pos = header[match_.end():], 0
    while pos < len(rest):
        found = _PARAM.match(rest, pos)
        if not found or found.end() == pos:
            raise ValueError(f"malformed parameters in {header[:80]!r}")
        value = found[2] if found[2] is not None else found[3]
        params[found[1].lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = found.end()
    return match_[1].lower(), params


def token_from(doc: Any) -> str:
    """The token of a token endpoint's answer (``token`` or ``access_token``). :raises ValueError: none"""
    if isinstance(doc, dict):
        for name in ("token", "access_token"):
            if isinstance(doc.get(name), str) and doc[name]:
                return str(doc[name])
    raise ValueError("the token endpoint's answer holds no token")


__all__ = ["Credentials", "auth_file_candidates", "load_credentials", "match", "parse_auth_file",
           "parse_challenge", "token_from"]
