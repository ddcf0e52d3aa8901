"""Print the image labels only the finished install knows, one ``key=value`` a line (``/opt/trtwarm/labels``).

A Dockerfile ``LABEL`` cannot hold a value computed while building, so the build writes them here and
``images/build.sh`` applies them in a second, metadata-only step. The TensorRT version is read exactly the way
``trtwarm init`` reads it for the cache key (:func:`trtwarm.builders.tensorrt.builder.tensorrt_version`: the
installed distribution's metadata, else ``tensorrt.__version__``), so the label names the TensorRT the engines
are built with, whichever way it came into the image (TENSORRT_PACKAGE, or the base image's own).

Usage: ``python labels.py init|sidecar|init-pull BASE_IMAGE REVISION CREATED [EXPECTED_TENSORRT_VERSION]``; with the last
argument (the build pinned a TensorRT) a different version found is an error that fails the build, e.g. a base
image's own TensorRT shadowing the one asked for.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata


def labels(target: str, base: str, revision: str, created: str) -> dict[str, str]:
    """The computed labels for *target*; ``unknown`` revision or creation time is left out."""
    found = {"org.opencontainers.image.version": metadata.version("trtwarm"),
             "org.opencontainers.image.base.name": base,
             "io.trtwarm.python.version": platform.python_version()}
    if revision != "unknown":
        found["org.opencontainers.image.revision"] = revision
    if created != "unknown":
        found["org.opencontainers.image.created"] = created
    if target == "init":
        from trtwarm.builders.tensorrt.builder import tensorrt_version
        from trtwarm.errors import ConfigError

        try:
            dist, version = tensorrt_version()
        except ConfigError:
            dist, version = "none", "none"
        found["io.trtwarm.tensorrt.version"] = version
        found["io.trtwarm.tensorrt.distribution"] = dist
    return found


if __name__ == "__main__":
    found = labels(*sys.argv[1:5])
    expected = sys.argv[5] if len(sys.argv) > 5 else ""
    if expected and found.get("io.trtwarm.tensorrt.version") != expected:
        sys.exit(f"error: TENSORRT_VERSION={expected} was installed, but trtwarm finds TensorRT "
                 f"{found.get('io.trtwarm.tensorrt.version')} ({found.get('io.trtwarm.tensorrt.distribution')}); "
                 "hint: the base image has its own TensorRT: build with TENSORRT_PACKAGE= to use it")
    for key, value in found.items():
        print(f"{key}={' '.join(value.split())}")
