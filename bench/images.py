"""Image benchmarks: sizes, start to ``/healthz``, and a hit inside a container vs on the host. Not timed tests.

``python bench/images.py`` builds both images from this checkout with podman (``tests/podman_images.py``: a base made
from Debian packages, no registry), measures, and replaces the table between the ``<!-- bench-images -->`` markers
in docs/benchmarks.md; ``bench/run.py`` runs it too (``--only images``). Where podman cannot run, it says why and measures
nothing.

* sizes: the sidecar image, the init image without TensorRT (``TENSORRT_PACKAGE=""``) and the init-pull image (pull-only
  consumers: no onnxruntime either), on the Debian base;
* start: ``podman run -d`` of the sidecar to the first ``/healthz`` 200 through a published port, vs the same
  server started as a host process (the floor: what the container adds is the ratio);
* hit: ``trtwarm init`` finding a 10 MiB engine, in a fresh container (``podman run --rm``) vs a host process.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # podman_images and conftest: the tests' own helpers
MiB = 1 << 20


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _until_healthy(port: int, start: float, proc: subprocess.Popen[bytes] | None = None) -> float:
    """Seconds from *start* to the first ``/healthz`` 200 on *port* (polled every 5 ms)."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return time.perf_counter() - start
        except OSError:
            pass
        assert proc is None or proc.poll() is None, "the sidecar exited"
        assert time.perf_counter() - start < 120, "no /healthz 200 within 120 s"
        time.sleep(0.005)


def _start_times(podman, sidecar: str, work: Path, repeat: int) -> tuple[float, float]:  # noqa: ANN001
    """Median start-to-healthy of the sidecar image and of the same server as a host process."""
    from conftest import env_for

    container, host = [], []
    for i in range(repeat):
        port, name = _port(), f"trtwarm-bench-sidecar-{i}"
        start = time.perf_counter()
        podman.run("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:9400", sidecar, "--cache-dir", "/tmp/c",
                   "--handoff-dir", "/tmp/h")
        container.append(_until_healthy(port, start))
        podman.run("rm", "--force", "--time", "0", name, check=False)
        port = _port()
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "trtwarm", "sidecar", "--cache-dir", str(work / "c"),
                                 "--handoff-dir", str(work / "h"), "--bind", "127.0.0.1", "--port", str(port)],
                                env=env_for(), stderr=subprocess.DEVNULL)
        host.append(_until_healthy(port, start, proc))
        proc.terminate()
        proc.wait(10)
    return statistics.median(container), statistics.median(host)


def _result(stdout: str) -> str:
    """The init's result, from its one-line JSON summary (the last stdout line)."""
    return json.loads(stdout.strip().splitlines()[-1])["result"]


def _hit_times(podman, init: str, work: Path, repeat: int) -> tuple[float, float, bool]:  # noqa: ANN001
    """Median wall time of a hit on a 10 MiB engine: a fresh init container vs a host process, same volume."""
    from conftest import env_for
    from trtwarm.cli.demo import make_model

    models = make_model(work / "models" / "mlp.onnx").parent
    blob = models / "engine.bin"
    blob.write_bytes(b"\0" * (10 * MiB))
    cache, handoff = work / "cache", work / "handoff"
    for path in (cache, handoff):  # owned by the image's uid, as the chart's hostPath recipe says
        path.mkdir()
        os.chown(path, 1000, 1000)
    flags = ["--model", "/models/in/mlp.onnx", "--builder", "command", "--builder-version", "bench", "--device", "cpu",
             "--build-command", "cp /models/in/engine.bin {output}"]
    container_argv = ["run", "--rm", "--network", "none", "-v", f"{models}:/models/in:ro",
                      "-v", f"{cache}:/models/cache", "-v", f"{handoff}:/trtwarm", init, *flags]
    podman.run(*container_argv)  # the build
    time.sleep(2.1)  # past the stat cache's racy window, as on a volume in use
    container = []
    for _ in range(repeat):
        start = time.perf_counter()
        assert _result(podman.run(*container_argv).stdout) == "hit"
        container.append(time.perf_counter() - start)
    # The host runs the same flags against the same volume; its --model is the host's path of the same file. The build
    # command stays the container's: it is part of the key, and the host must hit the container's entry, not build.
    host_flags = [str(models / "mlp.onnx") if f == "/models/in/mlp.onnx" else f for f in flags]
    host_argv = [sys.executable, "-m", "trtwarm", "init", *host_flags, "--cache-dir", str(cache), "--handoff-dir",
                 str(work / "h2")]
    host = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = subprocess.run(host_argv, check=True, capture_output=True, text=True, env=env_for()).stdout
        host.append(time.perf_counter() - start)
    return statistics.median(container), statistics.median(host), _result(out) == "hit"


def bench_images(work: Path, repeat: int = 5) -> dict[str, object] | str:
    """Build both images and measure; returns the numbers, or why podman cannot run here."""
    from podman_images import Podman, Unavailable

    try:
        podman = Podman.start()
        base = podman.base()
    except Unavailable as exc:
        return str(exc)
    try:
        sidecar = podman.build("sidecar", "bench-sidecar", "--build-arg", f"PYTHON_IMAGE={base}", "--network", "host")
        init = podman.build("init", "bench-init", "--build-arg", f"BASE_IMAGE={base}", "--build-arg",
                            f"PYTHON_IMAGE={base}", "--build-arg", "TENSORRT_PACKAGE=", "--network", "host")
        init_pull = podman.build("init-pull", "bench-init-pull", "--build-arg", f"PYTHON_IMAGE={base}",
                                 "--network", "host")
        start_container, start_host = _start_times(podman, sidecar, work, repeat)
        hit_container, hit_host, host_hit = _hit_times(podman, init, work, repeat)
        assert host_hit, "the host's init did not hit the container's entry"
        return {"sidecar_bytes": podman.size(sidecar), "init_bytes": podman.size(init),
                "init_pull_bytes": podman.size(init_pull),
                "base_bytes": podman.size(base), "start_container_s": start_container, "start_host_s": start_host,
                "hit_container_s": hit_container, "hit_host_s": hit_host}
    finally:
        podman.cleanup()


def render_images(result: dict[str, object] | str) -> str:
    """The README table (or the one line saying why it was not measured)."""
    if isinstance(result, str):
        return f"Image rows not measured: {result}.\n"
    r, mb = result, 1e6
    return "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {len(os.sched_getaffinity(0))} CPUs by "
        f"`python bench/images.py` (podman, runc; Debian 12 base, {r['base_bytes'] / mb:.0f} MB).", "",
        "| image | measure | value | baseline | ratio |", "|---|---|---|---|---|",
        f"| sidecar | image size | {r['sidecar_bytes'] / mb:.0f} MB | base {r['base_bytes'] / mb:.0f} MB | "
        f"{r['sidecar_bytes'] / r['base_bytes']:.2f} |",
        f"| init, no TensorRT | image size | {r['init_bytes'] / mb:.0f} MB | base {r['base_bytes'] / mb:.0f} MB | "
        f"{r['init_bytes'] / r['base_bytes']:.2f} |",
        f"| init-pull (pull-only) | image size | {r['init_pull_bytes'] / mb:.0f} MB | "
        f"base {r['base_bytes'] / mb:.0f} MB "
        f"| {r['init_pull_bytes'] / r['base_bytes']:.2f} |",
        f"| sidecar | `podman run` → `/healthz` 200 | {r['start_container_s'] * 1000:.0f} ms | host process "
        f"{r['start_host_s'] * 1000:.0f} ms | {r['start_container_s'] / r['start_host_s']:.2f} |",
        f"| init | hit, 10 MiB engine, wall | {r['hit_container_s'] * 1000:.0f} ms (`podman run --rm`) | host process "
        f"{r['hit_host_s'] * 1000:.0f} ms | {r['hit_container_s'] / r['hit_host_s']:.2f} |",
    ]) + "\n"


def write_readme(table: str) -> None:
    """Replace the README's image block with *table*."""
    readme = ROOT / "docs" / "benchmarks.md"
    readme.write_text(re.sub(r"(<!-- bench-images -->\n).*?(<!-- /bench-images -->)", lambda m: m[1] + table + m[2],
                             readme.read_text(), flags=re.S))


def main() -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):  # the docstring is the usage; nothing is built or measured
        print(__doc__)
        sys.exit(0)
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-images-") as tmp:
        table = render_images(bench_images(Path(tmp)))
    print(table)
    write_readme(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
