"""A thin OCI registry client over urllib3 (``pip install 'trtwarm[oci]'``): the distribution-spec requests trtwarm
needs, with retries, timeouts, authentication and failures classified into trtwarm's typed errors.

urllib3 retries connection errors, timeouts and 429/5xx answers with exponential backoff (``TRTWARM_REMOTE_RETRIES``,
from 200 ms), honours ``Retry-After``, rewinds a file body on a retry and drops ``Authorization`` on a redirect to
another host (a registry that redirects blob GETs to its storage). A 401 is answered once per scope
(:mod:`trtwarm.remote.oci.auth`). Failures: 401/403 → :class:`RemoteAuthError` (exit 11), no answer →
:class:`RemoteUnreachable` (13), anything else → :class:`RemoteError` (10), each with the registry's error code and
never a credential.

The path interface the shared pull and push use (``head``, ``stream_range``, ``put_file``) takes the S3 layout's
``blobs/sha256/<hex>`` paths and maps them to ``/v2/<repository>/blobs/sha256:<hex>``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urljoin

from trtwarm import strictjson
from trtwarm.errors import ConfigError, RemoteAuthError, RemoteError, RemoteUnreachable
from trtwarm.remote.oci.auth import Credentials, load_credentials, parse_challenge
from trtwarm.remote.oci.failures import AUTH_HINT, failure, unreachable
from trtwarm.remote.oci.token import bearer_token
from trtwarm.remote.oci.url import OciURL

MANIFEST_LIMIT = 4 << 20


def digest_of(path: str) -> str:
    """``sha256:<hex>`` of the S3 layout path ``blobs/sha256/<hex>``. :raises ValueError: another path"""
    parts = path.split("/")
    if len(parts) != 3 or parts[:2] != ["blobs", "sha256"]:
        raise ValueError(f"not a blob path: {path}")
    return f"sha256:{parts[2]}"


class OciClient:
    """One repository of one registry; thread-safe (one connection pool, tokens cached under a lock)."""

    def __init__(self, remote: OciURL) -> None:
        self.remote = remote
        self._http: Any = None
        self._credentials: Credentials | None | bool = False  # False: not loaded yet
        self._tokens: dict[bool, str] = {}  # push? -> Authorization value
        self._lock = threading.Lock()

    @property
    def credentials(self) -> Credentials | None:
        """From the auth file, read on first use. :raises ConfigError: an unreadable or malformed auth file"""
        if self._credentials is False:
            self._credentials = load_credentials(self.remote.registry, self.remote.repository, self.remote.environ)
        return self._credentials  # type: ignore[return-value]

    @property
    def http(self) -> Any:
        """The urllib3 pool, built on first use. :raises ConfigError: urllib3 is not installed"""
        if self._http is None:
            try:
                import urllib3
            except ImportError:
                raise ConfigError("--remote oci://... needs the urllib3 package, which is not installed",
                                  hint="pip install 'trtwarm[oci]'") from None
            r = self.remote
            retry = urllib3.Retry(total=r.retries, connect=r.retries, read=r.retries, status=r.retries,
                                  backoff_factor=0.2, backoff_max=5, status_forcelist=(429, 500, 502, 503, 504),
                                  allowed_methods=None, raise_on_status=False, respect_retry_after_header=True)
            self._http = urllib3.PoolManager(num_pools=4, maxsize=r.concurrency + 4, retries=retry,
                                             timeout=urllib3.Timeout(connect=r.connect_timeout, read=30.0),
                                             blocksize=1 << 20)
        return self._http

    # --- requests -------------------------------------------------------------------------------------------------
    def request(self, method: str, url: str, *, push: bool = False, headers: dict[str, str] | None = None,
                body: bytes | BinaryIO | None = None, stream: bool = False, read_timeout: float | None = None) -> Any:
        """One request, authenticated (a 401 is answered once). :raises RemoteUnreachable, ConfigError:"""
        import urllib3

        for attempt in range(2):
            sent = dict(headers or {})
            token = self._tokens.get(push) or self._tokens.get(True)
            if token:
                sent["Authorization"] = token
            position = body.tell() if hasattr(body, "tell") else None
            try:
                response = self.http.request(method, url, headers=sent, body=body, preload_content=not stream,
                                             timeout=urllib3.Timeout(connect=self.remote.connect_timeout,
                                                                     read=read_timeout or 30.0))
            except urllib3.exceptions.HTTPError as exc:
                raise self._unreachable(exc, method, url) from None
            if response.status != 401 or attempt:
                return response
            challenge = response.headers.get("WWW-Authenticate", "")
            response.drain_conn()
            response.release_conn()
            self._answer(challenge, push, method, url)
            if position is not None:
                body.seek(position)  # type: ignore[union-attr]
        raise AssertionError("unreachable")

    def _unreachable(self, exc: Exception, method: str, url: str) -> RemoteError:
        return unreachable(self.remote, exc, method, url)

    def fail(self, response: Any, op: str, what: str) -> RemoteError:
        """The typed error of an unexpected answer."""
        return failure(self.remote, self.credentials, response, op, what)

    def _answer(self, challenge: str, push: bool, method: str, url: str) -> None:
        """Get an ``Authorization`` value for *challenge*. :raises RemoteAuthError: no way to answer it"""
        try:
            scheme, params = parse_challenge(challenge)
        except ValueError:
            raise RemoteAuthError(f"{method} {url}: the registry asks for credentials with an unreadable challenge "
                                  f"{challenge[:80]!r}", hint=AUTH_HINT) from None
        creds = self.credentials
        if scheme == "basic":
            if creds is None or not creds.username:
                raise RemoteAuthError(f"{method} {url}: the registry asks for credentials and none are configured "
                                      f"for {self.remote.registry}", hint=AUTH_HINT)
            value = creds.basic()
        elif scheme == "bearer" and params.get("realm"):
            value = "Bearer " + bearer_token(self.remote, params, push, creds, self._plain)
        else:
            raise RemoteAuthError(f"{method} {url}: unsupported authentication scheme {scheme!r}", hint=AUTH_HINT)
        with self._lock:
            self._tokens[push] = value

    def _plain(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Any:
        import urllib3

        try:
            return self.http.request(method, url, body=body, headers=headers)
        except urllib3.exceptions.HTTPError as exc:
            raise self._unreachable(exc, method, url) from None

    # --- blobs ----------------------------------------------------------------------------------------------------
    def blob_url(self, digest: str) -> str:
        """``.../v2/<repository>/blobs/<digest>``."""
        return f"{self.remote.base}/blobs/{digest}"

    def blob_size(self, digest: str) -> int | None:
        """The blob's size (HEAD), or None when absent."""
        response = self.request("HEAD", self.blob_url(digest))
        if response.status == 404:
            return None
        if response.status != 200:
            raise self.fail(response, "HEAD", digest[:23])
        return int(response.headers.get("Content-Length", -1))

    def head(self, path: str) -> dict[str, Any] | None:
        """The shared pull's view: ``{"size": N}`` of the blob at ``blobs/sha256/<hex>``, or None."""
        size = self.blob_size(digest_of(path))
        return None if size is None else {"size": size}

    def check_bucket(self) -> None:
        """Reach the repository once (list its first tags): wrong credentials or a dead registry fail here."""
        next(iter(self.tags()), None)

    def stream_range(self, path: str, start: int, length: int, piece: int) -> Iterator[memoryview]:
        """Bytes ``[start, start+length)`` of the blob at ``blobs/sha256/<hex>`` as they arrive, in pieces of
        *piece* bytes. :raises FileNotFoundError: the blob is gone; :raises RemoteError:"""
        import urllib3

        digest = digest_of(path)
        response = self.request("GET", self.blob_url(digest), stream=True,
                                headers={"Range": f"bytes={start}-{start + length - 1}"})
        complete = False
        try:
            if response.status == 404:
                raise FileNotFoundError(digest)
            if response.status not in (200, 206):
                response.read()
                raise self.fail(response, "GET", digest[:23])
            skip = start if response.status == 200 else 0  # a registry that ignores Range sends the whole blob
            for data in response.stream(piece):
                if skip:
                    cut = min(skip, len(data))
                    data, skip = data[cut:], skip - cut
                if data:
                    yield memoryview(data)
            complete = True
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise RemoteUnreachable(f"GET {self.remote.url} {digest[:23]}: the body broke off ({exc})") from None
        finally:
            _release(response, complete)

    def get_blob(self, digest: str, limit: int) -> bytes | None:
        """A small blob's bytes (at most *limit*), or None when absent. Not verified here: the caller does."""
        response = self.request("GET", self.blob_url(digest), stream=True)
        try:
            if response.status == 404:
                return None
            if response.status != 200:
                response.read()
                raise self.fail(response, "GET", digest[:23])
            data = response.read(limit + 1)
            if len(data) > limit:
                raise RemoteError(f"{self.remote.url} blob {digest[:23]} is more than {limit} bytes")
            return bytes(data)
        finally:
            _release(response, False)

    def upload(self, digest: str, body: bytes | BinaryIO, size: int, *, chunked: bool = False) -> None:
        """Upload a blob (:func:`trtwarm.remote.oci.upload.upload`). :raises RemoteError:"""
        from trtwarm.remote.oci.upload import upload

        upload(self, digest, body, size, chunked=chunked)

    def put_file(self, path: str, file: Path, part_size: int, concurrency: int) -> None:  # noqa: ARG002
        """The shared push's view: upload *file* as the blob at ``blobs/sha256/<hex>`` (streamed, bounded memory)."""
        with open(file, "rb") as handle:
            self.upload(digest_of(path), handle, file.stat().st_size)

    # --- manifests and tags ---------------------------------------------------------------------------------------
    def get_manifest(self, reference: str, accept: str) -> tuple[bytes, str | None] | None:
        """``(bytes, Docker-Content-Digest)`` of the manifest at a tag or digest, or None when absent."""
        response = self.request("GET", f"{self.remote.base}/manifests/{reference}", headers={"Accept": accept},
                                stream=True)
        try:
            if response.status == 404:
                return None
            if response.status != 200:
                response.read()
                raise self.fail(response, "GET", f"manifest {reference[:23]}")
            data = response.read(MANIFEST_LIMIT + 1)
            if len(data) > MANIFEST_LIMIT:
                raise RemoteError(f"{self.remote.url} manifest {reference[:23]} is more than {MANIFEST_LIMIT} bytes")
            return bytes(data), response.headers.get("Docker-Content-Digest")
        finally:
            _release(response, False)

    def put_manifest(self, reference: str, data: bytes, media_type: str) -> Any:
        """PUT a manifest at a tag or digest; the answer is returned for the caller to judge."""
        return self.request("PUT", f"{self.remote.base}/manifests/{reference}", push=True, body=data,
                            headers={"Content-Type": media_type})

    def delete_manifest(self, digest: str) -> None:
        """DELETE the manifest *digest* (every tag on it goes too); absent is fine. :raises RemoteError:"""
        response = self.request("DELETE", f"{self.remote.base}/manifests/{digest}", push=True)
        if response.status in (200, 202, 404):
            return
        error = self.fail(response, "DELETE", f"manifest {digest[:23]}")
        if response.status in (400, 405):
            error.hint = ("the registry does not allow deleting manifests (CNCF Distribution: storage.delete.enabled:"
                          " true; Harbor, ECR: the robot account or role needs delete rights)")
        raise error

    def tags(self) -> Iterator[str]:
        """Every tag of the repository, page by page (none when the repository does not exist yet)."""
        url: str | None = f"{self.remote.base}/tags/list?n=1000"
        while url:
            response = self.request("GET", url)
            if response.status == 404:
                return
            if response.status != 200:
                raise self.fail(response, "GET", "tags/list")
            try:
                doc = strictjson.loads(response.data, limit=MANIFEST_LIMIT)
                tags = doc.get("tags") or []
            except (ValueError, AttributeError):
                raise RemoteError(f"{self.remote.url}: tags/list did not answer a JSON tag list") from None
            yield from (t for t in tags if isinstance(t, str))
            link = response.headers.get("Link", "")
            url = None
            if 'rel="next"' in link and link.startswith("<"):
                url = urljoin(f"{self.remote.scheme}://{self.remote.registry}/", link[1:link.index(">")])


def _release(response: Any, complete: bool) -> None:
    """Give the connection back to the pool, or close it when its body may be unread (a refused oversized answer, a
    range abandoned midway): a connection with bytes left in it would hand them to the next request."""
    remaining = response.length_remaining  # None: a chunked body, whose end is unknown until read
    if not complete and not response.isclosed() and (remaining is None or remaining > 0):
        response.close()  # closing is cheaper than reading what is left
    response.release_conn()


__all__ = ["MANIFEST_LIMIT", "OciClient", "digest_of"]
