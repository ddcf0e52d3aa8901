"""How obstore's failures become trtwarm's typed errors (the only reader of obstore's messages): refused credentials
→ :class:`RemoteAuthError` (exit 11), a missing bucket → :class:`RemoteBucketError` (12), no answer (after the
retries, or an answer the gate cut for its timing) → :class:`RemoteUnreachable` (13), an answer the gate refused →
:class:`~trtwarm.transport.answer.Refused` (10), anything else → :class:`RemoteError` (10). Each message is one
line: the status and S3 error code, never a credential (the caller's *redact* removes them)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trtwarm.errors import RemoteAuthError, RemoteBucketError, RemoteError, RemoteUnreachable
from trtwarm.transport.answer import Refused
from trtwarm.transport.gate import Verdict

_UNREACHABLE = re.compile(r"error sending request|connection|dns error|timed? ?out|Timeout|refused|reset by peer|"
                          r"error decoding response body|body error|incomplete", re.IGNORECASE)
_AUTH_CODES = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "ExpiredToken", "InvalidToken")
#: a 403 with no S3 error code (an anonymous request, any HEAD, whose answer has no body) is a refusal all the same
_FORBIDDEN = re.compile(r"status code: 403\b|\b403 Forbidden\b")
#: what object_store puts before the reason: the store, the request and its retry counters (said elsewhere)
_BOILERPLATE = re.compile(r"^(Generic \w+ error: )+|Error performing (?:.*?retry_timeout: \S+\s+-\s*|[^\n]*? - "
                          r"|[^\n:]*?: )")


def short(text: str) -> str:
    """``status 403 Forbidden (SignatureDoesNotMatch)`` out of object_store's long, multi-line message."""
    status = re.search(r"status code: (\d{3}[^:<]*)", text)
    code = re.search(r"<Code>([^<]+)</Code>", text)
    if status:
        return f"status {status[1].strip()}" + (f" ({code[1]})" if code else "")
    first = _BOILERPLATE.sub("", text.split("\n", 1)[0])
    causes = re.findall(r'message: "([^"]+)"', text)  # the OS error at the bottom of the debug chain
    if causes and causes[-1].lower() not in first.lower():
        first = f"{first.rstrip(' .')}: {causes[-1]}"
    return first[:240]


def classify(exc: BaseException, where: str, store: Any, verdict: Verdict | None,
             redact: Callable[[str], str]) -> RemoteError:
    """The typed error of obstore's *exc* on the request *where* (``GET s3://b/p/refs/k.json``) to *store* (its
    ``bucket``, ``endpoint``, ``limits``), given what the gate recorded meanwhile (*verdict*)."""
    text = redact(str(exc))
    name = type(exc).__name__
    endpoint = store.endpoint or "the AWS endpoint"
    if verdict is not None and verdict.kind == "refused":
        return Refused(f"{where}: {verdict.reason}")
    if verdict is not None and verdict.kind == "expired":
        return RemoteUnreachable(f"{where}: {verdict.reason}")
    if verdict is not None and verdict.kind == "tls":
        return RemoteUnreachable(f"{where}: {endpoint} did not answer in TLS: is it a plain-http endpoint? "
                                 f"({verdict.reason})", hint="use http:// in AWS_ENDPOINT_URL (with "
                                 "AWS_ALLOW_HTTP=true) for a plain-http server such as an in-cluster MinIO, check "
                                 "the port, or put a private CA in SSL_CERT_FILE")
    if name in ("PermissionDeniedError", "UnauthenticatedError") or any(c in text for c in _AUTH_CODES) \
            or _FORBIDDEN.search(text):
        return RemoteAuthError(f"{where}: the object store refused the credentials or the operation: {short(text)}")
    if "NoSuchBucket" in text:
        return RemoteBucketError(f"bucket {store.bucket!r} does not exist at {endpoint}")
    limits = store.limits
    if "status code" not in text and (verdict is not None or (name == "GenericError" and _UNREACHABLE.search(text))):
        why = verdict.reason if verdict is not None else short(text)
        return RemoteUnreachable(f"{where}: {endpoint} did not answer (up to {limits.retries} retries within "
                                 f"{limits.retry_timeout:.0f} s, {limits.read_timeout:.0f} s read timeout: {why})")
    return RemoteError(f"{where}: {short(text)}")


def status_error(answer: Any, where: str) -> RemoteError:
    """The typed error of an unexpected answer to a presigned request (its body read up to the error cap)."""
    text = answer.excerpt().decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]{1,80})</Code>", text)
    detail = f"status {answer.status}" + (f" ({code[1]})" if code else "")
    if answer.status in (401, 403) or (code and code[1] in _AUTH_CODES):
        return RemoteAuthError(f"{where}: the object store refused the credentials or the operation: {detail}")
    if code and code[1] == "NoSuchBucket":
        return RemoteBucketError(f"{where}: the bucket does not exist ({detail})")
    return RemoteError(f"{where}: {detail}")


__all__ = ["classify", "short", "status_error"]
