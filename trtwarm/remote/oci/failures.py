"""How a registry's answers become trtwarm's typed errors: 401/403 → :class:`RemoteAuthError` (exit 11), no answer
→ :class:`RemoteUnreachable` (13), anything else → :class:`RemoteError` (10); each names the registry's error code
and never a credential."""

from __future__ import annotations

import json
from typing import Any

from trtwarm.errors import RemoteAuthError, RemoteError, RemoteUnreachable
from trtwarm.remote.oci.auth import Credentials
from trtwarm.remote.oci.url import OciURL

AUTH_HINT = ("check the registry credentials: the auth file (REGISTRY_AUTH_FILE, ~/.docker/config.json, or the "
             "mounted image pull secret's .dockerconfigjson) and that they may pull (and, to push, push) the "
             "repository")


CA_HINT = ("a registry whose certificate a private CA signed: set SSL_CERT_FILE to a PEM bundle of the CAs to trust, "
           "the system's and yours (cat /etc/ssl/certs/ca-certificates.crt ca.crt > bundle.pem; docs/oci.md, "
           "\"A private CA\"); else the certificate does not name this host or has expired")


def registry_error(body: bytes) -> str:
    """``CODE: message`` of a distribution-spec error body (the first error), or a short excerpt."""
    try:
        first = json.loads(body)["errors"][0]
        return f"{first.get('code')}: {str(first.get('message'))[:200]}"
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return body[:120].decode("utf-8", "replace").strip()


def unreachable(remote: OciURL, exc: Exception, method: str, url: str) -> RemoteError:
    """The typed error of a request that got no answer (after urllib3's retries)."""
    import urllib3

    reason = getattr(exc, "reason", None) or exc
    where = f"{method} {url}"
    if isinstance(reason, urllib3.exceptions.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(reason):
        return RemoteUnreachable(f"{where}: the TLS certificate of {remote.registry} is not trusted here "
                                 f"({str(reason)[-160:]})", hint=CA_HINT)
    if isinstance(reason, urllib3.exceptions.SSLError):
        return RemoteUnreachable(f"{where}: {remote.registry} did not answer in TLS ({str(reason)[:120]})",
                                 hint="a plain-http registry needs --plain-http (or TRTWARM_PLAIN_HTTP=true); else "
                                 "check its certificate")
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(reason, urllib3.exceptions.ResponseError):
        return RemoteError(f"{where}: the registry kept failing after {remote.retries} retries ({reason})")
    text = str(reason).split(": ", 1)[-1][:200]
    return RemoteUnreachable(f"{where}: {remote.registry} did not answer after {remote.retries} "
                             f"retries ({text})", hint=f"check the registry address in --remote "
                             f"{remote.url}, DNS and network policies from this Pod to it")


def failure(remote: OciURL, credentials: Credentials | None, response: Any, op: str, what: str) -> RemoteError:
    """The typed error of an unexpected answer (the body already read or not)."""
    detail = registry_error(response.data if response.data is not None else b"")
    for secret in (credentials.secrets() if credentials else ()):
        detail = detail.replace(secret, "***")
    where = f"{op} {remote.url} {what}"
    if response.status in (401, 403):
        return RemoteAuthError(f"{where}: the registry refused the credentials or the operation: status "
                               f"{response.status} ({detail})", hint=AUTH_HINT)
    return RemoteError(f"{where}: status {response.status} ({detail})")


__all__ = ["AUTH_HINT", "CA_HINT", "failure", "registry_error", "unreachable"]
