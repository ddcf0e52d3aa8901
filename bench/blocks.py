"""The benchmarks with their own rows or block in docs/benchmarks.md, each run alone by ``python bench/run.py --only
NAME`` (which rewrites its rows there) and all smoked by ``python bench/run.py --quick`` (small sizes, nothing
written): so no block can rot unseen.

Every function takes the run's :class:`run.Profile` and whether to write docs/benchmarks.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from run import MiB, ROOT, Profile, _env, _init_argv, _model, _trust, replace_block


def _compiled() -> None:
    """As installed from a wheel: bytecode compiled ahead."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "trtwarm")], check=True)


def trust(profile: Profile, write: bool) -> int:
    """The signature-check rows of the main table."""
    from bench.table import trust_row

    _compiled()
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-") as tmp:
        row = trust_row(_trust(Path(tmp), profile.trust_repeat))
    print(row)
    if write:
        _replace_rows(r"^\| hit with signature check.*$", row)
    return 0


def bigfiles(profile: Profile, write: bool) -> int:
    """The large-engine rows of the main table (bench/bigfiles.py) and the read-size sweep's block."""
    from bench.bigfiles import SWEEP, bench_primitives, bench_sweep, init_rows
    from bench.table import bigfiles_rows, stamp, sweep_table

    _compiled()
    size, rounds = profile.big_bytes, profile.big_rounds
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-big-") as tmp:
        work = Path(tmp)
        for sub in ("prim", "init", "sweep"):
            (work / sub).mkdir()
        prim = bench_primitives(work / "prim", size, rounds)
        init = init_rows(work / "init", size, rounds, _init_argv, _env(), _model(work / "init"))
        swept = bench_sweep(work / "sweep", size, rounds, SWEEP if size >= 1 << 30 else SWEEP[2:4])
    rows = "\n".join(bigfiles_rows(prim, init))
    sweep = stamp("python bench/run.py --only bigfiles") + "\n\n" + sweep_table(swept)
    print(rows + "\n\n" + sweep)
    if write:
        _replace_rows(r"^\| (check|copy|the build's copy|whole-file and chunk|`trtwarm init --verify).*$", rows)
        replace_block("bench-buffers", sweep)
    return 0


def storm(profile: Profile, write: bool) -> int:
    """The storm rows of the main table (and the crash takeover), then where each storm's time went: every N again
    with each init traced (bench/storm.py ``TRACER``: wake-up, hand-off, exit, imports after the wake-up, each
    waiter's main thread on a CPU, waiting for one or blocked, its CPU with its exit); then each N under a trust
    policy (one signing builder, N - 1 consumers), printed only."""
    import json

    from bench.storm import trace_table
    from bench.table import storm_rows
    from run import bench_storm, bench_takeover

    _compiled()
    counts = profile.counts if profile.repeat > 1 else profile.counts[:1]  # the smoke: the main table has the rest
    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-storm-") as tmp:
        work = Path(tmp)
        for sub in ("storm", "takeover", "trace", "enforce"):
            (work / sub).mkdir()
        rows = bench_storm(work / "storm", counts, profile.build_seconds)
        took = bench_takeover(work / "takeover")
        traces = bench_storm(work / "trace", counts, profile.build_seconds, trace=True)
        enforcing = bench_storm(work / "enforce", counts, profile.build_seconds, enforce=True)
    table = storm_rows(rows, took)
    print(table)
    print("\nunder --trust-mode enforce, one signing builder and N - 1 consumers (printed, not written):\n"
          + storm_rows(enforcing, None).replace("| storm of", "| storm under enforce of"))
    for r in traces:
        print(f"trace, storm of {r['n']}: last ready {r['trtwarm']['last_s'] * 1000:.0f} ms after the publish; "
              + json.dumps(r["trtwarm"]["trace"]))
    print("\nwhere the time went (ms; median, the slowest waiter in brackets):\n" + trace_table(traces))
    if write:
        _replace_rows(r"^\| (storm of|crash takeover).*$", table)
    return 0


def images(profile: Profile, write: bool) -> int:
    """Image sizes and starts (bench/images.py): its own block."""
    from bench.images import bench_images, render_images, write_readme

    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-images-") as tmp:
        table = render_images(bench_images(Path(tmp), repeat=min(5, profile.repeat)))
    print(table)
    if write:
        write_readme(table)
    return 0


def remote(profile: Profile, write: bool) -> int:
    """The remote pull against curl (bench/bench_remote.py): its own block."""
    from bench_remote import bench_remote, render

    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-remote-") as tmp:
        row = bench_remote(Path(tmp), profile.remote_mib * MiB, repeat=min(5, profile.repeat))
    return _show(render(row), write, "bench-remote")


def init_vs_curl(profile: Profile, write: bool) -> int:
    """A whole pulling init against curl + sync and the verified download: its own block."""
    from bench_remote import IDLE, bench_init_vs_curl, render_init_vs_curl

    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-remote-") as tmp:
        row = bench_init_vs_curl(Path(tmp), profile.remote_mib * MiB, repeat=min(4, profile.repeat),
                                 idle=IDLE if profile.repeat > 1 else 0.0)
    return _show(render_init_vs_curl(row, "python bench/run.py --only init-vs-curl"), write, "bench-init-vs-curl")


def oci(profile: Profile, write: bool) -> int:
    """The pull from an OCI registry against curl (bench/bench_oci.py): its own block."""
    from bench_oci import bench_oci, render

    with tempfile.TemporaryDirectory(prefix="trtwarm-bench-oci-") as tmp:
        table = render(bench_oci(Path(tmp), profile.remote_mib * MiB, min(5, profile.repeat)))
    return _show(table, write, "bench-oci")


def handoff_copy(profile: Profile, write: bool) -> int:
    """The Pod-private hand-off's copy against cp (bench/handoff_copy.py): its own block."""
    from handoff_copy import measure

    return _show(measure(profile.remote_mib, None, min(5, profile.repeat)), write, "bench-handoff-copy")


def _show(table: str, write: bool, marker: str) -> int:
    """Print *table*; with *write*, it replaces the ``<!-- marker -->`` block of docs/benchmarks.md."""
    print(table)
    if write:
        replace_block(marker, table)
    return 0


def _replace_rows(pattern: str, rows: str) -> None:
    """Replace the main table's run of rows matching *pattern* with *rows* (added at its end when absent). Only the
    ``<!-- bench -->`` block is searched: a row of another table that starts with the same word stays."""
    readme = ROOT / "docs" / "benchmarks.md"
    text = readme.read_text()
    start, end = text.index("<!-- bench -->\n"), text.index("<!-- /bench -->")
    block = text[start:end]
    if re.search(pattern, block, flags=re.M):
        block = re.sub(rf"({pattern}\n)+", lambda m: rows + "\n", block, count=1, flags=re.M)
    else:
        block += rows + "\n"
    readme.write_text(text[:start] + block + text[end:])


ONLY: dict[str, Callable[[Profile, bool], int]] = {
    "trust": trust, "images": images, "remote": remote, "init-vs-curl": init_vs_curl, "oci": oci,
    "handoff-copy": handoff_copy, "bigfiles": bigfiles, "storm": storm}

__all__ = ["ONLY"]
