"""``trtwarm sidecar`` as a real process: readiness, leases, SIGTERM, concurrent scrapes, periodic gc, and a real
Prometheus server computing the README's hit-ratio PromQL."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, cmd_init_args, env_for, run_trtwarm, trtwarm_argv, wait_until

pytestmark = pytest.mark.concurrency


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class SidecarProc:
    """A running ``trtwarm sidecar`` on a free loopback port."""

    def __init__(self, cache: Path, handoff: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(trtwarm_argv("sidecar", "--cache-dir", str(cache), "--handoff-dir", str(handoff),
                                                  "--port", str(self.port), "--bind", "127.0.0.1", *extra),
                                     env=env_for(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(self._up, what="sidecar /healthz")

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.proc.communicate()[1]
        try:
            return get(self.url + "/healthz", timeout=1)[0] == 200
        except OSError:
            return False

    def metric(self, line_start: str) -> float | None:
        body = get(self.url + "/metrics")[1]
        found = [float(line.split()[-1]) for line in body.splitlines() if line.startswith(line_start + " ")]
        return found[0] if found else None

    def stop(self) -> float:
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)
        return time.monotonic() - start


@pytest.fixture
def sidecars():  # noqa: ANN201
    started: list[SidecarProc] = []
    yield lambda *a, **k: started.append(SidecarProc(*a, **k)) or started[-1]
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
        s.proc.communicate()


def test_readyz_turns_200_only_after_a_successful_init(sidecars, model: Path, cache: Path, tmp_path: Path) -> None:
    ok, failed = sidecars(cache, tmp_path / "ok"), sidecars(cache, tmp_path / "failed")
    status, body = get(ok.url + "/readyz")
    assert status == 503 and "has not finished" in body
    assert ok.metric('trtwarm_init_total{result="built"}') == 0.0
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "ok")).returncode == 0
    assert get(ok.url + "/readyz")[0] == 200
    assert ok.metric('trtwarm_init_total{result="built"}') == 1.0 and ok.metric("trtwarm_engine_ready") == 1.0
    args = cmd_init_args(model, cache, tmp_path / "failed", "--key-extra", "broken=1")
    args[args.index("--build-command") + 1] = "sh -c 'exit 3' {output}"
    assert run_trtwarm(*args).returncode == 4
    status, body = get(failed.url + "/readyz")
    assert status == 503 and "trtwarm init failed" in body
    assert failed.metric('trtwarm_init_total{result="error"}') == 1.0


def test_sidecar_holds_a_lease_and_sigterm_releases_it_within_a_second(sidecars, model: Path, cache: Path,
                                                                        tmp_path: Path) -> None:
    env = {"POD_NAME": "web-7", "POD_NAMESPACE": "ml"}
    side = sidecars(cache, tmp_path / "h", env=env)
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"), env=env)
    key = json.loads((tmp_path / "h" / "engine.json").read_text())["key"]
    lease = cache / ".leases" / key / "ml.web-7.json"
    wait_until(lambda: lease.exists() and json.loads(lease.read_text())["pid"] == side.proc.pid, what="sidecar lease")
    assert run.returncode == 0
    rows = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)
    assert rows[0]["pods"] == ["ml.web-7"]
    took = side.stop()
    assert side.proc.returncode == 0 and took < 1.0, took
    assert not lease.exists()


def test_200_concurrent_scrapes_during_an_init_are_all_answered(sidecars, model: Path, cache: Path,
                                                                 tmp_path: Path) -> None:
    side = sidecars(cache, tmp_path / "h")
    init = subprocess.Popen(trtwarm_argv(*cmd_init_args(model, cache, tmp_path / "h", seconds=2)), env=env_for(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with ThreadPoolExecutor(200) as pool:
        results = list(pool.map(lambda _: get(side.url + "/metrics", timeout=30), range(200)))
    assert [status for status, _ in results] == [200] * 200
    assert all("trtwarm_init_total" in body for _, body in results)
    init.communicate(timeout=60)
    assert init.returncode == 0


def test_periodic_gc_in_the_sidecar_evicts_by_age_and_counts_it(sidecars, model: Path, cache: Path,
                                                                 tmp_path: Path) -> None:
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "old", "--key-extra", "t=old")).returncode == 0
    for path in [*(cache / ".leases").rglob("*.json"), *(cache / ".uses").iterdir()]:
        old = time.time() - 40 * 86400
        os.utime(path, (old, old))
    side = sidecars(cache, tmp_path / "h", "--gc-interval", "1s", "--gc-max-age", "30d", "--scan-interval", "1s")
    wait_until(lambda: not any((cache / "entries").iterdir()), what="periodic gc")
    wait_until(lambda: side.metric('trtwarm_cache_evictions_total{reason="age"}') == 1.0, what="eviction metric")
    wait_until(lambda: side.metric("trtwarm_cache_entries") == 0.0, what="volume rescan")


def test_a_second_gc_on_the_same_volume_does_not_run_concurrently(model: Path, cache: Path, tmp_path: Path) -> None:
    from trtwarm.lifecycle.gc import VolumeGcLock
    from trtwarm.volume.layout import Layout

    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h")).returncode == 0
    shutil.rmtree(cache / ".leases")  # the Pod is gone
    with VolumeGcLock(Layout(cache), "flock"):
        other = run_trtwarm("gc", "--cache-dir", str(cache), "--max-bytes", "0", "--yes")
    assert other.returncode == 5 and "another gc is running" in other.stderr
    assert len(list((cache / "entries").iterdir())) == 1
    assert run_trtwarm("gc", "--cache-dir", str(cache), "--max-bytes", "0", "--yes").returncode == 0
    assert not any((cache / "entries").iterdir())


# --- a real Prometheus server ---------------------------------------------------------------------------------

def readme_promql(title: str) -> str:
    """The PromQL docs/metrics.md gives under a ``# <title>`` comment line."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    match = re.search(rf"^# {re.escape(title)}\n(.+?)\n(?:#|```)", text, re.M | re.S)
    assert match, f"README has no PromQL titled {title!r}"
    return " ".join(line.strip() for line in match[1].splitlines())


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "trtwarm", "static_configs": [{"targets": targets}]}]}))
        self.proc = subprocess.Popen([shutil.which("prometheus") or "prometheus", f"--config.file={config}",
                                      f"--storage.tsdb.path={workdir / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir)
        wait_until(self._ready, timeout=60, what="prometheus ready")

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.proc.communicate()[1].decode()[-2000:]
        try:
            return get(self.url + "/-/ready", timeout=1)[0] == 200
        except OSError:
            return False

    def query(self, promql: str) -> float | None:
        status, body = get(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", body
        result = doc["data"]["result"]
        return float(result[0]["value"][1]) if result else None


@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the prometheus server binary is not installed "
                    "(bash .ci/run installs the Debian package)")
def test_prometheus_scrapes_sidecars_and_the_readme_hit_ratio_is_two_thirds(sidecars, model: Path, cache: Path,
                                                                            tmp_path: Path) -> None:
    pods = [sidecars(cache, tmp_path / f"pod{i}", "--scan-interval", "1s") for i in range(3)]
    prom = Prometheus(tmp_path, [f"127.0.0.1:{p.port}" for p in pods])
    try:
        wait_until(lambda: prom.query('count(trtwarm_init_total{result="hit"} == 0)') == 3.0, timeout=60,
                   what="every Pod scraped at 0 before its init")
        results = [run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"pod{i}")).summary["result"] for i in range(3)]
        assert results == ["built", "hit", "hit"]
        wait_until(lambda: prom.query("sum(trtwarm_init_total)") == 3.0, timeout=60, what="inits scraped")
        time.sleep(5)  # a longer series: increase() extrapolates each one by up to a scrape interval
        ratio = prom.query(readme_promql("fleet hit ratio (hits, waits and remote pulls over all inits) "
                                         "in the last hour"))
        assert ratio == pytest.approx(2 / 3, abs=0.08), ratio
        assert prom.query(readme_promql("share of running Pods that started from the cache")) == pytest.approx(2 / 3)
        assert prom.query(readme_promql("p95 engine build time over the last day")) is not None
        wait_until(lambda: prom.query("max(trtwarm_cache_entries)") == 1.0, timeout=30, what="volume gauge scraped")
    finally:
        prom.proc.terminate()
        prom.proc.wait(timeout=10)


def test_readyz_answers_from_memory_after_the_hand_off_so_a_volume_stall_does_not_flip_it(
        sidecars, model: Path, cache: Path, tmp_path: Path) -> None:
    side = sidecars(cache, tmp_path / "h")
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h")).returncode == 0
    assert get(side.url + "/readyz")[0] == 200
    engine = Path(json.loads((tmp_path / "h" / "engine.json").read_text())["path"])
    shutil.rmtree(engine.parent)
    engine.parent.write_text("")  # the engine's path cannot be stat'ed at all (ENOTDIR), as on a broken mount
    status, body = get(side.url + "/readyz")
    assert status == 200 and "ready" in body
    assert side.metric("trtwarm_engine_ready") == 1.0
    engine.parent.unlink()  # removed outright: the server still runs what it loaded
    assert get(side.url + "/readyz")[0] == 200
    fresh = sidecars(cache, tmp_path / "h")  # a restarted sidecar asks the volume again
    status, body = get(fresh.url + "/readyz")
    assert status == 503 and "is gone" in body


def test_the_default_bind_serves_ipv6_and_ipv4(tmp_path: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6")
    port = free_port()
    proc = subprocess.Popen(trtwarm_argv("sidecar", "--cache-dir", str(tmp_path / "c"), "--handoff-dir",
                                         str(tmp_path / "h"), "--port", str(port)),
                            env=env_for(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def up(url: str) -> bool:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                return get(url, timeout=1)[0] == 200
            except OSError:
                return False
        wait_until(lambda: up(f"http://127.0.0.1:{port}/healthz"), what="sidecar on IPv4")
        try:
            socket.create_connection(("::1", port), timeout=2).close()
        except OSError as exc:
            pytest.skip(f"no IPv6 loopback here: {exc}")
        assert get(f"http://[::1]:{port}/healthz")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)


def test_a_missing_or_unmounted_cache_dir_is_not_ready_and_not_0_entries(sidecars, model: Path, cache: Path,
                                                                         tmp_path: Path) -> None:
    """A volume that is not mounted where the sidecar looks is not a healthy, empty cache: not ready, an error
    metric, a log line; once the cache is there again it recovers."""
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h")).returncode == 0
    elsewhere = tmp_path / "unmounted"
    elsewhere.mkdir()  # an empty mount point: the volume is not there
    side = sidecars(elsewhere, tmp_path / "h", "--scan-interval", "0.2s")
    wait_until(lambda: side.metric("trtwarm_cache_volume_available") == 0.0, 30, "volume_available 0")
    status, body = get(side.url + "/readyz")
    assert status == 503 and "the cache volume is unusable" in body and "not a trtwarm cache" in body, body
    assert side.metric("trtwarm_cache_entries") is None  # no "0 entries" for a volume that is not there
    assert side.metric("trtwarm_exporter_scrape_errors_total") >= 1
    shutil.copytree(cache, tmp_path / "staged")
    elsewhere.rmdir()
    os.rename(tmp_path / "staged", elsewhere)  # mounted after all, at once
    wait_until(lambda: side.metric("trtwarm_cache_volume_available") == 1.0, 30, "volume_available 1")
    wait_until(lambda: side.metric("trtwarm_cache_entries") == 1.0, 30, "1 entry")
    assert get(side.url + "/readyz")[0] == 200
    side.proc.send_signal(signal.SIGTERM)
    log = side.proc.communicate(timeout=10)[1]
    assert f"cache dir {elsewhere} is empty: not a trtwarm cache" in log and "usable again" in log, log
