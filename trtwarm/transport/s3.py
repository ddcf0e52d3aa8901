"""obstore (``pip install 'trtwarm[s3]'``; the Rust object_store crate) under the transport contract: one bucket and
prefix, every request through the :mod:`.gate`, every call stoppable.

* **Through the gate.** The S3Store is built with ``proxy_url`` set to this store's gate and an ``http://`` endpoint
  (the gate speaks TLS to an ``https`` store), so every answer obstore reads was bounded and capped by the gate
  first. obstore keeps its own retries (connection errors, timeouts and 5xx, exponential backoff from 200 ms to
  :data:`~trtwarm.transport.limits.MAX_BACKOFF`, none after ``retry_timeout``; it ignores ``Retry-After``) and its
  own ``timeout`` (one attempt, whole) as a backstop above the gate's.
* **Stoppable.** A call from the main thread runs in a daemon thread the main thread waits for, so SIGTERM is seen at
  once (obstore's call blocks in Rust, where no Python signal handler runs); the stop makes the gate cut every
  connection and answer every retry with a refusal, so the abandoned call ends too.
* **A listing** must name each key once, in increasing order (S3 lists in UTF-8 binary order): a page that repeats
  (a continuation token the store sends again) is refused, as is one over the gate's page caps.
* **The breaker** (:mod:`.breaker`): a store that did not answer is skipped for the rest of the process.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError, RemoteError, RemoteUnreachable
from trtwarm.transport import breaker, stop, waits
from trtwarm.transport.answer import Refused
from trtwarm.transport.gate import Gate, Upgrade
from trtwarm.transport.limits import MAX_BACKOFF, TICK
from trtwarm.transport.listing import KeyOrder
from trtwarm.transport.http import HttpClient
from trtwarm.transport.origin import origin_of, target_of
from trtwarm.transport.s3errors import classify, short, status_error

#: credential services obstore reaches itself (instance metadata, ECS, STS): not through the gate
_DIRECT = "169.254.169.254,169.254.170.2,fd00:ec2::254,sts.amazonaws.com"


class ObjectStore:
    """One bucket and prefix (*remote*: a :class:`trtwarm.remote.url.RemoteURL`: ``bucket``, ``prefix``,
    ``endpoint``, ``aws``, ``allow_http``, ``limits``, ``progress``, ``describe()``); paths are relative to the
    prefix. *redact* removes the credentials from a message."""

    def __init__(self, remote: Any, redact: Callable[[str], str]) -> None:
        self.remote, self.redact = remote, redact
        self.name = remote.describe()
        self._store: Any = None
        self._gate: Gate | None = None
        self._http: HttpClient | None = None
        self._lock = threading.Lock()

    # --- the obstore client ------------------------------------------------------------------------------------------
    @property
    def store(self) -> Any:
        """The S3Store, built on first use. :raises ConfigError: obstore is missing, or a bad AWS setting"""
        with self._lock:
            if self._store is None:
                S3Store = _obstore().store.S3Store  # noqa: N806 (a class)
                try:
                    self._store = self._make(S3Store)
                except (ValueError, TypeError, RuntimeError, Exception) as exc:  # noqa: BLE001 (obstore's own)
                    raise ConfigError(f"cannot configure the S3 client for {self.name}: "
                                      f"{self.redact(str(exc)).splitlines()[0]}",
                                      hint="check the AWS_* variables (endpoint URL, region)") from None
            return self._store

    def _make(self, S3Store: Any) -> Any:  # noqa: N803 (the class, imported lazily)
        r, limits = self.remote, self.remote.limits
        config = {k.lower(): v for k, v in r.aws.items() if not k.startswith("AWS_ENDPOINT")}
        region = r.aws.get("AWS_REGION") or r.aws.get("AWS_DEFAULT_REGION") or "us-east-1"
        config.setdefault("aws_region", region)
        config.pop("aws_default_region", None)
        seen, upgrade = _route(r.endpoint, r.bucket, region, r.aws)
        config["aws_endpoint"] = seen
        self._gate = Gate(limits, upgrade)
        self._deadlines = _Deadlines(self._gate)
        self._http = HttpClient(limits, progress=r.progress, pool=r.concurrency + 4)
        retry = {"max_retries": limits.retries, "retry_timeout": datetime.timedelta(seconds=limits.retry_timeout),
                 "backoff": {"init_backoff": datetime.timedelta(milliseconds=200),
                             "max_backoff": datetime.timedelta(seconds=MAX_BACKOFF), "base": 2.0}}
        backstop = f"{limits.timeout + 2 * limits.read_timeout:.3f}s"  # the gate decides first; this only if it hangs
        return S3Store(r.bucket, prefix=r.prefix or None, config=config, retry_config=retry,
                       client_options={"allow_http": True, "proxy_url": self._gate.url, "proxy_excludes": _DIRECT,
                                       "timeout": backstop, "read_timeout": backstop,
                                       "connect_timeout": f"{limits.connect_timeout + 1:.3f}s"})

    # --- one call ----------------------------------------------------------------------------------------------------
    def call(self, op: str, path: str, fn: Callable[..., Any], *args: Any,
             passing: tuple[type[BaseException], ...] = (), **kwargs: Any) -> Any:
        """``fn(store, path, *args, **kwargs)``: skipped at once when the store is down, named in the log while it
        waits, its failure typed (FileNotFoundError and *passing* go through); a store that did not answer is
        skipped for the rest of this process. :raises RemoteError, ConfigError, Interrupted:"""
        store = self.store
        breaker.check(self.name)
        started = time.monotonic()
        try:
            with waits.waiting(self.name, f"{op} {path}", self.remote.limits.budget, self.remote.progress), \
                    self._deadlines.within(self.remote.limits.ceiling, f"{op} {path}"):
                return _off_main(fn, store, path, *args, **kwargs)
        except (FileNotFoundError, *passing):
            raise
        except (ConfigError, RemoteError):
            raise
        except Exception as exc:  # noqa: BLE001 (obstore's errors have no common public base besides Exception)
            stop.check()
            assert self._gate is not None
            verdict = self._gate.verdict_since(started)
            error = classify(exc, f"{op} {self.remote.url}/{path}", self.remote, verdict, self.redact)
            if isinstance(error, RemoteUnreachable):
                breaker.trip(self.name, verdict.reason if verdict is not None else short(self.redact(str(exc))))
            raise error from None

    # --- the operations -----------------------------------------------------------------------------------------------
    def head(self, path: str) -> dict[str, Any]:
        """The object's metadata (``size``, ``e_tag``, ``last_modified``). :raises FileNotFoundError:"""
        obstore = _obstore()

        return dict(self.call("HEAD", path, obstore.head))

    def get(self, path: str, limit: int) -> bytes:
        """A small object's bytes (at most *limit*). :raises FileNotFoundError:; :raises RemoteError: larger"""
        obstore = _obstore()

        result = self.call("GET", path, obstore.get)
        if result.meta["size"] > limit:
            raise Refused(f"{self.remote.url}/{path} is {result.meta['size']} bytes, more than {limit}")
        return bytes(self.call("GET", path, lambda _s, _p: result.bytes()))

    def stream_range(self, path: str, start: int, length: int, piece: int) -> Iterator[memoryview]:
        """Bytes ``[start, start+length)`` of *path* as they arrive, in pieces of at most *piece* bytes (each valid
        until the next is asked for). The bulk of a pull: a URL obstore presigns, fetched by the transport's own
        client straight from the store (no hop through the gate; measured cheaper than obstore's own stream).
        :raises FileNotFoundError:, RemoteError:"""
        obstore = _obstore()

        url = self._real(self.call("SIGN", path, lambda s, p: obstore.sign(s, "GET", p, datetime.timedelta(hours=1))))
        what = f"GET {self.remote.url}/{path} at {start}"
        with self.http.request("GET", url, headers={"Range": f"bytes={start}-{start + length - 1}"}, what=what,
                               name=self.name, peer=self.name, redirects=False) as answer:
            if answer.status == 404:
                raise FileNotFoundError(path)
            if answer.status not in (200, 206):
                raise status_error(answer, what)
            skip = start if answer.status == 200 else 0  # a store that ignores Range sends the whole object
            for data in answer.stream(piece, what):
                if skip:
                    cut = min(skip, len(data))
                    data, skip = data[cut:], skip - cut
                if data:
                    yield data

    @property
    def http(self) -> HttpClient:
        """The transport's client for presigned requests (built with the store)."""
        self.store  # noqa: B018 (builds the gate and the client)
        assert self._http is not None
        return self._http

    def _real(self, signed: str) -> str:
        """A URL obstore signed for its ``http://`` endpoint, pointed at the store itself (TLS where it speaks it;
        the signature covers host, path and query, not the scheme)."""
        assert self._gate is not None
        upgrade = self._gate.upgrade
        real = upgrade.target(origin_of(signed)) if upgrade is not None else None
        return signed if real is None else f"https://{real.netloc}{target_of(signed)}"

    def put_create(self, path: str, data: bytes) -> bool:
        """Create *path* only if absent (``If-None-Match: *``). :return: True if this call created it"""
        obstore = _obstore()
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            self.call("PUT", path, obstore.put, data, mode="create", passing=(AlreadyExistsError, PreconditionError))
            return True
        except (AlreadyExistsError, PreconditionError):
            return False

    def put(self, path: str, data: bytes) -> None:
        """Write *path* unconditionally (small objects, one PUT)."""
        obstore = _obstore()

        self.call("PUT", path, obstore.put, data, use_multipart=False)

    def put_file(self, path: str, file: Path, part_size: int, concurrency: int) -> None:
        """Upload *file* with parallel multipart (bounded memory: about *concurrency* × *part_size*)."""
        obstore = _obstore()

        with open(file, "rb") as handle:
            self.call("PUT", path, obstore.put, handle, chunk_size=part_size, max_concurrency=concurrency)

    def list(self, prefix: str, chunk: int | None = None) -> Iterator[dict[str, Any]]:
        """Every object under *prefix*, in increasing key order. :raises Refused: a key repeated or out of order
        (the store sends a page again), or more pages than :data:`~trtwarm.transport.limits.MAX_PAGES` hold"""
        obstore = _obstore()

        stream = self.call("LIST", prefix, lambda s, p: iter(obstore.list(s, prefix=p, chunk_size=chunk or 1000)))
        order = KeyOrder(f"LIST {self.remote.url}/{prefix}")
        while True:
            page = self.call("LIST", prefix, lambda _s, _p: next(stream, None))
            if page is None:
                return
            for meta in page:
                order.see(str(meta["path"]))
                yield dict(meta)

    def delete(self, path: str) -> None:
        """Delete *path*. :raises FileNotFoundError: absent (on stores that say so)"""
        obstore = _obstore()

        self.call("DELETE", path, obstore.delete)


def _obstore() -> Any:
    """The ``obstore`` module (and its ``store`` submodule). :raises ConfigError: not installed (the ``s3`` extra)"""
    try:
        import obstore
        import obstore.store  # noqa: F401 (``obstore.store.S3Store``)
    except ImportError:
        raise ConfigError("--remote s3:// needs the obstore package, which is not installed",
                          hint="pip install 'trtwarm[s3]' (or use an oci:// registry, which needs no extra)") from None
    return obstore


class _Deadlines:
    """Calls that must end by a time (a pull-only init's ``--lock-timeout``, which obstore's retries know nothing
    of): when one is past it, the store is given up (:meth:`Gate.expire`), and the call ends at once."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.due: dict[int, tuple[float, float, str]] = {}
        self.ids = itertools.count()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def within(self, seconds: float, what: str) -> Iterator[None]:
        if not math.isfinite(seconds):
            yield
            return
        ident = next(self.ids)
        with self.lock:
            self.due[ident] = (time.monotonic() + seconds, seconds, what)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="trtwarm-s3-deadlines", daemon=True)
                self.thread.start()
        try:
            yield
        finally:
            with self.lock:
                self.due.pop(ident, None)

    def _run(self) -> None:
        while not self.gate.expired:
            time.sleep(TICK)
            now = time.monotonic()
            with self.lock:
                late = [(seconds, what) for when, seconds, what in self.due.values() if now > when]
            if late:
                seconds, what = late[0]
                self.gate.expire(f"{what} ran past its {seconds:g} s (--lock-timeout): the store is given up")


def _route(endpoint: str | None, bucket: str, region: str, aws: Any) -> tuple[str, Upgrade | None]:
    """The ``http://`` endpoint obstore is given, and how the gate reaches the real one (TLS where it speaks it)."""
    if endpoint is None:
        virtual = str(aws.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "")).lower() in ("1", "true", "yes", "on")
        endpoint = f"https://{bucket}.s3.{region}.amazonaws.com" if virtual else f"https://s3.{region}.amazonaws.com"
    origin = origin_of(endpoint)
    rest = endpoint.split("://", 1)[1]
    if origin.scheme == "http":
        return endpoint, None
    explicit = origin.port != 443 or ":443" in rest.split("/", 1)[0]
    seen = origin.port if explicit else 80
    return "http://" + rest, Upgrade(origin.host, seen, origin.port)


def _off_main(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; from the main thread, in a daemon thread waited for in ticks, so a signal handler
    runs at once (a call blocked in Rust would hold it off). :raises Interrupted: a stop while it waits"""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, fn(*args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread as it is)
            outcome.append((False, exc))
        done.set()

    threading.Thread(target=run, name="trtwarm-s3-call", daemon=True).start()
    while not done.wait(0.2):
        stop.check()
    ok, value = outcome[0]
    if ok:
        return value
    raise value


__all__ = ["ObjectStore"]
