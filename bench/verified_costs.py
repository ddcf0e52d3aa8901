"""What the private build directory and the descriptor rule cost: a 1 GiB engine built and hit, trees side by side.

    python bench/verified_costs.py --tree before=/path/to/old/checkout --tree after=. [--runs 7] [--dir DIR]

Each tree runs ``trtwarm init`` in a fresh process (``PYTHONPATH=<tree>``, this interpreter) with the ``command``
builder copying a prepared 1 GiB file of random bytes into ``{output}``: builds (each into an empty cache) with
``--handoff link`` and ``copy``, then hits (``--verify digest``) with each hand-off. The trees run in turn, the first
in alternate order each round; medians are printed as a Markdown table (ratios to the first tree) and the raw times
as JSON. The page cache stays warm for every tree alike; the numbers are only comparable within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def _init(tree: str, model: Path, engine: Path, cache: Path, handoff: Path, *extra: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRTWARM_")}
    env["PYTHONPATH"] = tree
    argv = [sys.executable, "-m", "trtwarm", "init", "--builder", "command", "--builder-version", "b1",
            "--build-command", f"cp {engine} {{output}}", "--device", "cpu", "--model", str(model), "--cache-dir",
            str(cache), "--handoff-dir", str(handoff), *extra]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])["result"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--dir", help="where the caches go (default: a temporary directory)")
    ns = parser.parse_args()
    trees = dict(t.split("=", 1) for t in ns.tree)
    sys.path.insert(0, str(ROOT))
    from trtwarm.cli.demo import make_model

    work = Path(tempfile.mkdtemp(prefix="trtwarm-verified-", dir=ns.dir))
    try:
        model, engine = make_model(work / "m.onnx"), work / "engine.bin"
        with open(engine, "wb") as handle:
            for _ in range(ns.size_mib):
                handle.write(os.urandom(MiB))
        time.sleep(2.2)  # past the stat cache's racy window
        times: dict[tuple[str, str], list[float]] = {}
        scenarios = [("build, link", ()), ("build, --handoff copy", ("--handoff", "copy")),
                     ("hit, link", ()), ("hit, --handoff copy", ("--handoff", "copy"))]
        for scenario, extra in scenarios:
            hit = scenario.startswith("hit")
            if hit:  # one cache per tree to hit
                for label, tree in trees.items():
                    shutil.rmtree(work / f"c-{label}", ignore_errors=True)
                    _init(tree, model, engine, work / f"c-{label}", work / f"h0-{label}")
            for i in range(ns.runs):
                for label, tree in (list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))):
                    cache, handoff = work / f"c-{label}", work / f"h-{label}"
                    shutil.rmtree(handoff, ignore_errors=True)
                    if not hit:
                        shutil.rmtree(cache, ignore_errors=True)
                    seconds, result = _init(tree, model, engine, cache, handoff, *extra)
                    assert result == ("hit" if hit else "built"), result
                    times.setdefault((scenario, label), []).append(seconds)
        labels = list(trees)
        print("| 1 GiB engine | " + " | ".join(labels) + " |\n|---|" + "---|" * len(labels))
        for scenario, _extra in scenarios:
            medians = [statistics.median(times[(scenario, label)]) for label in labels]
            print(f"| {scenario} | " + " | ".join(f"{m:.2f} s ({m / medians[0]:.2f})" for m in medians) + " |")
        print(json.dumps({f"{s} / {label}": [round(x, 3) for x in v] for (s, label), v in times.items()}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
