"""``trtwarm sidecar``: metrics, readiness and in-use leases for the Pod's engine, for as long as the Pod lives.

Runs as a Kubernetes native sidecar (an init container with ``restartPolicy: Always``, placed before
``trtwarm init``), so it is scraped while the init still waits or builds. Endpoints:

* ``/metrics``: :mod:`trtwarm.sidecar.metrics`, computed at scrape time from a private registry;
* ``/healthz``: 200 while the process serves;
* ``/readyz``: 200 once ``engine.json`` says ready and the engine is there with its recorded size, else 503 with a
  one-line reason. After the first 200 it answers from memory (:class:`~trtwarm.sidecar.metrics.Readiness`): a
  stalled or lost cache volume does not flip a Pod whose server already has its engine.

It listens on every IPv6 and IPv4 address by default (``--bind ::``, dual-stack; IPv4 only where the kernel has no
IPv6), so IPv6-only clusters reach it too.

A background thread keeps this Pod's lease on its entry (``.leases/<key>/...``, every 60 s) and its last-use
marker fresh; SIGTERM removes the lease and exits within a second. Optionally it also runs gc periodically.
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.exposition import choose_encoder

from trtwarm.config import Identity, parse_duration
from trtwarm.errors import LockTimeoutError, UnsafeVolume
from trtwarm.sidecar.metrics import Readiness, VolumeWatcher, registry
from trtwarm.volume import leases as leaselib
from trtwarm.volume.layout import Layout

log = logging.getLogger("trtwarm.sidecar")
POLL_SECONDS = 1.0  # how often the hand-off is read until the engine is ready


@dataclass(frozen=True)
class SidecarSettings:
    """The sidecar's flags, validated."""

    cache_dir: Path
    handoff_dir: Path
    port: int = 9400
    bind: str = "::"
    scan_interval: float = 30.0
    lease_interval: float = leaselib.REFRESH_SECONDS
    gc_interval: float | None = None
    gc_policy: Any = None  # trtwarm.lifecycle.gc.Policy
    lock_mode: str = "auto"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # 200 scrapers connecting at once must not overflow the listen backlog

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:  # "::" also accepts IPv4 (as mapped addresses)
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _listen(bind: str, port: int, handler: type[BaseHTTPRequestHandler]) -> _Server:
    """Bind *bind*:*port*; an address with a ``:`` is IPv6. ``::`` falls back to ``0.0.0.0`` without IPv6."""
    if ":" not in bind:
        return _Server((bind, port), handler)
    server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    try:
        return server_class((bind, port), handler)
    except OSError as exc:
        if bind != "::" or exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
            raise
        log.info("no IPv6 on this host; listening on IPv4 only")
        return _Server(("0.0.0.0", port), handler)


def _handler(routes: Mapping[str, Callable[[str], tuple[int, str, bytes]]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            route = routes.get(self.path.split("?", 1)[0])
            status, ctype, body = route(self.headers.get("Accept", "")) if route else (404, "text/plain",
                                                                                      b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class Sidecar:
    """The HTTP server plus the lease and gc threads; :meth:`run` blocks until :meth:`stop`."""

    def __init__(self, settings: SidecarSettings, identity: Identity) -> None:
        self.s, self.identity = settings, identity
        self.layout = Layout(settings.cache_dir)
        self.volume = VolumeWatcher(self.layout, settings.scan_interval)
        self.readiness = Readiness(settings.handoff_dir, self.volume)
        self.registry, self.collector = registry(settings.handoff_dir, self.volume, self.readiness)
        self.stopping = threading.Event()
        self.lease: Path | None = None
        self._announced = False  # after the first round, leases are refreshed at --lease-interval
        self._lease_state: str | None = None  # "held", "full" or "read-only": logged when it changes
        self._lease_lock = threading.Lock()
        routes = {"/metrics": self._metrics, "/healthz": lambda _a: (200, "text/plain", b"ok\n"),
                  "/readyz": self._readyz}
        self.server = _listen(settings.bind, settings.port, _handler(routes))

    @property
    def port(self) -> int:
        """The bound port (useful with ``--port 0``)."""
        return int(self.server.server_address[1])

    def _metrics(self, accept: str) -> tuple[int, str, bytes]:
        encoder, ctype = choose_encoder(accept)
        return 200, ctype, encoder(self.registry)

    def _readyz(self, _accept: str) -> tuple[int, str, bytes]:
        ready, why, _report = self.readiness.check()
        return (200 if ready else 503), "text/plain", (why + "\n").encode()

    def _keep_lease(self) -> None:
        """Hold this Pod's lease on its entry and refresh its last use; poll quickly until the engine is ready."""
        from trtwarm.volume.store import EngineStore

        while not self.stopping.is_set():
            ready, _why, report = self.readiness.check()
            if ready and report:
                try:
                    with self._lease_lock:  # never after the release in run(), whatever the timing
                        if self.stopping.is_set():
                            return
                        self._announced = True
                        taken = leaselib.take(self.layout, report["key"], report["name"], self.identity)
                        self.lease = taken if isinstance(taken, Path) else None
                    previous, self._lease_state = self._lease_state, taken if isinstance(taken, str) else "held"
                    if self._lease_state != previous and isinstance(taken, str):  # said once, and on each change
                        log.warning("engine %s is ready; %s", report["name"], leaselib.not_taken(taken, report["name"]))
                    elif self._lease_state != previous:
                        log.info("engine %s is ready; holding its in-use lease %s", report["name"], self.lease)
                    EngineStore(self.layout).touch_use(report["key"])
                except OSError as exc:  # keep serving; the next round tries again
                    log.warning("cannot refresh the lease on %s: %s", report.get("name"), exc)
                except UnsafeVolume as exc:  # nothing written through it; said each round until someone fixes it
                    self.volume.errors += 1
                    log.error("cannot refresh the lease on %s: %s", report.get("name"), exc)
            self.stopping.wait(self.s.lease_interval if self._announced else POLL_SECONDS)

    def _gc_loop(self) -> None:
        from trtwarm.lifecycle import gc as gclib
        assert self.s.gc_interval is not None
        while not self.stopping.wait(self.s.gc_interval):
            if self.volume.check_mounted() is not None:  # unmounted: no gc lock is created in the mount point
                continue
            try:
                _plan, done = gclib.run(self.layout, self.s.gc_policy, mode=self.s.lock_mode)
            except LockTimeoutError:
                log.debug("another gc holds the volume's gc lock; skipping this pass")
                continue
            except OSError as exc:
                log.warning("periodic gc failed: %s", exc)
                continue
            except UnsafeVolume as exc:  # refused before anything was deleted; the next pass looks again
                self.volume.errors += 1
                log.error("periodic gc refused: %s", exc)
                continue
            for reason, count in gclib.summarize(done).items():
                self.volume.evictions[reason] += count
            if done:
                log.info("gc removed %d items, %d bytes", len(done), sum(a.bytes for a in done))

    def run(self) -> None:
        """Serve until :meth:`stop`; then release the lease."""
        self.volume.start()
        threads = [threading.Thread(target=self._keep_lease, name="trtwarm-lease", daemon=True)]
        if self.s.gc_interval:
            threads.append(threading.Thread(target=self._gc_loop, name="trtwarm-gc", daemon=True))
        for thread in threads:
            thread.start()
        server = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        server.start()
        log.info("sidecar serving /metrics /healthz /readyz on %s:%d", self.s.bind, self.port)
        self.stopping.wait()
        self.server.shutdown()
        self.server.server_close()
        self.volume.stop()
        with self._lease_lock:
            try:
                leaselib.release(self.lease, self.layout)
            except UnsafeVolume as exc:
                log.error("lease not released: %s", exc)
        log.info("sidecar stopped; lease released")

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler)."""
        self.stopping.set()


def serve(settings: SidecarSettings, identity: Identity) -> int:
    """Run the sidecar until SIGTERM or SIGINT; exit 0."""
    from trtwarm.errors import ConfigError

    if not 0 <= settings.port <= 65535:
        raise ConfigError(f"--port {settings.port} is out of range", hint="choose a TCP port 1-65535 (0: any free "
                          "port), e.g. --port 9400")
    try:
        sidecar = Sidecar(settings, identity)
    except OSError as exc:
        in_use = exc.errno == errno.EADDRINUSE
        raise ConfigError(f"cannot listen on {settings.bind}:{settings.port}: {exc.strerror or exc}",
                          hint="choose another --port, or stop what uses it" if in_use else
                          "--bind must be an address of this host (:: or 0.0.0.0: all, 127.0.0.1: local only)") from exc
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sidecar.stop())
    sidecar.run()
    return 0


def cmd_sidecar(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm sidecar``."""
    from trtwarm.lifecycle import gc as gclib
    policy = gclib.Policy.parse(ns.gc_max_age, ns.gc_max_bytes, ns.gc_keep_per_model, ns.gc_quarantine_grace,
                                prefix="--gc-")
    settings = SidecarSettings(
        cache_dir=Path(ns.cache_dir).absolute(), handoff_dir=Path(ns.handoff_dir).absolute(), port=ns.port,
        bind=ns.bind, scan_interval=parse_duration(ns.scan_interval, "--scan-interval", positive=True),
        lease_interval=parse_duration(ns.lease_interval, "--lease-interval", positive=True),
        gc_interval=parse_duration(ns.gc_interval, "--gc-interval", positive=True) if ns.gc_interval else None,
        gc_policy=policy,
        lock_mode=ns.lock_mode)
    return serve(settings, Identity.from_env(environ))


def add_parser(sub: Any, cache_default: str, handoff_default: str) -> None:
    """Define ``trtwarm sidecar`` on the subparsers action *sub*."""
    p = sub.add_parser("sidecar", help="Prometheus metrics, /readyz and in-use leases for the Pod's engine")
    p.add_argument("--cache-dir", default=cache_default, help="the shared cache volume (%(default)s)")
    p.add_argument("--handoff-dir", default=handoff_default, help="where trtwarm init writes engine.json (%(default)s)")
    p.add_argument("--port", type=int, default=9400, help="HTTP port for /metrics /healthz /readyz (%(default)s)")
    p.add_argument("--bind", default="::", help="address to listen on (%(default)s: every IPv6 and IPv4 address)")
    p.add_argument("--scan-interval", default="30s", help="how often the volume summary is refreshed (%(default)s)")
    p.add_argument("--lease-interval", default="60s", help="how often the in-use lease is refreshed (%(default)s)")
    p.add_argument("--gc-interval", help="run gc this often, e.g. 1h (default: off)")
    p.add_argument("--gc-max-age", help="periodic gc: remove entries unused for longer, e.g. 30d")
    p.add_argument("--gc-max-bytes", help="periodic gc: byte budget, e.g. 100G")
    p.add_argument("--gc-keep-per-model", type=int, help="periodic gc: keep N entries of each model and "
                   "configuration")
    p.add_argument("--gc-quarantine-grace", default="7d", help="periodic gc: keep quarantined entries (%(default)s)")
    p.add_argument("--lock-mode", default="auto", choices=["auto", "flock", "lease"], help="for the gc lock")
    p.add_argument("--log-format", default="text", choices=["text", "json"])
    p.set_defaults(func=cmd_sidecar)


__all__ = ["Sidecar", "SidecarSettings", "add_parser", "cmd_sidecar", "serve"]
