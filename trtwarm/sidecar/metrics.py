"""Prometheus metrics of one Pod's init and of the cache volume, computed at scrape time.

A custom collector on a private registry (no global registry, no multiprocess mode): every scrape reads the
hand-off ``engine.json`` (tiny) and the latest volume snapshot, which :class:`VolumeWatcher` refreshes in the
background, so a scrape never walks the volume and stays fast with 10,000 entries.

Every labelled series exists from the first scrape at 0, so ``increase()`` sees the first init. Names carry
base units; histograms hold one observation per Pod, so fleet quantiles come from summing buckets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from trtwarm.errors import UnsafeVolume
from trtwarm.init import handoff
from trtwarm.lifecycle.gc import REASONS
from trtwarm.sidecar.readiness import Readiness, engine_ready
from trtwarm.volume.layout import Layout

log = logging.getLogger("trtwarm.metrics")
RESULTS = ("hit", "built", "waited", "pulled", "error")
#: error kinds of the remote repository (trtwarm.remote.client.KINDS; listed here so the sidecar needs no obstore)
REMOTE_ERROR_KINDS = ("auth", "bucket", "unreachable", "server", "integrity", "trust", "conflict")
#: 10 ms to 1 h: a hit's verify is milliseconds, a TensorRT build with INT8 calibration can take most of an hour
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
_HISTOGRAMS = (  # (metric, engine.json seconds field, results that observe it, help)
    ("trtwarm_init_duration_seconds", "total", ("hit", "built", "waited", "pulled"),
     "Time trtwarm init took, end to end."),
    ("trtwarm_build_duration_seconds", "build", ("built",), "Time the engine build took (only the Pod that built)."),
    ("trtwarm_lock_wait_seconds", "wait", ("built", "waited"), "Time spent waiting for the key's build lock."),
    ("trtwarm_verify_duration_seconds", "verify", ("hit", "built", "waited", "pulled"),
     "Time spent verifying the engine (digest, and a load with --verify load)."),
)


class VolumeWatcher:
    """Keeps a fresh summary of the cache volume (one :func:`trtwarm.lifecycle.inventory.scan` per *interval*)."""

    def __init__(self, layout: Layout, interval: float = 30.0) -> None:
        self.layout, self.interval = layout, interval
        self.summary: dict[str, float] | None = None
        self.errors = 0
        #: why the cache dir is unusable (missing, unmounted, not a trtwarm cache), or None: it is one
        self.problem: str | None = None
        self.evictions = dict.fromkeys(REASONS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trtwarm-volume-scan", daemon=True)

    def start(self) -> VolumeWatcher:
        """Scan now and then every *interval* seconds, in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background scans."""
        self._stop.set()

    def refresh(self) -> None:
        """Scan once; an unreadable volume counts an error and keeps the previous summary. A missing cache dir, or one
        that is not a trtwarm cache (an unmounted volume), is not "0 entries": it counts an error, drops the summary,
        sets :attr:`problem` and logs once (and once again when it is back)."""
        from trtwarm.lifecycle.inventory import scan

        if self.check_mounted() is not None:
            self.errors += 1
            self.summary = None
            return
        try:
            inv = scan(self.layout, manifests=False)
        except OSError as exc:
            self.errors += 1
            log.warning("cannot scan the cache volume %s: %s", self.layout.root, exc)
            return
        except UnsafeVolume as exc:  # a link where trtwarm's directory belongs: not listed through
            self.errors += 1
            log.error("cannot scan the cache volume %s: %s", self.layout.root, exc)
            return
        uses = [e.last_used for e in inv.entries if e.last_used]
        self.summary = {"entries": len(inv.entries), "bytes": sum(e.bytes for e in inv.entries),
                        "quarantined": len(inv.quarantined), "building": len(inv.building),
                        "oldest_use_age": inv.now - min(uses) if uses else 0.0}

    def check_mounted(self) -> str | None:
        """Whether the cache dir is a trtwarm cache now (a ``stat`` and the ``VERSION`` file): update and return
        :attr:`problem`; log when it changes."""
        from trtwarm.errors import VolumeError

        try:
            self.layout.require()
        except VolumeError as exc:
            if self.problem is None:  # once, and again after it was back (a Pod's init creates a new cache)
                log.warning("%s: /readyz says not ready, trtwarm_cache_volume_available is 0 (%s)", exc.message,
                            exc.hint)
            self.problem = exc.message
            return self.problem
        except UnsafeVolume:
            pass  # mounted, but with a link where trtwarm's own directory belongs: the scan and gc refuse, and say so
        if self.problem is not None:
            log.info("the cache volume %s is usable again", self.layout.root)
            self.problem = None
        return None

    def _run(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(self.interval):
                return


class TrtwarmCollector(Collector):
    """Scrape-time metrics for one Pod: its init outcome and engine, plus the volume's summary."""

    def __init__(self, handoff_dir: Path, volume: VolumeWatcher | None, readiness: Readiness | None = None) -> None:
        self.handoff_dir, self.volume = handoff_dir, volume
        self.readiness = readiness or Readiness(handoff_dir)
        self.scrape_errors = 0

    def collect(self) -> Iterator[Metric]:
        """Yield every family; never raises (a failure counts in ``trtwarm_exporter_scrape_errors_total``)."""
        try:
            ready, _why, ready_report = self.readiness.check()
            report = ready_report if ready else handoff.read(self.handoff_dir)
            yield from self._init(report)
            yield from self._engine(report, ready)
        except (OSError, ValueError, TypeError, AttributeError) as exc:  # a hand-off of the wrong shape
            self.scrape_errors += 1
            log.warning("collecting the init metrics failed: %s", exc)
        if self.volume is not None:
            yield from self._volume(self.volume)
        errors = self.scrape_errors + (self.volume.errors if self.volume else 0)
        yield CounterMetricFamily("trtwarm_exporter_scrape_errors", "Errors while collecting metrics (an "
                                  "unreadable volume, a broken hand-off).", value=errors)

    def _init(self, report: dict[str, Any] | None) -> Iterator[Metric]:
        result = report.get("result") if report else None
        total = CounterMetricFamily("trtwarm_init", "This Pod's trtwarm init outcome (0 or 1 per result).",
                                    labels=["result"])
        for name in RESULTS:
            total.add_metric([name], 1.0 if result == name else 0.0)
        yield total
        seconds = report.get("seconds") if report and isinstance(report.get("seconds"), dict) else {}
        for metric, field, results, text in _HISTOGRAMS:
            value = seconds.get(field) if result in results else None
            yield _one_observation(metric, text, value if isinstance(value, (int, float)) else None)
        yield from _remote(report.get("remote") if report and isinstance(report.get("remote"), dict) else {})

    def _engine(self, report: dict[str, Any] | None, ready: bool) -> Iterator[Metric]:
        yield GaugeMetricFamily("trtwarm_engine_ready", "1 once the engine is verified and handed over.",
                                value=1.0 if ready else 0.0)
        yield GaugeMetricFamily("trtwarm_engine_size_bytes", "Size of this Pod's engine file.",
                                value=float(report.get("engine_bytes") or 0) if ready and report else 0.0)
        info = GaugeMetricFamily("trtwarm_engine_info", "The engine this Pod runs.",
                                 labels=["key", "name", "builder", "builder_version", "device", "precision"])
        if ready and report:
            builder, device = report.get("builder") or {}, report.get("device") or {}
            from trtwarm.node.device import short_name

            info.add_metric([str(report.get("key", ""))[:16], str(report.get("name", "")), str(builder.get("name", "")),
                             str(builder.get("version", "")), short_name(device), str(report.get("precision", ""))],
                            1.0)
        yield info

    def _volume(self, volume: VolumeWatcher) -> Iterator[Metric]:
        evictions = CounterMetricFamily("trtwarm_cache_evictions", "Entries removed by this sidecar's periodic gc.",
                                        labels=["reason"])
        for reason, count in volume.evictions.items():
            evictions.add_metric([reason], float(count))
        yield evictions
        yield GaugeMetricFamily("trtwarm_cache_volume_available", "1 while the cache dir is a trtwarm cache; 0 when "
                                "it is missing, unmounted or not a trtwarm cache (see the sidecar's log).",
                                value=0.0 if volume.problem else 1.0)
        s = volume.summary
        if s is None:  # the first scan has not finished
            return
        for name, field, text in (
                ("trtwarm_cache_entries", "entries", "Published entries on the cache volume."),
                ("trtwarm_cache_size_bytes", "bytes", "Bytes used by published entries."),
                ("trtwarm_cache_quarantined_entries", "quarantined", "Entries quarantined after failing verification."),
                ("trtwarm_cache_builds_in_progress", "building", "Builds running now, volume-wide."),
                ("trtwarm_cache_oldest_use_age_seconds", "oldest_use_age", "Age of the least recently used entry.")):
            yield GaugeMetricFamily(name, text, value=float(s[field]))


def _remote(remote: dict[str, Any]) -> Iterator[Metric]:
    """The init's use of the central repository (``--remote``): bytes and seconds pulled and pushed, errors."""
    for name, field, text in (("trtwarm_remote_pulled_bytes", "pulled_bytes", "Bytes this Pod's init pulled."),
                              ("trtwarm_remote_pushed_bytes", "pushed_bytes", "Bytes this Pod's init pushed.")):
        yield CounterMetricFamily(name, text, value=float(remote.get(field) or 0))
    for name, field, text in (("trtwarm_remote_pull_duration_seconds", "pull_seconds", "Time the remote pull took."),
                              ("trtwarm_remote_push_duration_seconds", "push_seconds", "Time the remote push took.")):
        value = remote.get(field)
        yield _one_observation(name, text, value if isinstance(value, (int, float)) else None)
    errors = CounterMetricFamily("trtwarm_remote_errors", "Remote repository failures by kind (auth, bucket, "
                                 "unreachable, server, integrity, trust, conflict).", labels=["kind"])
    counts = remote.get("errors") if isinstance(remote.get("errors"), dict) else {}
    for kind in REMOTE_ERROR_KINDS:
        errors.add_metric([kind], float(counts.get(kind) or 0))
    yield errors


def _one_observation(name: str, text: str, value: float | None) -> HistogramMetricFamily:
    buckets = [(_le(b), 1.0 if value is not None and value <= b else 0.0) for b in BUCKETS]
    buckets.append(("+Inf", 1.0 if value is not None else 0.0))
    return HistogramMetricFamily(name, text, buckets=buckets, sum_value=float(value or 0.0))


def _le(bound: float) -> str:
    return repr(float(bound))


def registry(handoff_dir: Path, volume: VolumeWatcher | None,
             readiness: Readiness | None = None) -> tuple[CollectorRegistry, TrtwarmCollector]:
    """A private registry holding only trtwarm's collector."""
    reg = CollectorRegistry(auto_describe=False)
    collector = TrtwarmCollector(handoff_dir, volume, readiness)
    reg.register(collector)
    return reg, collector


__all__ = ["BUCKETS", "RESULTS", "Readiness", "TrtwarmCollector", "VolumeWatcher", "engine_ready", "registry"]

