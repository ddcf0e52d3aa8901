"""docs/oci.md's walkthrough, run as printed: every ``sh`` block between its markers, in order, in one bash session in
a fresh directory, as a newcomer would paste them (a registry on 127.0.0.1:5000, a push, a pull into a fresh cache,
an engine image, podman mounting it as an image volume, ``--seed-cache``, a pre-warm). The doc cannot drift from what
works.

Root podman is needed (as for tests/test_images.py); so are ``docker-registry``, ``curl`` and ``unshare``. The
session runs in a private network namespace, so its fixed port 5000 is free and nothing it starts is reachable from
outside; its ``trtwarm`` is this checkout. ``TRTWARM_IMAGE`` (which the walkthrough lets a user set) is the init-pull
image built from this checkout, since the released one cannot be pulled here. Without any of these the test skips
with the reason; under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.images, pytest.mark.timeout(1800)]

DOC = ROOT / "docs" / "oci.md"
MARK, END = "<!-- walkthrough:", "<!-- walkthrough end -->"


def walkthrough_blocks() -> list[str]:
    """The ``sh`` blocks of docs/oci.md between the walkthrough's markers, in order."""
    text = DOC.read_text()
    part = text[text.index(MARK):text.index(END)]
    blocks = re.findall(r"^```sh\n(.*?)^```", part, re.S | re.M)
    assert blocks, "docs/oci.md's walkthrough has no ```sh block between its markers"
    return blocks


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the OCI walkthrough, but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def trtwarm_image() -> Iterator[tuple[str, dict[str, str]]]:
    """The init-pull image built from this checkout (``images/build.sh``), and podman's environment."""
    missing = [t for t in ("podman", "docker-registry", "curl", "unshare", "ip") if shutil.which(t) is None]
    if missing:
        _unavailable(f"{', '.join(missing)} not installed (bash .ci/run installs them)")
    sys.path.insert(0, str(Path(__file__).parent))
    from podman_images import Podman, Unavailable

    try:
        podman = Podman.start()
        image = podman.build("init-pull", "walkthrough", "--build-arg", f"PYTHON_IMAGE={podman.base()}",
                             "--network", "host")
    except Unavailable as exc:
        _unavailable(str(exc))
    try:
        yield image, podman.env
    finally:
        podman.cleanup()


def _script(blocks: list[str]) -> str:
    """The blocks as one bash session, each announced on both streams (``=== step N``) so its output can be told
    apart; whatever the session left running (the registry) is stopped when it ends, also after a failure."""
    parts = ["set -eo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for number, block in enumerate(blocks, 1):
        parts += [f"echo '=== step {number}'; echo '=== step {number}' >&2", block]
    return "\n".join(parts) + "\n"


def _steps(stream: str) -> dict[int, str]:
    found = re.split(r"^=== step (\d+)\n", stream, flags=re.M)
    return {int(found[i]): found[i + 1] for i in range(1, len(found) - 1, 2)}


def test_the_oci_walkthrough_runs_as_printed(trtwarm_image: tuple[str, dict[str, str]]) -> None:
    image, podman_env = trtwarm_image
    blocks = walkthrough_blocks()
    prewarm = [b for b in blocks if "trtwarm prewarm" in b]
    assert len(prewarm) == 1 and "oci://" in prewarm[0], "the walkthrough pre-warms from the registry"
    run_blocks = blocks
    work = Path(tempfile.mkdtemp(prefix="trtwarm-oci-walkthrough-"))
    try:
        shim = work / "bin" / "trtwarm"
        shim.parent.mkdir()
        shim.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m trtwarm \"$@\"\n")
        shim.chmod(0o755)
        (work / "home").mkdir()
        (work / "session").mkdir()
        env = {"PATH": f"{shim.parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": str(work / "home"), "LANG": "C.UTF-8", "TRTWARM_IMAGE": image,
               "CONTAINERS_CONF": podman_env["CONTAINERS_CONF"]}
        (work / "walkthrough.sh").write_text(_script(run_blocks))
        # a private network namespace: 127.0.0.1:5000 is this session's own, whoever else uses the machine
        argv = ["unshare", "--net", "sh", "-ec", 'ip link set lo up && exec bash "$0"', str(work / "walkthrough.sh")]
        proc = subprocess.run(argv, cwd=work / "session", env=env, capture_output=True, text=True, timeout=1200,
                              check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out, err = _steps(proc.stdout), _steps(proc.stderr)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-6000:])
    assert "Traceback" not in proc.stderr
    step = {name: next(i for i, b in enumerate(run_blocks, 1) if needle in b) for name, needle in (
        ("push", "--cache-dir cache-a"), ("pull", "--cache-dir cache-b"), ("image", "--oci-image"),
        ("mount", "podman run"), ("prewarm", "trtwarm prewarm"))}
    assert re.search(r"pushed .* \(127\.0\.0\.1:5000/engines/demo@sha256:[0-9a-f]{64}\)", err[step["push"]])
    assert json.loads(out[step["push"]].strip().splitlines()[-1])["result"] == "built"
    pulled = out[step["pull"]].strip().splitlines()
    assert json.loads(pulled[0])["result"] == "pulled" and "DIGEST" in out[step["pull"]], out[step["pull"]]
    pinned = re.search(r"^engine image (127\.0\.0\.1:5000/engines/demo-image@sha256:[0-9a-f]{64})$",
                       out[step["image"]], re.M)
    assert pinned, out[step["image"]]
    mounted = json.loads(out[step["mount"]].strip().splitlines()[-1])
    assert mounted["result"] == "hit", (out[step["mount"]], err[step["mount"]])
    assert "in the seed cache /models/cache" in err[step["mount"]] and "building" not in err[step["mount"]]
    assert "pulled" in out[step["prewarm"]] + err[step["prewarm"]], (out[step["prewarm"]], err[step["prewarm"]])
