"""A thin OCI registry client on trtwarm's transport (:mod:`trtwarm.transport`): the distribution-spec requests
trtwarm needs, authenticated, with failures classified into trtwarm's typed errors.

The transport owns every bound (timeouts, the rate floor, retries and ``Retry-After``, redirects, the process's
memory of a dead registry, stopping on SIGTERM) and binds the registry's credentials to the registry's origin: a
redirect (a registry sending blob GETs to its storage), an upload ``Location`` or a ``Link`` on another origin never
gets them, and only the registry's own 401 is answered (:mod:`trtwarm.remote.oci.auth`, :mod:`.token`). Every body
is read under a cap (manifests, tag pages, tokens, errors). Failures: 401/403 → :class:`RemoteAuthError` (exit 11),
no answer → :class:`RemoteUnreachable` (13), anything else → :class:`RemoteError` (10), each with the registry's
error code and never a credential.

The path interface the shared pull and push use (``head``, ``stream_range``, ``put_file``) takes the S3 layout's
``blobs/sha256/<hex>`` paths and maps them to ``/v2/<repository>/blobs/sha256:<hex>``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from trtwarm.errors import RemoteAuthError, RemoteError, RemoteUnreachable
from trtwarm.remote.oci.auth import Credentials, load_credentials, parse_challenge
from trtwarm.remote.oci.failures import AUTH_HINT, failure, unreachable_hint
from trtwarm.remote.oci.token import bearer_token
from trtwarm.remote.oci.url import OciURL
from trtwarm.transport.answer import Answer, Refused
from trtwarm.transport.http import HttpClient
from trtwarm.transport.limits import MAX_PAGES, PAGE_LIMIT
from trtwarm.transport.origin import origin_of, resolve

MANIFEST_LIMIT = 4 << 20


def digest_of(path: str) -> str:
    """``sha256:<hex>`` of the S3 layout path ``blobs/sha256/<hex>``. :raises ValueError: another path"""
    parts = path.split("/")
    if len(parts) != 3 or parts[:2] != ["blobs", "sha256"]:
        raise ValueError(f"not a blob path: {path}")
    return f"sha256:{parts[2]}"


class _RegistryAuth:
    """The registry's credentials, for its own origin only (:class:`trtwarm.transport.http.Auth`)."""

    def __init__(self, client: OciClient, push: bool) -> None:
        self.client, self.push, self.origin = client, push, client.origin

    def header(self) -> str | None:
        tokens = self.client._tokens
        return tokens.get(self.push) or tokens.get(True)

    def challenge(self, answer: Answer) -> bool:
        self.client._answer(answer.header("WWW-Authenticate") or "", self.push, answer)
        return True


class OciClient:
    """One repository of one registry; thread-safe (the transport's pool, tokens cached under a lock)."""

    def __init__(self, remote: OciURL) -> None:
        self.remote = remote
        self.name = remote.describe()
        self.origin = origin_of(f"{remote.scheme}://{remote.registry}/")
        self._http: HttpClient | None = None
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
    def http(self) -> HttpClient:
        """The transport, built on first use."""
        if self._http is None:
            self._http = HttpClient(self.remote.limits, progress=self.remote.progress,
                                    pool=self.remote.concurrency + 4)
        return self._http

    # --- requests -------------------------------------------------------------------------------------------------
    def request(self, method: str, url: str, *, push: bool = False, headers: dict[str, str] | None = None,
                body: bytes | BinaryIO | None = None, size: int | None = None, what: str = "") -> Answer:
        """One request, authenticated on the registry's origin (a 401 there is answered once).
        :raises RemoteUnreachable, RemoteAuthError, Refused, ConfigError:"""
        try:
            return self.http.request(method, url, headers=headers, body=body, size=size,
                                     auth=_RegistryAuth(self, push), name=self.name,
                                     what=what or f"{method} {url.removeprefix(self.remote.base + '/')[:80]}")
        except RemoteUnreachable as exc:
            exc.hint = exc.hint or unreachable_hint(self.remote, exc)
            raise

    def fail(self, answer: Answer, op: str, what: str) -> RemoteError:
        """The typed error of an unexpected answer (its body read up to the error cap), scrubbed of the credentials
        this client used (never loaded for it: a failing credential helper must not replace a registry's 5xx)."""
        used = self._credentials if self._credentials is not False else None
        return failure(self.remote, used, answer, op, what)

    def _answer(self, challenge: str, push: bool, answer: Answer) -> None:
        """Get an ``Authorization`` value for the registry's *challenge*. :raises RemoteAuthError: no way to"""
        where = f"{answer.url[:160]}"
        try:
            scheme, params = parse_challenge(challenge)
        except ValueError:
            raise RemoteAuthError(f"{where}: the registry asks for credentials with an unreadable challenge "
                                  f"{challenge[:80]!r}", hint=AUTH_HINT) from None
        creds = self.credentials
        if scheme == "basic":
            if creds is None or not creds.username:
                raise RemoteAuthError(f"{where}: the registry asks for credentials and none are configured for "
                                      f"{self.remote.registry}", hint=AUTH_HINT)
            value = creds.basic()
        elif scheme == "bearer" and params.get("realm"):
            value = "Bearer " + bearer_token(self.remote, params, push, creds, self._plain)
        else:
            raise RemoteAuthError(f"{where}: unsupported authentication scheme {scheme!r}", hint=AUTH_HINT)
        with self._lock:
            self._tokens[push] = value

    def _plain(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        """A request without the registry's credentials (to its token service)."""
        return self.http.request(method, url, body=body, headers=headers, what=f"{method} a token",
                                 name=str(origin_of(url)))

    # --- blobs ----------------------------------------------------------------------------------------------------
    def blob_url(self, digest: str) -> str:
        """``.../v2/<repository>/blobs/<digest>``."""
        return f"{self.remote.base}/blobs/{digest}"

    def blob_size(self, digest: str) -> int | None:
        """The blob's size (HEAD), or None when absent."""
        with self.request("HEAD", self.blob_url(digest)) as answer:
            if answer.status == 404:
                return None
            if answer.status != 200:
                raise self.fail(answer, "HEAD", digest[:23])
            length = answer.header("Content-Length") or ""
            if not length.strip().isdigit():
                raise Refused(f"HEAD {self.remote.url} {digest[:23]}: no usable Content-Length ({length[:40]!r})")
            return int(length)

    def head(self, path: str) -> dict[str, Any] | None:
        """The shared pull's view: ``{"size": N}`` of the blob at ``blobs/sha256/<hex>``, or None."""
        size = self.blob_size(digest_of(path))
        return None if size is None else {"size": size}

    def check_bucket(self) -> None:
        """Reach the repository once (list its first tags): wrong credentials or a dead registry fail here."""
        next(iter(self.tags()), None)

    def stream_range(self, path: str, start: int, length: int, piece: int) -> Iterator[memoryview]:
        """Bytes ``[start, start+length)`` of the blob at ``blobs/sha256/<hex>`` as they arrive, in pieces of at
        most *piece* bytes. :raises FileNotFoundError: the blob is gone; :raises RemoteError:"""
        digest = digest_of(path)
        with self.request("GET", self.blob_url(digest), headers={"Range": f"bytes={start}-{start + length - 1}"},
                          what=f"GET {digest[:23]} at {start}") as answer:
            if answer.status == 404:
                raise FileNotFoundError(digest)
            if answer.status not in (200, 206):
                raise self.fail(answer, "GET", digest[:23])
            skip = start if answer.status == 200 else 0  # a registry that ignores Range sends the whole blob
            for data in answer.stream(piece, f"GET {self.remote.url} {digest[:23]}"):
                if skip:
                    cut = min(skip, len(data))
                    data, skip = data[cut:], skip - cut
                if data:
                    yield data

    def get_blob(self, digest: str, limit: int) -> bytes | None:
        """A small blob's bytes (at most *limit*), or None when absent. Not verified here: the caller does."""
        with self.request("GET", self.blob_url(digest)) as answer:
            if answer.status == 404:
                return None
            if answer.status != 200:
                raise self.fail(answer, "GET", digest[:23])
            return answer.read(limit, f"GET {self.remote.url} blob {digest[:23]}")

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
        with self.request("GET", f"{self.remote.base}/manifests/{reference}", headers={"Accept": accept},
                          what=f"GET manifests/{reference[:23]}") as answer:
            if answer.status == 404:
                return None
            if answer.status != 200:
                raise self.fail(answer, "GET", f"manifest {reference[:23]}")
            return answer.read(MANIFEST_LIMIT, f"GET {self.remote.url} manifest {reference[:23]}"), \
                answer.header("Docker-Content-Digest")

    def put_manifest(self, reference: str, data: bytes, media_type: str) -> Answer:
        """PUT a manifest at a tag or digest; the answer (its body read up to the error cap, the connection
        released) is returned for the caller to judge."""
        answer = self.request("PUT", f"{self.remote.base}/manifests/{reference}", push=True, body=data,
                              headers={"Content-Type": media_type}, what=f"PUT manifests/{reference[:23]}")
        answer.excerpt()
        return answer

    def delete_manifest(self, digest: str) -> None:
        """DELETE the manifest *digest* (every tag on it goes too); absent is fine. :raises RemoteError:"""
        with self.request("DELETE", f"{self.remote.base}/manifests/{digest}", push=True) as answer:
            if answer.status in (200, 202, 404):
                return
            error = self.fail(answer, "DELETE", f"manifest {digest[:23]}")
            if answer.status in (400, 405):
                error.hint = ("the registry does not allow deleting manifests (CNCF Distribution: "
                              "storage.delete.enabled: true; Harbor, ECR: the robot account or role needs delete "
                              "rights)")
            raise error

    def tags(self) -> Iterator[str]:
        """Every tag of the repository, page by page (none when the repository does not exist yet). A page is read
        under :data:`~trtwarm.transport.limits.PAGE_LIMIT`; a ``Link`` to another origin, one seen before (a loop)
        or more than :data:`~trtwarm.transport.limits.MAX_PAGES` pages are refused. :raises RemoteError:"""
        url: str | None = f"{self.remote.base}/tags/list?n=1000"
        seen: set[str] = set()
        while url:
            if url in seen or len(seen) >= MAX_PAGES:
                raise Refused(f"{self.remote.url}: tags/list pages loop back to {url[:160]} (or exceed {MAX_PAGES} "
                              "pages): refused")
            seen.add(url)
            with self.request("GET", url, what="GET tags/list") as answer:
                if answer.status == 404:
                    return
                if answer.status != 200:
                    raise self.fail(answer, "GET", "tags/list")
                doc = answer.json(PAGE_LIMIT, f"GET {self.remote.url} tags/list")
                link = answer.header("Link") or ""
            tags = doc.get("tags") if isinstance(doc, dict) else None
            if not isinstance(tags, list) and tags is not None:
                raise Refused(f"{self.remote.url}: tags/list did not answer a JSON tag list")
            yield from (t for t in tags or [] if isinstance(t, str))
            url = self._next_page(url, link)

    def _next_page(self, url: str, link: str) -> str | None:
        """The ``rel="next"`` URL of a tags/list ``Link`` header, on the registry's origin. :raises Refused:"""
        if 'rel="next"' not in link or not link.lstrip().startswith("<") or ">" not in link:
            return None
        try:
            nxt = resolve(url, link.lstrip()[1:link.lstrip().index(">")])
        except ValueError as exc:
            raise Refused(f"{self.remote.url}: tags/list names a next page that is {exc}") from None
        if origin_of(nxt) != self.origin:
            raise Refused(f"{self.remote.url}: tags/list names its next page on another origin ({origin_of(nxt)}): "
                          "refused (the registry's credentials stay with the registry)")
        return nxt


__all__ = ["MANIFEST_LIMIT", "OciClient", "digest_of"]
