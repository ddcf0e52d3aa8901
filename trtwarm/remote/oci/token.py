"""A registry's bearer token (distribution's token authentication): the token service named by a 401 challenge's
``realm`` is asked for a token of the repository's scope, with a refresh token or Basic credentials from the auth
file, or anonymously; credentials never travel in clear to a token service that is not https."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from trtwarm import strictjson
from trtwarm.errors import RemoteAuthError, RemoteError
from trtwarm.remote.oci.auth import Credentials, token_from
from trtwarm.remote.oci.failures import AUTH_HINT, registry_error
from trtwarm.remote.oci.url import OciURL, is_loopback

#: a token service's answer: a token and a few fields
TOKEN_LIMIT = 1 << 20


def bearer_token(remote: OciURL, params: dict[str, str], push: bool, creds: Credentials | None,
                 plain: Callable[[str, str, bytes | None, dict[str, str]], Any]) -> str:
    """A token for *params* (the challenge's ``realm``, ``service``, ``scope``), fetched with *plain* (a request
    without the registry's own authentication). :raises RemoteAuthError: refused, or a realm that is not https
    while credentials would be sent; :raises RemoteError: no usable token"""
    scope = params.get("scope") or f"repository:{remote.repository}:{'pull,push' if push else 'pull'}"
    query = {"service": params.get("service", ""), "scope": scope}
    realm = params["realm"]
    host = re.sub(r"^[a-z]+://", "", realm).split("/", 1)[0]
    if creds is not None and not realm.startswith("https://") and not (remote.allow_http or is_loopback(host)):
        raise RemoteAuthError(f"the registry {remote.registry} sends its token requests to {realm[:80]}, "
                              "which is not https: the credentials are not sent in clear", hint="fix the "
                              "registry's token realm, or pass --insecure-registry if this network is trusted")
    if creds is not None and creds.identity_token:
        form = urlencode({**query, "grant_type": "refresh_token", "refresh_token": creds.identity_token,
                          "client_id": "trtwarm"}).encode()
        response = plain("POST", realm, form, {"Content-Type": "application/x-www-form-urlencoded"})
    else:
        headers = {"Authorization": creds.basic()} if creds is not None and creds.username else {}
        response = plain("GET", f"{realm}?{urlencode(query)}", None, headers)
    if response.status in (401, 403):
        raise RemoteAuthError(f"the token service {realm} refused the credentials for {remote.registry} "
                              f"(status {response.status}: {registry_error(response.data)})", hint=AUTH_HINT)
    try:
        if response.status != 200:
            raise ValueError(f"status {response.status}")
        return token_from(strictjson.loads(response.data, limit=TOKEN_LIMIT))
    except ValueError as exc:
        raise RemoteError(f"the token service {realm} gave no usable token ({exc})") from None


__all__ = ["bearer_token"]
