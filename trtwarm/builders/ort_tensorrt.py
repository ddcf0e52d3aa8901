"""ONNX Runtime's TensorRT execution provider as a builder of EPContext models: the facts that decide its key and
whether a build really produced a context model. Pure (no onnxruntime-gpu needed), so tested everywhere.

* The EPContext model embeds a TensorRT engine, so the key holds the TensorRT the EP will load: the
  ``libnvinfer.so.<major>`` the dynamic loader finds (the provider library's RUNPATH, ``LD_LIBRARY_PATH``, the
  system library directories, the pip wheel's ``tensorrt_libs``), all four of its version numbers read from the
  library itself (:func:`.tensorrt.library.versions`), and the CUDA major the EP runs on (ONNX Runtime's build, else
  the TensorRT wheel's ``cuN`` or what the library links).
* The EP never takes a setting from the environment: every session gets the explicit option set
  :data:`PINNED_OPTIONS` (plus the profiles), and with any option given the EP reads no ``ORT_TENSORRT_*``
  variable (see :data:`PINNED_OPTIONS`), so two Pods with different variables cannot share an entry built
  differently.
* With dynamic input dimensions the EP may build the engine, and dump the context model, only at the first inference
  (ORT's ``tensorrt_execution_provider.cc`` compute function rebuilds on new shapes), so trtwarm requires ``--shape``
  for every dynamic input and runs one inference at the opt shapes before it looks for the file.
* An embedded engine stands for the whole model only when TensorRT took every node (one ``EPContext`` node,
  domain ``com.microsoft``, in the dumped graph: ``CreateCtxModel`` in ORT's ``onnx_ctx_model_helper.cc``).
* The EP's profile options cannot name every input: ``MakeInputNameShapePair`` reads a name up to the first ``:`` and
  ``ParseProfileShapes`` splits the list at every ``,`` with no escape (``tensorrt_execution_provider_utils.h``), so
  such names (``x:0`` from tf2onnx) are refused before anything is built.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.builders.tensorrt import elf, library
from trtwarm.builders.tensorrt.compat import canonical_version
from trtwarm.builders.tensorrt.cudamajor import from_dist
from trtwarm.errors import BuildError, ConfigError
from trtwarm.model import InputInfo, ShapeSpec

log = logging.getLogger("trtwarm.build")
_FIND_HINT = ("pip install the tensorrt wheel the image uses (e.g. tensorrt-cu12-libs==10.16.1.11), or put TensorRT's "
              "lib directory (with libnvinfer.so.10.x.y) on LD_LIBRARY_PATH")

#: onnxruntime releases whose TensorRT EP is built against each TensorRT major (1.27: the first for TensorRT 11)
MIN_ORT = {10: (1, 18), 11: (1, 27)}
_DISTS = ("tensorrt-cu13-libs", "tensorrt-cu12-libs", "tensorrt-cu13", "tensorrt-cu12", "tensorrt")
VERSION_PARTS = 3  # what a library file name carries: libnvinfer.so.<major>.<minor>.<patch>
#: The TensorRT EP's options trtwarm always passes, each at ONNX Runtime's own default. Passing any option is what
#: keeps the environment out: Python hands the EP an options struct only for a non-empty dict
#: (``GenerateProviderOptionsMap`` in ``onnxruntime/python/onnxruntime_pybind_state.cc`` skips empty ones, and then
#: ``TensorrtProviderFactoryCreator::Create(device_id)`` sets ``has_trt_options = false``); the factory for a struct
#: sets ``info.has_trt_options = true`` (``CreateExecutionProviderFactory`` in ``tensorrt_provider_factory.cc``);
#: and the EP's constructor (``TensorrtExecutionProvider::TensorrtExecutionProvider`` in
#: ``tensorrt_execution_provider.cc``) takes every setting from the struct under ``if (info.has_trt_options)`` and
#: reads the ``ORT_TENSORRT_*`` variables (FP16, INT8, workspace, engine cache, profiles, ...) only in its ``else``
#: branch, as ``CreateTensorRTCustomOpDomainList`` does ``ORT_TENSORRT_EXTRA_PLUGIN_LIB_PATHS``. Unnamed options take
#: the struct's defaults of the ONNX Runtime version, which the key holds. All of these exist since onnxruntime 1.16.
PINNED_OPTIONS = {"device_id": "0", "trt_fp16_enable": "False", "trt_int8_enable": "False",
                  "trt_engine_cache_enable": "False", "trt_timing_cache_enable": "False",
                  "trt_builder_optimization_level": "3", "trt_max_partition_iterations": "1000",
                  "trt_min_subgraph_size": "1", "trt_layer_norm_fp32_fallback": "False",
                  "trt_sparsity_enable": "False"}
#: variables the EP reads only when it is given no options (``tensorrt_env_vars`` in
#: ``tensorrt_execution_provider.h``): set, they are ignored, and trtwarm says so
ENV_PREFIXES = ("ORT_TENSORRT_", "ORT_DUMP_EP_CONTEXT_MODEL", "ORT_EP_CONTEXT_")


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


def build_info(package_dir: Path | None = None) -> dict[str, str]:
    """What the ``onnxruntime`` package's own ``capi/build_and_package_info.py`` says (``package_name``,
    ``__version__``, ``cuda_version`` in GPU builds: ``onnxruntime_validation.py``,
    ``get_package_name_and_version_info``, onnxruntime 1.32), read without importing it; empty where it is missing.

    These are the files ``import onnxruntime`` loads: ``onnxruntime`` and ``onnxruntime-gpu`` installed together
    share one package directory (the last installed wins), so their metadata cannot say which one is there."""
    if package_dir is None:
        package_dir = library.package_dir("onnxruntime")
        if package_dir is None:
            return {}
    try:
        text = (package_dir / "capi" / "build_and_package_info.py").read_text(errors="replace")
    except OSError:
        return {}
    return dict(re.findall(r"^(\w+)\s*=\s*['\"]([^'\"\n]*)['\"]", text, re.MULTILINE))


def ort_cuda_major(package_dir: Path | None = None) -> str | None:
    """The CUDA major ONNX Runtime was built with (``cuda_version`` of :func:`build_info`; absent in CPU builds).
    None when not found."""
    match = re.match(r"(\d+)", build_info(package_dir).get("cuda_version", ""))
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
    """The TensorRT version the file name of the first ``libnvinfer.so.<major>`` in *dirs* carries
    (``libnvinfer.so.10 -> libnvinfer.so.10.16.1``: three numbers at most); None when none is found or its name
    says no more than the major."""
    found = library.find(dirs, (11, 10))
    return None if found is None else _name_version(found)


def _name_version(found: Path) -> str | None:
    match = re.fullmatch(r"libnvinfer\.so\.(\d+(?:\.\d+)+)", Path(os.path.realpath(found)).name)
    return match.group(1) if match and match.group(1).count(".") >= 2 else None


def _provider_library(kind: str = "tensorrt") -> list[Path]:
    """ONNX Runtime's TensorRT provider library, whose RUNPATH the loader follows to ``libnvinfer`` (not imported);
    *kind* ``*``: every provider library (the CUDA one links the CUDA runtime too)."""
    where = library.package_dir("onnxruntime")
    return sorted((where / "capi").glob(f"libonnxruntime_providers_{kind}.so*")) if where is not None else []


def nvinfer_majors(providers: list[Path]) -> tuple[int, ...]:
    """The ``libnvinfer.so.<major>`` the provider library names in its ``DT_NEEDED`` (the one the loader resolves),
    newest first; where it cannot be read (or is not there), every major the EP may load, (11, 10)."""
    majors = set()
    for path in providers:
        try:
            needed = elf.dynamic(path).needed
        except (OSError, ValueError):
            continue
        majors.update(int(m[1]) for name in needed for m in [re.fullmatch(r"libnvinfer\.so\.(\d+)", name)] if m)
    return tuple(sorted(majors, reverse=True)) or (11, 10)


def ep_tensorrt_version(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """``(version, CUDA major or None)`` of the TensorRT the EP will load here.

    The ``libnvinfer.so.<major>`` the provider library names (:func:`nvinfer_majors`), as the dynamic loader finds
    it (the provider's RUNPATH, ``LD_LIBRARY_PATH``, the system directories, then the pip wheel's
    ``tensorrt_libs``), its four numbers read from the library itself (:func:`.library.versions`); where it cannot
    be loaded here (e.g. a dependency this process cannot find), the numbers its wheel or its file name carry
    (three), with a warning; no library at all: the installed ``tensorrt`` wheel's, if of that major. The CUDA
    major: the wheel's ``cuN`` for the wheel's library, else what the library links.
    :raises ConfigError: nothing tells (exit 2)
    """
    providers = _provider_library()
    majors = nvinfer_majors(providers)
    found = library.find(library.search_dirs(environ, providers, wheel_first=False), majors)
    wheel = _wheel()
    if found is None:
        names = " or ".join(f"libnvinfer.so.{m}" for m in majors)
        if wheel is None or (_numbers(wheel[0]) or (0,))[0] not in majors:
            raise ConfigError(f"--ort-provider tensorrt: cannot tell which TensorRT ONNX Runtime will load (no {names} "
                              "on LD_LIBRARY_PATH or in the system library directories, no tensorrt wheel of that "
                              "major)", hint=_FIND_HINT)
        return _canonical(wheel[0]), wheel[1]
    own = wheel if wheel is not None and _in_wheel(found) else None
    numbers, why = library.versions(found)
    cuda = own[1] if own else library.cuda_major(found)[0]
    if numbers is not None:
        return ".".join(map(str, numbers)), cuda
    told = own[0] if own else _name_version(found)
    if told is None:
        raise ConfigError(f"--ort-provider tensorrt: ONNX Runtime would load {found}, whose version cannot be read "
                          f"here ({why}) and whose file name names only its major", hint=_FIND_HINT)
    exact = canonical_version(told) is not None  # a wheel's four numbers; a file name carries three
    log.log(logging.DEBUG if exact else logging.WARNING, "cannot read the version from %s here (%s): keyed by %s, "
            "what its %s says%s", found, why, told, "wheel" if own else "file name",
            "" if exact else "; a plan of another build of it is caught by the load check (a rebuild)")
    return _canonical(told), cuda


def ep_cuda_major(trt_cuda: str | None) -> str:
    """The CUDA major the EP runs on: ONNX Runtime's build (:func:`ort_cuda_major`; one CUDA runtime per process),
    else the TensorRT's (*trt_cuda*: its wheel or what its library links), else the CUDA runtime ONNX Runtime's
    provider libraries link (their ``DT_NEEDED``). :raises ConfigError: none tells (exit 2): a key without it would
    be shared by the CUDA 12 and CUDA 13 builds"""
    told = ort_cuda_major() or trt_cuda
    if told:
        return told
    linked = library.cuda_majors(_provider_library("*"))
    if len(linked) == 1:
        return next(iter(linked))
    raise ConfigError("--ort-provider tensorrt: cannot tell which CUDA major ONNX Runtime's TensorRT EP runs on: "
                      "onnxruntime's capi/build_and_package_info.py names no cuda_version, the TensorRT library and "
                      "its wheel name none, and its provider libraries link "
                      f"{' and '.join(linked.values()) if linked else 'no CUDA runtime by name'}; a key without it "
                      "would be shared by the CUDA 12 and CUDA 13 builds",
                      hint="install an onnxruntime-gpu wheel as published (its build_and_package_info.py names its "
                      "CUDA), e.g. pip install onnxruntime-gpu; and TensorRT from a tensorrt-cuN wheel")


def _wheel() -> tuple[str, str | None] | None:
    """``(version, CUDA major of its name)`` of the installed TensorRT wheel, or None."""
    from importlib import metadata

    for dist in _DISTS:
        try:
            return metadata.version(dist), from_dist(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _in_wheel(found: Path) -> bool:
    wheel_dir = library.package_dir("tensorrt_libs")
    return wheel_dir is not None and Path(os.path.realpath(found)).parent == Path(os.path.realpath(wheel_dir))


def _canonical(text: str) -> str:
    """All four numbers where *text* has them (``10.16.01.11`` -> ``10.16.1.11``), else its leading numbers
    (``10.16.1``, ``10.7.0.post1`` -> ``10.7.0``)."""
    return canonical_version(text) or _three(text)


def check_ort_for_tensorrt(ort_version: str, tensorrt_version: str) -> None:
    """:raises ConfigError: this onnxruntime's TensorRT EP predates the TensorRT major (1.27+ for TensorRT 11)."""
    major = (_numbers(tensorrt_version) or (0,))[0]
    need = MIN_ORT.get(major, MIN_ORT[max(MIN_ORT)] if major > max(MIN_ORT) else None)
    if need and _numbers(ort_version)[:2] < need:
        want = ".".join(map(str, need))
        raise ConfigError(f"onnxruntime {ort_version} cannot drive TensorRT {tensorrt_version}: its TensorRT EP needs "
                          f"onnxruntime {want} or newer", hint=f"pip install 'onnxruntime-gpu>={want}'")


def ignored_environment(environ: Mapping[str, str]) -> list[str]:
    """The EP's own variables set in *environ*, which it ignores since trtwarm always passes options."""
    return sorted(name for name in environ if name.startswith(ENV_PREFIXES) and name != "ORT_TENSORRT_UNAVAILABLE")


def ep_options(shapes: tuple[ShapeSpec, ...]) -> dict[str, str]:
    """The TensorRT EP's profile options from ``--shape`` (they change the embedded engine, so they are in the key;
    every session gets :data:`PINNED_OPTIONS` besides)."""
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


__all__ = ["ENV_PREFIXES", "MIN_ORT", "PINNED_OPTIONS", "VERSION_PARTS", "build_info", "check_context_model",
           "check_ort_for_tensorrt", "check_profile_names", "ep_cuda_major", "ep_options", "ep_tensorrt_version",
           "foreign_nodes", "ignored_environment", "libnvinfer_version", "nvinfer_majors", "ort_cuda_major",
           "warmup_shapes"]
