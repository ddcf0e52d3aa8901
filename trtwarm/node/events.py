"""Kubernetes Events on the init's own Pod (``kubectl describe pod`` shows them). Optional: ``trtwarm[kubernetes]``.

Enabled when ``POD_NAME`` and ``POD_NAMESPACE`` are set (the downward API), a configuration is there (inside a
cluster the service-account token, which the chart mounts only with ``rbac.events``; else ``KUBECONFIG`` or
``~/.kube/config``) and the ``kubernetes`` package is installed: without a token nothing is imported (the client
costs ~0.5 s of CPU) and nothing is said, since Events were not asked for. Events are sent from a
background thread, started (and the client imported) as soon as the recorder exists, so that work overlaps the
init's; :meth:`EventRecorder.close` waits for the queue at most ``timeout`` seconds and logs what it drops. Any
failure (no RBAC, unreachable API server) is logged once and disables further events: it never fails the init.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from trtwarm.config import Identity
from trtwarm.node.podenv import events_configured

log = logging.getLogger("trtwarm.node.events")
REQUEST_TIMEOUT = 2.0
REASONS = ("EngineCacheHit", "WaitingForEngineBuild", "EngineBuilt", "EngineQuarantined", "EngineBuildFailed")


def event_body(identity: Identity, reason: str, message: str, kind: str, uid: str | None) -> dict[str, Any]:
    """A ``core/v1`` Event about the Pod *identity* names."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{identity.pod}.{time.time_ns():x}", "namespace": identity.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": identity.pod,
                               "namespace": identity.namespace, **({"uid": uid} if uid else {})},
            "reason": reason, "message": message[:1024], "type": kind, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "trtwarm", "host": identity.node},
            "reportingComponent": "trtwarm", "reportingInstance": identity.node or identity.hostname}


class EventRecorder:
    """Queue Events for the Pod; a no-op when disabled."""

    def __init__(self, identity: Identity, environ: Mapping[str, str]) -> None:
        self.identity, self.uid = identity, environ.get("POD_UID") or None
        self._environ = dict(environ)
        self.enabled = events_configured(environ) and importlib.util.find_spec("kubernetes") is not None
        self._queue: Any = None  # a queue.Queue of Event bodies, None-terminated; imported only where Events go
        self._thread: threading.Thread | None = None
        self._queued = False
        self._warn_lock = threading.Lock()
        if self.enabled:  # importing the client and reading its config take ~0.5 s of CPU: do it alongside the init
            import queue

            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._send_all, name="trtwarm-events", daemon=True)
            self._thread.start()

    def emit(self, reason: str, message: str, kind: str = "Normal") -> None:
        """Queue one Event (``kind``: ``Normal`` or ``Warning``)."""
        if self.enabled:
            self._queued = True
            self._queue.put(event_body(self.identity, reason, message, kind, self.uid))

    def close(self, timeout: float = REQUEST_TIMEOUT) -> None:
        """Wait up to *timeout* seconds for queued Events to be sent; the rest are dropped, with one log line."""
        if self._thread is None or not self._queued:  # nothing to send: don't wait for the client to load
            return
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._disable("Kubernetes events not sent within %.0f s were dropped (API server slow, or CPU starved); "
                          "the init's result is unaffected", timeout)

    def _disable(self, message: str, *args: Any) -> None:
        """Stop sending and log *message*, once: the sender's failure and close's timeout may race."""
        with self._warn_lock:
            if self.enabled:
                self.enabled = False
                log.warning(message, *args)

    def _api(self) -> Any:
        from kubernetes import client, config

        if self._environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=self._environ.get("KUBECONFIG"))
        return client.CoreV1Api()

    def _send_all(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
        from urllib3.exceptions import HTTPError

        try:
            api = self._api()
            while (body := self._queue.get()) is not None:
                api.create_namespaced_event(self.identity.namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, ConfigException, HTTPError, OSError, ValueError) as exc:
            self._disable("cannot record Kubernetes events (%s); continuing without them (grant `create` on "
                          "`events` to the Pod's service account to see them in `kubectl describe pod`)",
                          _short(exc))


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:200]


__all__ = ["REASONS", "EventRecorder", "event_body"]
