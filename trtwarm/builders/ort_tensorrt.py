"""ONNX Runtime's TensorRT execution provider as a builder of EPContext models: the facts that decide its key and
whether a build really produced a context model. Pure (no onnxruntime-gpu needed), so tested everywhere.

* The EPContext model embeds a TensorRT engine, so the key holds the TensorRT the EP will load: the
  ``libnvinfer.so.<major>`` the dynamic loader finds (``LD_LIBRARY_PATH``, then the system library directories;
  a versioned real file name such as ``libnvinfer.so.10.16.1`` names it), else the installed ``tensorrt`` wheel.
* With dynamic input dimensions the EP may build the engine, and dump the context model, only at the first inference
  (ORT's ``tensorrt_execution_provider.cc`` compute function rebuilds on new shapes), so trtwarm requires ``--shape``
  for every dynamic input and runs one inference at the opt shapes before it looks for the file.
* An embedded engine stands for the whole model only when TensorRT took every node (one ``EPContext`` node,
  domain ``com.microsoft``, in the dumped graph: ``CreateCtxModel`` in ORT's ``onnx_ctx_model_helper.cc``).
* The version is read to the same three parts from both sources (a library file is named ``libnvinfer.so.10.16.1``,
  a wheel ``10.16.1.11``), so one TensorRT keys alike however it was installed; with the CUDA major the EP runs on
  (ONNX Runtime's build, else the TensorRT wheel's ``cuN``), so ``tensorrt-cu12-libs`` and ``-cu13-libs`` differ.
* The EP's profile options cannot name every input: ``MakeInputNameShapePair`` reads a name up to the first ``:`` and
  ``ParseProfileShapes`` splits the list at every ``,`` with no escape (``tensorrt_execution_provider_utils.h``), so
  such names (``x:0`` from tf2onnx) are refused before anything is built.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.model import ShapeSpec
from trtwarm.errors import BuildError, ConfigError
from trtwarm.model import InputInfo

SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/tensorrt/lib", "/usr/local/lib")
#: onnxruntime releases whose TensorRT EP is built against each TensorRT major (1.27: the first for TensorRT 11)
MIN_ORT = {10: (1, 18), 11: (1, 27)}
_DISTS = ("tensorrt-cu13-libs", "tensorrt-cu12-libs", "tensorrt-cu13", "tensorrt-cu12", "tensorrt")
VERSION_PARTS = 3  # what a library file name carries: libnvinfer.so.<major>.<minor>.<patch>


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:4])


def _three(text: str) -> str:
    """``10.16.01.11`` or ``10.7.0.post1`` -> ``10.16.1`` / ``10.7.0``: the leading numeric parts, leading zeros
    dropped, as many as a library file name carries."""
    parts = []
    for piece in text.split(".")[:VERSION_PARTS]:
        if not piece.isdigit():
            break
        parts.append(str(int(piece)))
    return ".".join(parts)


def ort_cuda_major(package_dir: Path | None = None) -> str | None:
    """The CUDA major ONNX Runtime was built with, without importing it: ``cuda_version`` in
    ``onnxruntime/capi/build_and_package_info.py`` (absent in CPU builds: ``onnxruntime_validation.py``,
    ``get_package_name_and_version_info``, onnxruntime 1.32). None when not found."""
    if package_dir is None:
        import importlib.util

        spec = importlib.util.find_spec("onnxruntime")
        if spec is None or not spec.submodule_search_locations:
            return None
        package_dir = Path(list(spec.submodule_search_locations)[0])
    try:
        text = (package_dir / "capi" / "build_and_package_info.py").read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r"^cuda_version\s*=\s*['\"](\d+)", text, re.MULTILINE)
    return match[1] if match else None


def check_profile_names(shapes: tuple[ShapeSpec, ...]) -> None:
    """:raises ConfigError: an input name the EP's profile strings cannot express (``:`` or ``,``; no escape)."""
    bad = [s.name for s in shapes if ":" in s.name or "," in s.name]
    if bad:
        raise ConfigError(f"--ort-provider tensorrt cannot give a profile for the input(s) {', '.join(map(repr, bad))}"
                          ": ONNX Runtime's TensorRT EP reads a name in trt_profile_*_shapes up to its first ':' and "
                          "splits the list at every ',', with no escape, so the engine would get a wrong profile",
                          hint="rename the inputs (e.g. onnx.compose / the exporter's input_names), or use "
                          "--builder tensorrt, which takes any name")


def libnvinfer_version(dirs: list[str]) -> str | None:
    """The TensorRT version of the first ``libnvinfer.so.<major>`` in *dirs* whose real file name carries it
    (``libnvinfer.so.10 -> libnvinfer.so.10.16.1``); None when none is found or no name says more than the major."""
    for directory in dirs:
        for major in (11, 10):
            link = Path(directory) / f"libnvinfer.so.{major}"
            if not link.exists():
                continue
            real = Path(os.path.realpath(link)).name
            match = re.fullmatch(r"libnvinfer\.so\.(\d+(?:\.\d+)+)", real)
            if match and match.group(1).count(".") >= 2:
                return match.group(1)
            return None  # the loader would take this one, and its name says nothing more: ask the wheel
    return None


def ep_tensorrt_version(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """``(version, CUDA major of its wheel or None)`` of the TensorRT the EP will load here, the version as
    ``major.minor.patch`` from either source. :raises ConfigError: none can be found (exit 2)."""
    from importlib import metadata

    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(SYSTEM_LIB_DIRS)
    found = libnvinfer_version(dirs)
    if found:
        return _three(found), None
    for dist in _DISTS:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        cuda = re.search(r"-cu(\d+)", dist)
        return _three(version), (cuda[1] if cuda else None)
    raise ConfigError("--ort-provider tensorrt: cannot tell which TensorRT ONNX Runtime will load (no versioned "
                      "libnvinfer.so on LD_LIBRARY_PATH or in the system library directories, no tensorrt wheel)",
                      hint="pip install the tensorrt wheel the image uses (e.g. tensorrt-cu12-libs==10.16.1.11), or "
                      "put TensorRT's lib directory (with libnvinfer.so.10.x.y) on LD_LIBRARY_PATH")


def check_ort_for_tensorrt(ort_version: str, tensorrt_version: str) -> None:
    """:raises ConfigError: this onnxruntime's TensorRT EP predates the TensorRT major (1.27+ for TensorRT 11)."""
    major = (_numbers(tensorrt_version) or (0,))[0]
    need = MIN_ORT.get(major, MIN_ORT[max(MIN_ORT)] if major > max(MIN_ORT) else None)
    if need and _numbers(ort_version)[:2] < need:
        want = ".".join(map(str, need))
        raise ConfigError(f"onnxruntime {ort_version} cannot drive TensorRT {tensorrt_version}: its TensorRT EP needs "
                          f"onnxruntime {want} or newer", hint=f"pip install 'onnxruntime-gpu>={want}'")


def ep_options(shapes: tuple[ShapeSpec, ...]) -> dict[str, str]:
    """The TensorRT EP's provider options trtwarm sets (they change the embedded engine, so they are in the key)."""
    if not shapes:
        return {}
    check_profile_names(shapes)
    return {f"trt_profile_{kind}_shapes": ",".join(f"{s.name}:{'x'.join(map(str, getattr(s, kind)))}" for s in shapes)
            for kind in ("min", "opt", "max")}


def warmup_shapes(inputs: tuple[InputInfo, ...], shapes: tuple[ShapeSpec, ...]) -> dict[str, tuple[int, ...]] | None:
    """Shapes for the one inference that makes the EP build (and dump) a dynamic model; None: all inputs are static,
    the engine is built at session creation. :raises ConfigError: a dynamic input without ``--shape``."""
    dynamic = [i.name for i in inputs if any(d is None for d in i.dims)]
    if not dynamic:
        return None
    opt = {s.name: tuple(s.opt) for s in shapes}
    missing = [name for name in dynamic if name not in opt]
    if missing:
        raise ConfigError(f"--ort-provider tensorrt needs --shape for the dynamic inputs {', '.join(missing)}: "
                          "without a profile the TensorRT EP builds its engine only at the first inference, for "
                          "whatever shape that inference has", hint="give --shape NAME=MIN:OPT:MAX for each of them")
    return {i.name: opt.get(i.name) or tuple(int(d or 1) for d in i.dims) for i in inputs}


def foreign_nodes(graph: Any) -> list[str]:
    """The nodes of a dumped context model that are not the TensorRT EP's ``EPContext`` (``op (name)``)."""
    return [f"{n.op_type} ({n.name or '?'})" for n in graph.node
            if not (n.op_type == "EPContext" and n.domain == "com.microsoft")]


def check_context_model(path: Path) -> None:
    """:raises BuildError: no context model was written, or parts of the model did not go to TensorRT."""
    import onnx

    if not path.is_file() or path.stat().st_size == 0:
        raise BuildError("ONNX Runtime's TensorRT EP wrote no EPContext model, even after one inference at the opt "
                         "shapes", hint="check the TensorRT EP's log above; the model may not be supported by TensorRT")
    others = foreign_nodes(onnx.load(str(path), load_external_data=False).graph)
    if others:
        raise BuildError(f"TensorRT took only part of the model: {len(others)} node(s) outside it, e.g. "
                         f"{', '.join(others[:3])}; an embedded-engine context model needs the whole model",
                         hint="use --builder tensorrt (its parser errors name the unsupported node), or "
                         "--ort-provider cuda")


__all__ = ["MIN_ORT", "VERSION_PARTS", "check_context_model", "check_ort_for_tensorrt", "check_profile_names",
           "ep_options", "ep_tensorrt_version", "foreign_nodes", "libnvinfer_version", "ort_cuda_major",
           "warmup_shapes"]
