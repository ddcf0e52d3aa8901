"""Which TensorRT the key names: the installed one (read without importing it) or a declared ``--tensorrt-version``,
always in one spelling, :func:`~trtwarm.builders.tensorrt.compat.canonical_version`'s ``major.minor.patch.build``.

A plan loads only in the TensorRT of the same four numbers (the plan header stores all four; "version numbers must
match (in major, minor, patch, and build)", ``../shared/reference/tensorrt.md`` §2.1), so a declared version with
fewer parts is refused rather than guessed, leading zeros are dropped (``10.16.01.11`` is ``10.16.1.11``), and a
wheel whose metadata says ``10.7.0.post1`` (a packaging revision) is keyed by the library's own
``tensorrt.__version__``, which a pull-only consumer can declare.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from importlib import metadata

from trtwarm.builders.tensorrt.compat import canonical_version
from trtwarm.builders.tensorrt.cudamajor import from_dist
from trtwarm.errors import ConfigError

log = logging.getLogger("trtwarm.build")
INSTALL_HINT = ("install TensorRT into this image: pip install 'trtwarm[tensorrt]' (the same TensorRT version as "
                "your inference server), or use --builder onnxruntime / --builder command")
#: distributions that provide the ``tensorrt`` module, most specific first (pip wheels, then NGC / system packages)
DISTRIBUTIONS = ("tensorrt-cu13-bindings", "tensorrt-cu12-bindings", "tensorrt-cu11-bindings", "tensorrt-cu13",
                 "tensorrt-cu12", "tensorrt-cu11", "tensorrt")
_EXACT_HINT = ("give the inference server's exact TensorRT, all four numbers, as `python3 -c 'import tensorrt; "
               "print(tensorrt.__version__)'` prints in its image, e.g. 10.16.1.11+cu12 (+cuN: the CUDA major of its "
               "wheel, as in the key's builder.cuda)")


def tensorrt_version() -> tuple[str, str]:
    """``(distribution, canonical version)`` of the installed TensorRT, without importing it (a hit must stay fast)
    unless the metadata's version is not the library's (``.postN``) or there is no metadata.

    :raises ConfigError: TensorRT is not installed (exit 2, naming the extra and the pip command)
    """
    if importlib.util.find_spec("tensorrt") is None:
        raise ConfigError("--builder tensorrt needs the tensorrt Python package, which is not installed",
                          hint=INSTALL_HINT)
    installed = {}
    for dist in DISTRIBUTIONS:
        try:
            installed[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    if not installed:
        return "tensorrt", _imported_version()  # a source or vendored install without metadata
    majors = sorted({m for m in map(from_dist, installed) if m})
    if len(majors) > 1:  # e.g. tensorrt-cu12-bindings left behind by tensorrt-cu13: one `tensorrt` package, files of
        # whichever was installed last; the CUDA major is then read from the library (plain `tensorrt` names none)
        log.warning("TensorRT distributions of several CUDA majors are installed (%s): they share one `tensorrt` "
                    "package; its CUDA major is read from the library it loads", ", ".join(installed))
        versions = {canonical_version(v) for v in installed.values()}
        return "tensorrt", (versions.pop() if len(versions) == 1 and None not in versions else None) or \
            _imported_version()
    dist, version = next(iter(installed.items()))
    return dist, canonical_version(version) or _imported_version()


def _imported_version() -> str:
    import tensorrt as trt

    found = str(trt.__version__)
    return canonical_version(found) or found


def declared_version(text: str) -> tuple[str, str]:
    """``--tensorrt-version 10.16.01.11+cu12`` → ``("tensorrt-cu12", "10.16.1.11")`` (no ``+cuN``: ``tensorrt``).

    A pull-only consumer declares the server's TensorRT instead of importing one. If a TensorRT is installed all
    the same, it must be that version (an engine keyed with a version it was not built by would never load).
    :raises ConfigError: malformed, not all four numbers, a wheel's ``.postN``, or not the installed TensorRT
    """
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(\.post\d+)?(?:\+cu(\d+))?", text.strip())
    if not match:
        raise ConfigError(f"--tensorrt-version {text!r} is not a TensorRT version", hint=_EXACT_HINT)
    if match[2]:
        raise ConfigError(f"--tensorrt-version {text!r} is a wheel's version ({match[2][1:]} is a packaging "
                          "revision), not TensorRT's: the key holds the library's own version", hint=_EXACT_HINT)
    version = canonical_version(match[1])
    if version is None:
        raise ConfigError(f"--tensorrt-version {match[1]} is not exact: an engine loads only in the TensorRT of the "
                          "same major, minor, patch and build", hint=_EXACT_HINT)
    dist = f"tensorrt-cu{int(match[3])}" if match[3] else "tensorrt"
    if importlib.util.find_spec("tensorrt") is not None:
        installed = tensorrt_version()[1]
        if installed != version:
            raise ConfigError(f"--tensorrt-version {version} differs from the installed TensorRT {installed}",
                              hint="drop --tensorrt-version where TensorRT is installed, or match the server's")
    return dist, version


__all__ = ["DISTRIBUTIONS", "INSTALL_HINT", "declared_version", "tensorrt_version"]
