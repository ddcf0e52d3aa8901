"""The CUDA major the installed TensorRT runs on, for the key's ``builder.cuda``: a cu12 and a cu13 build of one
TensorRT make different engines and timing caches, and must never share an entry.

Asked in this order, the first that answers with one major wins (each answer is logged with its source):

1. the distribution's name: pip's ``tensorrt-cu12-bindings``/``-libs``/``tensorrt-cu12`` (``_cu{CUDA_MAJOR}_`` in
   ``python/packaging/tensorrt_build_backend/__init__.py``). NVIDIA's tarball and NGC images install a wheel named
   plain ``tensorrt``, which says nothing;
2. the library itself: the ``libcudart.so.N`` (or ``libcublas``, ``libcublasLt``, ``libnvrtc``) that the
   ``libnvinfer.so.<major>`` the bindings load links (:func:`.library.cuda_major`);
3. the packages installed beside it: the Debian package of that library (NGC images and NVIDIA's repository:
   ``libnvinfer10`` ``10.16.1.11-1+cuda12.9``; dpkg's database under ``DPKG_ADMINDIR``, as dpkg(1) reads it,
   default ``/var/lib/dpkg``), then the CUDA runtime: pip's ``nvidia-cuda-runtime-cu12`` (which
   ``tensorrt-cu12-libs`` requires; from CUDA 13 ``nvidia-cuda-runtime`` 13.x) or Debian's ``cuda-cudart-12-9``;
   a kind that names two majors says nothing;
4. after ``import tensorrt`` (only now: it loads hundreds of MB): the ``libnvinfer`` and ``libcudart`` mapped
   into this process (``/proc/self/maps``).

None answers: :class:`~trtwarm.errors.ConfigError` (exit 2) asking for ``--tensorrt-version VERSION+cuN``, never a
key with ``cuda: null`` (which CUDA 12 and CUDA 13 images of one TensorRT would share).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from trtwarm.builders.tensorrt import library
from trtwarm.errors import ConfigError

log = logging.getLogger("trtwarm.build")
DPKG_STATUS = Path("/var/lib/dpkg/status")
DPKG_ADMINDIR = "DPKG_ADMINDIR"  # dpkg(1): "If set and the --admindir option has not been specified, it will be used
# as the dpkg data directory"
_STATUS_LIMIT = 64 << 20
_NVINFER = re.compile(r"libnvinfer\.so\.\d+(?:\.\d+)*")
_CUDART = re.compile(r"libcudart\.so\.(\d+)(?:\.\d+)*")


def from_dist(dist: str) -> str | None:
    """``tensorrt-cu12-bindings`` -> ``12``; None for a name without ``cuN``."""
    return next((part[2:] for part in re.split(r"[-_]", dist) if part[:2] == "cu" and part[2:].isdigit()), None)


def dpkg_installed(status: Path = DPKG_STATUS) -> dict[str, str]:
    """``{package: version}`` of the installed Debian packages (empty where there is no dpkg database)."""
    try:
        with open(status, "rb") as handle:
            text = handle.read(_STATUS_LIMIT).decode("utf-8", "replace")
    except OSError:
        return {}
    installed = {}
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+):[ \t]*(.*)$", stanza, re.MULTILINE))
        if fields.get("Package") and fields.get("Version") and fields.get("Status", "").endswith(" installed"):
            installed[fields["Package"]] = fields["Version"]
    return installed


def dpkg_status(environ: Mapping[str, str]) -> Path:
    """dpkg's ``status`` file: under ``$DPKG_ADMINDIR`` where it is set (dpkg(1)), else :data:`DPKG_STATUS`."""
    admin = environ.get(DPKG_ADMINDIR, "").strip()
    return Path(admin) / "status" if admin else DPKG_STATUS


def _one(found: dict[str, str]) -> tuple[str, str] | None:
    return next(iter(found.items())) if len(found) == 1 else None


def from_packages(trt_major: int, status: Path = DPKG_STATUS) -> tuple[str, str] | None:
    """``(CUDA major, which package says it)`` from the packages beside TensorRT (step 3), or None."""
    debs = dpkg_installed(status)
    own_version = debs.get(f"libnvinfer{trt_major}", "")
    own_match = re.search(r"\+cuda(\d+)", own_version)
    own = {own_match[1]: f"the Debian package libnvinfer{trt_major} {own_version}"} if own_match else {}
    pip: dict[str, str] = {}
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", str(dist.metadata["Name"] or "")).lower()
        match = re.fullmatch(r"nvidia-cuda-runtime(?:-cu(\d+))?", name)
        if match:
            pip.setdefault(match[1] or dist.version.split(".")[0], f"pip's {name} {dist.version}")
    cudart = {m[1]: f"the Debian package {p}" for p in debs for m in [re.fullmatch(r"cuda-cudart-(\d+)-\d+", p)] if m}
    return _one(own) or _one(pip) or _one(cudart)


def from_process(trt_major: int) -> tuple[str, str] | None:
    """Step 4: import TensorRT, then read what it mapped into this process."""
    try:
        import tensorrt  # noqa: F401 - imported for what it loads
    except Exception as exc:  # noqa: BLE001 - a broken install answers nothing here; the caller says what to do
        log.debug("import tensorrt failed: %s", exc)
        return None
    for nvinfer in library.mapped(_NVINFER):
        cuda, why = library.cuda_major(nvinfer)
        if cuda:
            return cuda, why
    majors = {m[1]: f"{p.name} loaded in this process" for p in library.mapped(_CUDART)
              for m in [_CUDART.fullmatch(p.name)] if m}
    return _one(majors)


def cuda_major(dist: str, version: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """``(CUDA major, how it was told)`` of the installed TensorRT *version* from distribution *dist*.

    :raises ConfigError: it cannot be told (exit 2), asking for ``+cuN``
    """
    told = from_dist(dist)
    if told:
        return told, f"the distribution {dist}"
    trt_major = int(version.split(".")[0])
    nvinfer = installed_library(version, environ)
    cuda, why = library.cuda_major(nvinfer) if nvinfer else (None, f"no libnvinfer.so.{trt_major} found")
    answer = (cuda, why) if cuda else from_packages(trt_major, dpkg_status(environ)) or from_process(trt_major)
    if answer:
        log.info("TensorRT %s runs on CUDA %s (%s)", version, answer[0], answer[1])
        return answer[0], answer[1]
    raise ConfigError(f"cannot tell which CUDA major TensorRT {version} runs on: the distribution {dist!r} does not "
                      f"name it, {why}, no package beside it names one, and none is loaded by `import tensorrt`; a "
                      "key without it would be shared by the CUDA 12 and CUDA 13 builds of this TensorRT",
                      hint=f"say it: --tensorrt-version {version}+cu12 (or +cu13: the CUDA of this image's TensorRT, "
                      "as its tarball or NGC tag names it)")


def installed_library(version: str, environ: Mapping[str, str]) -> Path | None:
    """The ``libnvinfer.so.<major>`` the installed ``tensorrt`` bindings of *version* load, where it can be found."""
    where = library.package_dir("tensorrt")  # last: a package that ships its libraries beside the bindings
    dirs = library.search_dirs(environ, _bindings(), last=[str(where)] if where is not None else [])
    return library.find(dirs, (int(version.split(".")[0]),))


def _bindings() -> list[Path]:
    """The ``tensorrt`` bindings' extension modules (whose RUNPATH the loader follows to ``libnvinfer``)."""
    where = library.package_dir("tensorrt")
    return sorted(where.glob("*.so")) if where is not None else []


__all__ = ["DPKG_ADMINDIR", "DPKG_STATUS", "cuda_major", "dpkg_installed", "dpkg_status", "from_dist", "from_packages",
           "from_process", "installed_library"]
