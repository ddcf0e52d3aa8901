"""The bad-day figures docs/remote.md quotes (``python bench/bad_day.py``): a real SeaweedFS and a real registry
(CNCF Distribution) on loopback, each behind the hostile proxy of tests/hostile.py, and real ``trtwarm`` processes
with the DEFAULT waits (5 s connect and read timeouts, 15 s retry window, 32 KiB/s rate floor). For each backend: a
black hole (``remote ls``; a pull-only init with ``--lock-timeout 10s``), headers and a blob body at 1 byte/s
(pull-only init), an endless 503 body, and SIGTERM during a trickled pull, a black-holed pull and a black-holed
push after the hand-off. Prints a Markdown table: exit code, seconds (for SIGTERM: from the signal to the exit),
peak memory (the child's own ``ru_maxrss``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def scenarios(work: Path, backend: str, proxy: Any, env: dict[str, str], url: str, model: Path,
              is_blob: Any, is_meta: Any) -> list[tuple[str, Any]]:
    """(name, result) of each scenario against *proxy* (in front of the backend's real server)."""
    from hostile import after_seen, build_args, endless, hold, run_measured, trickle_body, trickle_head

    rows: list[tuple[str, Any]] = []
    n = iter(range(100))

    def pull(*extra: str) -> list[str]:
        i = next(n)
        return build_args(model, work / f"{backend}-c{i}", work / f"{backend}-h{i}", url, "--read-only", *extra)

    def case(name: str, predicate: Any, behaviour: Any, args: list[str], when: Any = None) -> None:
        proxy.reset()
        proxy.on(predicate, behaviour)
        run, after = run_measured(args, env, timeout=300, signal_when=when)
        rows.append((name, (run.returncode, after if when else run.seconds, run.peak_mb)))

    case("`remote ls`, black hole", lambda r: True, hold, ["remote", "ls", "--remote", url])
    case("pull-only init `--lock-timeout 10s`, black hole", lambda r: True, hold, pull("--lock-timeout", "10s"))
    case("pull-only init, headers at 1 byte/s", is_meta, trickle_head, pull())
    case("pull-only init, blob body at 1 byte/s", is_blob, trickle_body, pull())
    case("pull-only init, endless 503 body", is_meta, endless(503), pull())
    case("SIGTERM, pull-only init, blob body at 1 byte/s", is_blob, trickle_body, pull(),
         after_seen(proxy, is_blob, 2.0))
    case("SIGTERM, pull-only init, black hole", lambda r: True, hold, pull(), after_seen(proxy, lambda r: True, 2.0))
    i = next(n)
    report = work / f"{backend}-h{i}" / "engine.json"
    push = build_args(model, work / f"{backend}-c{i}", work / f"{backend}-h{i}", url, "--builder-version", "bench-push")
    pushing = after_seen(proxy, lambda r: report.exists() and r.method in ("HEAD", "PUT"), 2.0)
    case("SIGTERM, builder's push after the hand-off, black hole", lambda r: r.method in ("HEAD", "PUT", "POST"),
         hold, push, pushing)
    return rows


def main() -> None:
    from conftest import run_trtwarm
    from hostile import Hostile, build_args
    from registry import Registry
    from s3server import SeaweedServer

    from trtwarm.cli.demo import make_model

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = make_model(work / "model.onnx")
        (work / "weed").mkdir()
        (work / "reg").mkdir()
        weed, reg = SeaweedServer(work / "weed").start(), Registry(work / "reg").start()
        home = work / "home"
        home.mkdir()
        oci_env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(home), "REGISTRY_AUTH_FILE": ""}
        table: dict[str, dict[str, Any]] = {}
        try:
            for backend, port, env0 in (("s3", weed.s3_port, weed.env()), ("oci", int(reg.addr.split(":")[1]),
                                                                              oci_env)):
                direct = "s3://engines/bench" if backend == "s3" else f"oci://{reg.addr}/engines/bench"
                seed = run_trtwarm(*build_args(model, work / f"seed-{backend}", work / f"hseed-{backend}", direct),
                                   env=env0)
                assert seed.returncode == 0, seed.stderr
                engine = Path(json.loads((work / f"hseed-{backend}" / "engine.json").read_text())["path"])
                sha = hashlib.sha256(engine.read_bytes()).hexdigest()
                proxy = Hostile(upstream=("127.0.0.1", port))
                if backend == "s3":
                    env, url = {**env0, "AWS_ENDPOINT_URL": proxy.endpoint}, "s3://engines/bench"
                    is_meta = lambda r: r.method == "GET" and "/refs/" in r.path  # noqa: E731
                else:
                    env, url = oci_env, f"oci://{proxy.addr}/engines/bench"
                    is_meta = lambda r: r.method == "GET" and "/manifests/" in r.path  # noqa: E731
                is_blob = lambda r, s=sha: r.method == "GET" and r.path.endswith(s)  # noqa: E731
                for name, result in scenarios(work, backend, proxy, env, url, model, is_blob, is_meta):
                    table.setdefault(name, {})[backend] = result
                proxy.close()
        finally:
            weed.stop()
            reg.stop()
    print("| case (default waits) | `s3://` exit, s, peak MB | `oci://` exit, s, peak MB |")
    print("|---|---|---|")
    for name, by in table.items():
        cells = [f"{by[b][0]}, {by[b][1]:.1f} s, {by[b][2]:.0f} MB" if b in by else "-" for b in ("s3", "oci")]
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
