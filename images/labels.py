"""Print the image labels only the finished install knows, one ``key=value`` a line (``/opt/trtwarm/labels``).

A Dockerfile ``LABEL`` cannot hold a value computed while building, so the build writes them here and
``images/build.sh`` applies them in a second, metadata-only step. The TensorRT version is read exactly the way
``trtwarm init`` reads it for the cache key (:func:`trtwarm.builders.tensorrt.builder.tensorrt_version`: the
installed distribution's metadata, else ``tensorrt.__version__``), so the label names the TensorRT the engines
are built with, whichever way it came into the image (TENSORRT_PACKAGE, or the base image's own).

Usage: ``python labels.py init|sidecar BASE_IMAGE REVISION CREATED``
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
    for key, value in labels(*sys.argv[1:5]).items():
        print(f"{key}={' '.join(value.split())}")
