"""How a registry's answers become trtwarm's typed errors: 401/403 → :class:`RemoteAuthError` (exit 11), no answer
→ :class:`RemoteUnreachable` (13), anything else → :class:`RemoteError` (10); each names the registry's error code
and never a credential. An error body is read up to the transport's error cap and parsed strictly."""

from __future__ import annotations

from typing import Any

from trtwarm.errors import RemoteAuthError, RemoteError, RemoteUnreachable
from trtwarm.remote.oci.auth import Credentials
from trtwarm.remote.oci.url import OciURL
from trtwarm.strictjson import JSONRefused, loads
from trtwarm.transport.limits import ERROR_LIMIT
from trtwarm.transport.origin import origin_of

AUTH_HINT = ("check the registry credentials: the auth file (REGISTRY_AUTH_FILE, ~/.docker/config.json, or the "
             "mounted image pull secret's .dockerconfigjson) and that they may pull (and, to push, push) the "
             "repository")
CA_HINT = ("a registry whose certificate a private CA signed: set SSL_CERT_FILE to a PEM bundle of the CAs to trust, "
           "the system's and yours (cat /etc/ssl/certs/ca-certificates.crt ca.crt > bundle.pem; docs/oci.md, "
           "\"A private CA\"); else the certificate does not name this host or has expired")


def registry_error(body: bytes) -> str:
    """``CODE: message`` of a distribution-spec error body (the first error), or a short excerpt."""
    try:
        first = loads(body, limit=ERROR_LIMIT)["errors"][0]
        return f"{first.get('code')}: {str(first.get('message'))[:200]}"
    except (JSONRefused, KeyError, IndexError, TypeError, AttributeError):
        return body[:120].decode("utf-8", "replace").strip()


def unreachable_hint(remote: OciURL, exc: RemoteUnreachable) -> str:
    """What to check when *remote*'s registry did not answer."""
    if "CERTIFICATE_VERIFY_FAILED" in exc.message or "certificate verify failed" in exc.message:
        return CA_HINT
    if "TLS" in exc.message or "SSL" in exc.message:
        return "a plain-http registry needs --plain-http (or TRTWARM_PLAIN_HTTP=true); else check its certificate"
    return (f"check the registry address in --remote {remote.url}, DNS and network policies from this Pod to it "
            "(the waits: --remote-read-timeout, --remote-retry-timeout)")


def failure(remote: OciURL, credentials: Credentials | None, answer: Any, op: str, what: str) -> RemoteError:
    """The typed error of an unexpected answer (its body read up to the error cap)."""
    detail = registry_error(answer.excerpt())
    for secret in (credentials.secrets() if credentials else ()):
        detail = detail.replace(secret, "***")
    where = f"{op} {remote.url} {what}"
    if answer.status in (401, 403):
        if answer.origin != origin_of(f"{remote.scheme}://{remote.registry}/"):
            return RemoteAuthError(f"{where}: {answer.origin}, where the registry sent this request, refused it: "
                                   f"status {answer.status} ({detail}); the registry's credentials are never sent "
                                   "to another origin", hint="ask the registry's operator why it points there")
        return RemoteAuthError(f"{where}: the registry refused the credentials or the operation: status "
                               f"{answer.status} ({detail})", hint=AUTH_HINT)
    return RemoteError(f"{where}: status {answer.status} ({detail})")


__all__ = ["AUTH_HINT", "CA_HINT", "failure", "registry_error", "unreachable_hint"]
