"""Which ``libnvinfer`` a process loads, and what that library says about itself: its four version numbers and the
CUDA major it links.

* **Which file.** The dynamic loader resolves ``libnvinfer.so.<major>`` (a ``DT_NEEDED`` of the ``tensorrt`` bindings
  and of ONNX Runtime's TensorRT provider) through an object already loaded under that name, the needing object's
  ``DT_RPATH`` (only where it has no ``DT_RUNPATH``), ``LD_LIBRARY_PATH``, its ``DT_RUNPATH``, then the system
  directories (ld.so(8)). :func:`search_dirs` lists them in that order; a pip install's ``tensorrt_libs`` package
  loads every library of its directory before the bindings (``python/packaging/libs_wheel/tensorrt_libs/
  __init__.py``), so it comes first where it is imported.
* **Its CUDA major** (:func:`cuda_major`): the ``libcudart.so.N``/``libcublas.so.N``/``libcublasLt.so.N``/
  ``libnvrtc.so.N`` in the ``DT_NEEDED`` of the library and of its siblings (``libnvinfer_plugin``,
  ``libnvonnxparser``), read from the files (:mod:`.elf`); or, after ``import tensorrt``, the ``libcudart`` mapped
  into this process (:func:`mapped`). A build that links CUDA statically names none: then the caller looks further.
* **Its version** (:func:`versions`): ``getInferLibMajorVersion``, ``...Minor...``, ``...Patch...``,
  ``...BuildVersion`` (``include/NvInferRuntime.h``, ``extern "C"``, in every release since 10.0: release/10.0
  L4589-4601, release/10.16 L5749-5761, main L5389-5401), called on the library itself; a file name carries three
  numbers at most (``libnvinfer.so.10.16.1``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from trtwarm.builders.tensorrt import elf

log = logging.getLogger("trtwarm.build")
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/tensorrt/lib", "/usr/local/lib")
#: the CUDA libraries whose major version names the CUDA a TensorRT build was made for
CUDA_SONAME = re.compile(r"lib(?:cudart|cublas|cublasLt|nvrtc)\.so\.(\d+)(?:\.\d+)*")
_SIBLINGS = ("libnvinfer_plugin.so.{}", "libnvonnxparser.so.{}")
VERSION_FUNCTIONS = tuple(f"getInferLib{part}Version" for part in ("Major", "Minor", "Patch", "Build"))


def _expand(entry: str, origin: Path) -> str:
    return entry.replace("${ORIGIN}", str(origin)).replace("$ORIGIN", str(origin))


def runpath_of(objects: Iterable[Path], rpath: bool | None = None) -> list[str]:
    """The ``DT_RUNPATH`` (else ``DT_RPATH``) directories of each shared object, ``$ORIGIN`` expanded; *rpath*
    True/False: only those from a ``DT_RPATH``/``DT_RUNPATH``. Objects that cannot be read are skipped (the loader
    would fail on them, and the caller looks elsewhere)."""
    dirs: list[str] = []
    for path in objects:
        try:
            found = elf.dynamic(path)
        except (OSError, ValueError):
            continue
        if rpath is None or found.rpath == rpath:
            dirs.extend(_expand(entry, path.parent) for entry in found.runpath)
    return dirs


def package_dir(name: str) -> Path | None:
    """The directory of the top-level package *name*, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def search_dirs(environ: Mapping[str, str], needing: Iterable[Path] = (), wheel_first: bool = True,
                last: Iterable[str] = ()) -> list[str]:
    """Where ``libnvinfer.so.<major>`` is looked for, in the loader's order: the pip wheel's ``tensorrt_libs``
    (first when *wheel_first*: the ``tensorrt`` bindings import it before they load; last otherwise, e.g. for ONNX
    Runtime, which does not), the *needing* objects' ``DT_RPATH``, ``LD_LIBRARY_PATH``, their ``DT_RUNPATH``, the
    system directories, then *last* (places only a packaging of the caller's own uses)."""
    wheel = package_dir("tensorrt_libs")
    needing = list(needing)  # ld.so(8): DT_RPATH (where there is no DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH, ...
    ordered = [*runpath_of(needing, rpath=True), *(d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d),
               *runpath_of(needing, rpath=False), *SYSTEM_LIB_DIRS]
    if wheel is not None:
        ordered = [str(wheel), *ordered] if wheel_first else [*ordered, str(wheel)]
    return list(dict.fromkeys([*ordered, *last]))


def find(dirs: Iterable[str], majors: Iterable[int]) -> Path | None:
    """The first ``libnvinfer.so.<major>`` in *dirs* (each directory tried for every major, in order)."""
    for directory in dirs:
        for major in majors:
            candidate = Path(directory) / f"libnvinfer.so.{major}"
            if candidate.exists():
                return candidate
    return None


def cuda_majors(objects: Iterable[Path]) -> dict[str, str]:
    """``{CUDA major: the soname that says it}`` from the ``DT_NEEDED`` of *objects* (unreadable ones skipped)."""
    found: dict[str, str] = {}
    for path in objects:
        try:
            needed = elf.dynamic(path).needed
        except (OSError, ValueError) as exc:
            log.debug("cannot read the dynamic section of %s: %s", path, exc)
            continue
        for name in needed:
            match = CUDA_SONAME.fullmatch(name)
            if match:
                found.setdefault(match[1], f"{name} (linked by {path.name})")
    return found


def cuda_major(library: Path) -> tuple[str | None, str]:
    """``(CUDA major, what says it)`` of the TensorRT whose ``libnvinfer.so.<major>`` is *library*: from its and its
    siblings' ``DT_NEEDED``; ``(None, why not)`` where they link none or disagree."""
    major = library.name.rsplit(".so.", 1)[-1].split(".")[0]
    objects = [library, *(library.parent / s.format(major) for s in _SIBLINGS)]
    found = cuda_majors(p for p in objects if p.exists())
    if len(found) == 1:
        [(cuda, why)] = found.items()
        return cuda, why
    if found:
        return None, f"{library} links several CUDA majors ({', '.join(found.values())})"
    return None, f"{library} (and its siblings) link no CUDA library by name (a static CUDA runtime)"


def mapped(pattern: re.Pattern[str], maps: Path = Path("/proc/self/maps")) -> list[Path]:
    """The files mapped into this process whose name matches *pattern* (``/proc/self/maps``), in mapping order."""
    try:
        text = maps.read_text(errors="replace")
    except OSError:
        return []
    paths = (line.split(None, 5)[5].strip() for line in text.splitlines() if len(line.split(None, 5)) == 6)
    return [Path(p) for p in dict.fromkeys(paths) if p.startswith("/") and pattern.fullmatch(Path(p).name)]


def versions(library: Path) -> tuple[tuple[int, int, int, int] | None, str]:
    """``((major, minor, patch, build), "")`` as the library reports them, or ``(None, why not)``: the library
    cannot be loaded here (e.g. a dependency is missing) or lacks the functions (before TensorRT 10)."""
    try:
        handle = ctypes.CDLL(os.fspath(library))  # RTLD_LOCAL; a later dlopen by soname finds this one
        numbers = tuple(int(getattr(handle, name)()) for name in VERSION_FUNCTIONS)
    except (OSError, AttributeError) as exc:
        return None, str(exc)
    return numbers, ""  # type: ignore[return-value]


__all__ = ["CUDA_SONAME", "SYSTEM_LIB_DIRS", "VERSION_FUNCTIONS", "cuda_major", "cuda_majors", "find", "mapped",
           "package_dir", "runpath_of", "search_dirs", "versions"]
