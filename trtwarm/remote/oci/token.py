"""A registry's bearer token (distribution's token authentication): the token service named by a 401 challenge's
``realm`` is asked for a token of the repository's scope, with a refresh token or Basic credentials from the auth
file, or anonymously. Credentials go to a realm only over https (or to a loopback realm, or when plain HTTP was
asked for); the registry's own token never goes there. The answer is read under a cap and parsed strictly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from trtwarm.errors import RemoteAuthError, RemoteError
from trtwarm.remote.oci.auth import Credentials, token_from
from trtwarm.remote.oci.failures import AUTH_HINT, registry_error
from trtwarm.remote.oci.url import OciURL, is_loopback
from trtwarm.transport.limits import SMALL_LIMIT
from trtwarm.transport.origin import origin_of


def bearer_token(remote: OciURL, params: dict[str, str], push: bool, creds: Credentials | None,
                 plain: Callable[[str, str, bytes | None, dict[str, str]], Any]) -> str:
    """A token for *params* (the challenge's ``realm``, ``service``, ``scope``), fetched with *plain* (a request
    without the registry's own authentication). :raises RemoteAuthError: refused, or a realm that is not https
    while credentials would be sent; :raises RemoteError: no usable token"""
    scope = params.get("scope") or f"repository:{remote.repository}:{'pull,push' if push else 'pull'}"
    query = {"service": params.get("service", ""), "scope": scope}
    realm = params["realm"]
    try:
        origin = origin_of(realm)
    except ValueError:
        raise RemoteAuthError(f"the registry {remote.registry} names a token realm that is not an http(s) URL: "
                              f"{realm[:80]!r}", hint=AUTH_HINT) from None
    if creds is not None and origin.scheme != "https" and not (remote.allow_http or is_loopback(origin.host)):
        raise RemoteAuthError(f"the registry {remote.registry} sends its token requests to {realm[:80]}, "
                              "which is not https: the credentials are not sent in clear", hint="fix the "
                              "registry's token realm, or pass --plain-http if this network is trusted")
    if creds is not None and creds.identity_token:
        form = urlencode({**query, "grant_type": "refresh_token", "refresh_token": creds.identity_token,
                          "client_id": "trtwarm"}).encode()
        answer = plain("POST", realm, form, {"Content-Type": "application/x-www-form-urlencoded"})
    else:
        headers = {"Authorization": creds.basic()} if creds is not None and creds.username else {}
        answer = plain("GET", f"{realm}{'&' if '?' in realm else '?'}{urlencode(query)}", None, headers)
    with answer:
        if answer.status in (401, 403):
            raise RemoteAuthError(f"the token service {realm[:80]} refused the credentials for {remote.registry} "
                                  f"(status {answer.status}: {registry_error(answer.excerpt())})", hint=AUTH_HINT)
        if answer.status != 200:
            raise RemoteError(f"the token service {realm[:80]} gave no usable token (status {answer.status}: "
                              f"{registry_error(answer.excerpt())})")
        doc = answer.json(SMALL_LIMIT, f"the token service {realm[:80]}")
    try:
        return token_from(doc)
    except ValueError as exc:
        raise RemoteError(f"the token service {realm[:80]} gave no usable token ({exc})") from None


__all__ = ["bearer_token"]
