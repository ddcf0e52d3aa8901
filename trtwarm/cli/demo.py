"""A generated ONNX model and the ``trtwarm demo`` job: init twice on it (first built, then hit)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trtwarm import strictjson


def make_model(path: Path, *, hidden: int = 64, seed: int = 0, external: bool = False, dynamic: bool = True) -> Path:
    """Write a small MLP (``input [batch, 16] → output [batch, 4]``) with ``onnx.helper``; return *path*.

    :param seed: changes the weights only (same graph), to test that weights are part of the key
    :param external: store the weights in ``<stem>.weights`` beside the model
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((16, hidden)).astype("float32"), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, 4)).astype("float32"), "w2")
    batch: Any = "batch" if dynamic else 1
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["output"])],
        "trtwarm_demo", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 4])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="trtwarm")
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{path.stem}.weights", size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


def run(cache_dir: Path | None, workdir: Path | None) -> int:
    """Generate a model, run ``trtwarm init`` twice in fresh processes, print what each did.

    The first run builds (a fresh engine is always load-checked); the second is a hit with the default
    ``--verify digest``, the milliseconds path. A temporary work directory is removed at the end.
    """
    work = Path(workdir or tempfile.mkdtemp(prefix="trtwarm-demo-"))
    try:
        return _run(work, cache_dir or work / "cache", keep=cache_dir is not None or workdir is not None)
    finally:
        if workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def _run(work: Path, cache: Path, keep: bool) -> int:
    from trtwarm.errors import volume_error
    from trtwarm.volume.statcache import RACY_SECONDS

    try:
        model = make_model(work / "models" / "demo-mlp.onnx")
    except OSError as exc:
        raise volume_error(exc, "write the demo model in", work, hint="pass a writable directory as --workdir "
                           "(or leave it out for a temporary one)") from exc
    # A model written less than RACY_SECONDS ago is not memoised (the stat cache's "racily clean" rule), so the hit
    # would hash and parse it again; a deployed model is older than that, and so is this one once we have waited.
    time.sleep(max(0.0, model.stat().st_mtime + RACY_SECONDS + 0.1 - time.time()))
    print(f"model {model}\ncache {cache}{'' if keep else ' (temporary, removed at the end)'}")
    results = []
    for attempt in (1, 2):
        argv = [sys.executable, "-m", "trtwarm", "init", "--builder", "onnxruntime", "--model", str(model),
                "--cache-dir", str(cache), "--handoff-dir", str(work / f"handoff-{attempt}"),
                "--shape", "input=1x16:8x16:32x16"]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return proc.returncode
        summary = strictjson.loads(proc.stdout.strip().splitlines()[-1], limit=1 << 20)
        results.append(summary)
        print(f"run {attempt}: {summary['result']:<6} {summary['seconds']['total'] * 1000:.0f} ms  {summary['name']}")
    got = [r["result"] for r in results]
    if got == ["built", "hit"]:
        print("demo ok: the first start built the engine, the second reused it (times: the init's own work, without "
              "the Python start-up)")
    elif keep and got == ["hit", "hit"]:
        print(f"demo ok: both starts reused the engine an earlier demo built in {cache} (delete it to build again)")
    else:
        print("demo: unexpected results")
        return 1
    return 0


__all__ = ["make_model", "run"]
