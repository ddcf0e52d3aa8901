"""The object-store client: a thin wrapper over ``obstore`` (``pip install 'trtwarm[s3]'``) that owns the timeouts,
the retries and the classification of failures into trtwarm's typed errors.

obstore (the Rust object_store crate) retries 5xx answers and connection errors itself with exponential backoff;
we set its request timeout well above its 30 s default (a 64 MiB part over a slow link), short connect and read
timeouts and a retry window, so an endpoint that is unreachable or accepts connections and never answers fails in
one request budget (about 22 s), not minutes, and then is skipped for the rest of the process (:mod:`.waits`).
Every failure becomes one of :class:`RemoteAuthError`, :class:`RemoteBucketError`, :class:`RemoteUnreachable` or
:class:`RemoteError` with a one-line message (the server's status and S3 error code, never a credential) and a
``kind`` for metrics.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError, RemoteAuthError, RemoteBucketError, RemoteError, RemoteUnreachable
from trtwarm.remote import waits
from trtwarm.remote.url import MAX_BACKOFF, RemoteURL, redact

#: error kinds, the label values of ``trtwarm_remote_errors_total{kind}``
KINDS = ("auth", "bucket", "unreachable", "server", "integrity", "trust", "conflict")
_UNREACHABLE = re.compile(r"error sending request|connection|dns error|timed? ?out|Timeout|refused|reset by peer",
                          re.IGNORECASE)
_AUTH_CODES = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "ExpiredToken", "InvalidToken")
#: a 403 with no S3 error code (an anonymous request, any HEAD, whose answer has no body) is a refusal all the same
_FORBIDDEN = re.compile(r"status code: 403\b|\b403 Forbidden\b")


def kind_of(error: RemoteError) -> str:
    """The metric label of *error*."""
    return getattr(error, "kind", None) or {RemoteAuthError: "auth", RemoteBucketError: "bucket",
                                            RemoteUnreachable: "unreachable"}.get(type(error), "server")


def _short(text: str) -> str:
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


#: what object_store puts before the reason: the store, the request and its retry counters (said elsewhere)
_BOILERPLATE = re.compile(r"^(Generic \w+ error: )+|Error performing (?:.*?retry_timeout: \S+\s+-\s*|[^\n]*? - "
                          r"|[^\n:]*?: )")


#: the slowest upload a part may take before its answer is due (the read timeout runs from the request's start,
#: body included): a 16 MiB part gets 16 s plus the read timeout
UPLOAD_FLOOR = 1 << 20


class Client:
    """One bucket and prefix; paths given to its methods are relative to the prefix.

    Every request is bounded (:mod:`trtwarm.remote.url`: connect, read and retry timeouts), watched (named in the log
    after a few seconds) and refused at once when the store failed earlier in this process
    (:mod:`trtwarm.remote.waits`): a store that hangs costs one request budget, whatever follows.
    """

    def __init__(self, remote: RemoteURL) -> None:
        self.remote = remote
        self.name = remote.describe()
        self._stores: dict[float, Any] = {}
        self._bucket_checked = False

    @property
    def store(self) -> Any:
        """The ``obstore`` S3Store, built on first use. :raises ConfigError: obstore is not installed."""
        return self._store_for(self.remote.read_timeout)

    def _store_for(self, read_timeout: float) -> Any:
        """The S3Store whose read timeout is *read_timeout* (uploads need a longer one: see :data:`UPLOAD_FLOOR`)."""
        if read_timeout not in self._stores:
            try:
                from obstore.store import S3Store
            except ImportError:
                raise ConfigError("--remote needs the obstore package, which is not installed",
                                  hint="pip install 'trtwarm[s3]'") from None
            r = self.remote
            try:
                self._stores[read_timeout] = self._make(S3Store, read_timeout)
            except Exception as exc:  # noqa: BLE001 (obstore raises its own configuration errors)
                raise ConfigError(f"cannot configure the S3 client for {r.describe()}: "
                                  f"{redact(str(exc), r).splitlines()[0]}",
                                  hint="check the AWS_* variables (endpoint URL, region)") from None
        return self._stores[read_timeout]

    def _make(self, S3Store: Any, read_timeout: float) -> Any:  # noqa: N803 (the class, imported lazily)
        r = self.remote
        config = {k.lower(): v for k, v in r.aws.items() if not k.startswith("AWS_ENDPOINT")}
        if r.endpoint:
            config["aws_endpoint"] = r.endpoint
        config.setdefault("aws_region", r.aws.get("AWS_DEFAULT_REGION", "us-east-1"))
        config.pop("aws_default_region", None)
        # object_store retries connection errors, timeouts and 5xx; no retry starts after retry_timeout, so a store
        # that never answers fails in about retry_timeout + read_timeout (RemoteURL.budget)
        retry = {"max_retries": r.retries, "retry_timeout": datetime.timedelta(seconds=r.retry_timeout),
                 "backoff": {"init_backoff": datetime.timedelta(milliseconds=200),
                             "max_backoff": datetime.timedelta(seconds=MAX_BACKOFF), "base": 2.0}}
        return S3Store(r.bucket, prefix=r.prefix or None, config=config, retry_config=retry,
                       client_options={"allow_http": r.allow_http, "timeout": f"{r.timeout:.3f}s",
                                       "connect_timeout": f"{r.connect_timeout:.3f}s",
                                       "read_timeout": f"{read_timeout:.3f}s"})

    def error(self, exc: BaseException, op: str, path: str) -> RemoteError:
        """Classify an obstore exception raised by *op* on *path*."""
        text = redact(str(exc), self.remote)
        where = f"{op} {self.remote.url}/{path}"
        name = type(exc).__name__
        if name in ("PermissionDeniedError", "UnauthenticatedError") or any(c in text for c in _AUTH_CODES) \
                or _FORBIDDEN.search(text):
            return RemoteAuthError(f"{where}: the object store refused the credentials or the operation: "
                                   f"{_short(text)}")
        if "NoSuchBucket" in text:
            return RemoteBucketError(f"bucket {self.remote.bucket!r} does not exist at "
                                     f"{self.remote.endpoint or 'the AWS endpoint'}")
        if "InvalidContentType" in text:  # TLS spoken to a server that answered in plain HTTP
            return RemoteUnreachable(f"{where}: {self.remote.endpoint} did not answer in TLS: is it a plain-http "
                                     "endpoint?", hint="use http:// in AWS_ENDPOINT_URL (with AWS_ALLOW_HTTP=true) "
                                     "for a plain-http server such as an in-cluster MinIO, or check the port")
        if name == "GenericError" and _UNREACHABLE.search(text) and "status code" not in text:
            return RemoteUnreachable(f"{where}: {self.remote.endpoint or 'the endpoint'} did not answer (up to "
                                     f"{self.remote.retries} retries within {self.remote.retry_timeout:.0f} s, "
                                     f"{self.remote.read_timeout:.0f} s read timeout: {_short(text)})")
        return RemoteError(f"{where}: {_short(text)}")

    @contextlib.contextmanager
    def _request(self, op: str, path: str, passing: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """One request's guard: skipped at once when the store is down, named in the log while it waits, its
        failure classified (but FileNotFoundError and the *passing* exceptions go through as they are); a store that
        did not answer is marked down for the rest of this process."""
        import obstore  # noqa: F401 (the store property reports it missing)

        waits.check(self.name)
        try:
            with waits.waiting(self.name, f"{op} {path}", self.remote.budget, self.remote.progress):
                yield
        except (FileNotFoundError, *passing):
            raise
        except Exception as exc:  # noqa: BLE001 (obstore's errors have no common public base besides Exception)
            if isinstance(exc, (ConfigError, RemoteError)):
                raise
            error = self.error(exc, op, path)
            if isinstance(error, RemoteUnreachable):
                waits.trip(self.name, _short(redact(str(exc), self.remote)))
            raise error from None

    def _call(self, op: str, path: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self._request(op, path):
            return fn(self.store, path, *args, **kwargs)

    def check_bucket(self) -> None:
        """A missing object and a missing bucket both answer 404 to GET/HEAD: tell them apart once, with a LIST."""
        if self._bucket_checked:
            return
        import obstore

        with self._request("LIST", "refs/"):
            next(iter(obstore.list(self.store, prefix="refs/", chunk_size=1)), None)
        self._bucket_checked = True

    def head(self, path: str) -> dict[str, Any] | None:
        """The object's metadata (``size``, ``e_tag``, ``last_modified``), or None if absent."""
        import obstore

        try:
            return dict(self._call("HEAD", path, obstore.head))
        except FileNotFoundError:
            self.check_bucket()
            return None

    def get(self, path: str, limit: int) -> bytes | None:
        """A small object's bytes (at most *limit*), or None if absent. :raises RemoteError: larger than *limit*."""
        import obstore

        try:
            result = self._call("GET", path, obstore.get)
        except FileNotFoundError:
            self.check_bucket()
            return None
        if result.meta["size"] > limit:
            raise RemoteError(f"{self.remote.url}/{path} is {result.meta['size']} bytes, more than {limit}")
        return bytes(self._call("GET", path, lambda _s, _p: result.bytes()))

    def stream_range(self, path: str, start: int, length: int, piece: int) -> Iterator[memoryview]:
        """Bytes ``[start, start+length)`` of *path* as they arrive, in pieces of about *piece* bytes (obstore joins
        the HTTP frames up to that size: a cache-sized buffer, reused, instead of one buffer of *length*).

        :raises FileNotFoundError: the object vanished; :raises RemoteError: the request or the body failed
        """
        import obstore

        result = self._call("GET", path, obstore.get, options={"range": (start, start + length)})
        pieces = iter(result.stream(min_chunk_size=piece))
        while True:  # each step reads the body: its failures are classified like the request's
            data = self._call("GET", path, lambda _s, _p: next(pieces, None))
            if data is None:
                return
            yield memoryview(data)

    def put_create(self, path: str, data: bytes) -> bool:
        """Create *path* only if absent (``If-None-Match: *``, one buffered PUT: small objects only).

        :return: True if this call created it, False if it already existed
        """
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            with self._request("PUT", path, (AlreadyExistsError, PreconditionError)):
                obstore.put(self.store, path, data, mode="create")
            return True
        except (AlreadyExistsError, PreconditionError):
            return False

    def put_bytes(self, path: str, data: bytes) -> None:
        """Write *path* unconditionally (small objects)."""
        import obstore

        self._call("PUT", path, obstore.put, data, use_multipart=False)

    def put_file(self, path: str, file: Path, part_size: int, concurrency: int) -> None:
        """Upload *file* with parallel multipart (bounded memory: about *concurrency* × *part_size*)."""
        import obstore

        store = self._store_for(self.remote.read_timeout + part_size / UPLOAD_FLOOR)
        with open(file, "rb") as handle, self._request("PUT", path):
            obstore.put(store, path, handle, chunk_size=part_size, max_concurrency=concurrency)

    def list(self, prefix: str) -> Iterator[dict[str, Any]]:
        """Every object under *prefix* (relative paths), page by page."""
        import obstore

        with self._request("LIST", prefix):
            for page in obstore.list(self.store, prefix=prefix):
                yield from (dict(meta) for meta in page)

    def delete(self, path: str) -> None:
        """Delete *path* (absent is fine)."""
        import obstore

        try:
            self._call("DELETE", path, obstore.delete)
        except FileNotFoundError:
            return


__all__ = ["KINDS", "Client", "kind_of"]
