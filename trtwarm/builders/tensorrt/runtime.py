"""The load side of TensorRT: plugin registration, deserialization, refit of weight-stripped plans, engine facts.

The order of the first calls is the contract tested everywhere (with a recording stand-in for the module that
refuses to produce anything): :func:`ready` runs before ``trt.Builder`` (so before parsing) and before
``trt.Runtime`` (so before deserializing), whether or not ``--plugin`` was given, as trtexec
(``samples/trtexec/trtexec.cpp`` main: ``initLibNvInferPlugins(&logger, "")`` then the ``--plugins`` libraries) and
Polygraphy's loaders do: the ONNX parser imports standard ops through the plugin registry (``RoiAlign`` ->
``ROIAlign_TRT``, ``EfficientNMS_TRT``, ``ScatterElements`` with a reduction), and engines holding them fail to
deserialize without it.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

from trtwarm import strictjson
from trtwarm.builders.tensorrt import plugins
from trtwarm.errors import EntryInvalid

log = logging.getLogger("trtwarm.build")
#: per TensorRT module: (module, logger) kept for the life of the process. ``init_libnvinfer_plugins`` stores the
#: logger pointer globally (``plugin/api/inferPlugin.cpp`` release/10.16 L109: ``gLogger = logger``), so
#: a logger collected afterwards would be a dangling pointer inside every plugin's log calls.
_READY: dict[int, tuple[Any, Any]] = {}
#: layer-precision words as the engine inspector prints them ("Half", "Float", "Int8", ... and 11.x's "FP16")
_PRECISION_WORDS = {"half": "FP16", "fp16": "FP16", "float": "FP32", "fp32": "FP32", "bf16": "BF16", "int8": "INT8",
                    "fp8": "FP8", "int4": "INT4", "fp4": "FP4", "int32": "INT32", "int64": "INT64", "bool": "BOOL"}
LAYER_LIMIT = 1000  # at most this many per-layer precisions in a manifest (it must stay well under its 1 MiB limit)
NAME_LIMIT = 160  # fused layer names can run to kilobytes
INFO_LIMIT = 256 << 20  # the inspector's JSON of an engine of thousands of layers: tens of MB


def ready(trt: Any, logger: Any, libraries: tuple[Path, ...] = (), versioned: bool = False) -> list[Any]:
    """Register TensorRT's bundled plugins once per process, then make the ``--plugin`` libraries' creators available
    (each library loaded once per process, through the registry for a *versioned* build: :func:`.plugins.load`).

    ``trt.init_libnvinfer_plugins(logger, namespace)``: ``python/src/infer/pyPlugin.cpp`` L3933 (release/10.16 and
    main); its docstring: "This function should be called once before accessing the Plugin Registry".
    :return: the libraries' handles
    """
    if id(trt) not in _READY:
        trt.init_libnvinfer_plugins(logger, "")
        _READY[id(trt)] = (trt, logger)
    return plugins.load(trt, libraries, versioned) if libraries else []


def deserialize(trt: Any, logger: Any, blob: bytes, libraries: tuple[Path, ...], host_code: bool) -> tuple[Any, Any]:
    """``(runtime, engine or None)``: plugins first, then ``trt.Runtime(logger).deserialize_cuda_engine(blob)``.

    ``engine_host_code_allowed`` (``pyCore.cpp`` release/10.16 L1984) only for version-compatible plans, whose
    embedded lean runtime is executable code. The runtime is returned because the engine must not outlive it.
    """
    ready(trt, logger, libraries)
    runtime = trt.Runtime(logger)
    runtime.engine_host_code_allowed = host_code
    return runtime, runtime.deserialize_cuda_engine(blob)


def refit_from_onnx(trt: Any, logger: Any, engine: Any, model: Path) -> None:
    """Supply a weight-stripped engine's weights from the ONNX file (``samples/python/sample_weight_stripping/
    refit_engine_and_infer.py``, release/10.16: ``Refitter``, ``OnnxParserRefitter.refit_from_file``,
    ``refit_cuda_engine``). :raises EntryInvalid: a step returned False, with TensorRT's words."""
    refitter = trt.Refitter(engine, logger)
    parser_refitter = trt.OnnxParserRefitter(refitter, logger)
    if not parser_refitter.refit_from_file(str(model)):
        errors = [str(parser_refitter.get_error(i)) for i in range(getattr(parser_refitter, "num_errors", 0))]
        raise EntryInvalid(f"cannot refit the weight-stripped engine from {model.name}: "
                           f"{'; '.join(errors) or 'refit_from_file returned False'}")
    if not refitter.refit_cuda_engine():
        raise EntryInvalid(f"refit_cuda_engine failed for the weight-stripped engine: {logger.tail(3)}")


def summarize_layers(info: str) -> dict[str, Any]:
    """Per-layer precision from the inspector's JSON (``get_engine_information(LayerInformationFormat.JSON)``).

    With ``ProfilingVerbosity.DETAILED`` each layer is an object whose outputs name a format and data type
    ("Format/Datatype" on 10.x, a separate "DataType" on 11.x); otherwise layers are names only. Tolerant of both:
    unknown shapes give ``None`` precisions, never an error.
    """
    try:
        layers = strictjson.loads(info, limit=INFO_LIMIT).get("Layers", [])
    except (strictjson.JSONRefused, AttributeError):
        return {"layers_by_precision": {}, "layer_precisions": {}}
    precisions: dict[str, str | None] = {}
    for index, layer in enumerate(layers):
        if not isinstance(layer, dict):
            precisions[str(layer)[:NAME_LIMIT]] = None
            continue
        outputs = layer.get("Outputs") or [{}]
        first = outputs[0] if isinstance(outputs[0], dict) else {}
        text = str(first.get("DataType") or first.get("Format/Datatype") or "")
        word = next((w for w in re.findall(r"[A-Za-z]+\d*", text) if w.lower() in _PRECISION_WORDS), None)
        precisions[str(layer.get("Name", index))[:NAME_LIMIT]] = _PRECISION_WORDS[word.lower()] if word else None
    counts = Counter(p for p in precisions.values() if p)
    kept = dict(list(precisions.items())[:LAYER_LIMIT])
    return {"layers_by_precision": dict(sorted(counts.items())), "layer_precisions": kept,
            "layer_precisions_truncated": len(precisions) > LAYER_LIMIT}


def engine_info(trt: Any, engine: Any) -> dict[str, Any]:
    """What the engine itself reports (not what was asked), for the manifest.

    ``num_layers``, ``num_optimization_profiles``, ``device_memory_size_v2`` (10.1+; 11.x removed
    ``device_memory_size``), ``hardware_compatibility_level``, ``refittable``, ``profiling_verbosity``,
    ``create_engine_inspector`` (``pyCore.cpp`` release/10.16 L1464-1584, main L1416-1525); ``get_engine_stat``
    (10.14+). There is no getter for the version-compatible flag on ``ICudaEngine`` (10.16 or 11.1).
    """
    memory = getattr(engine, "device_memory_size_v2", None)
    info: dict[str, Any] = {
        "layers": int(engine.num_layers), "profiles": int(engine.num_optimization_profiles),
        "device_memory_bytes": int(memory if memory is not None else engine.device_memory_size),
        "hardware_compatibility_level": getattr(engine.hardware_compatibility_level, "name", None),
        "refittable": bool(engine.refittable),
        "profiling_verbosity": getattr(engine.profiling_verbosity, "name", None)}
    if hasattr(engine, "get_engine_stat") and hasattr(trt, "EngineStat"):
        info["weights_bytes"] = int(engine.get_engine_stat(trt.EngineStat.TOTAL_WEIGHTS_SIZE))
        info["stripped_weights_bytes"] = int(engine.get_engine_stat(trt.EngineStat.STRIPPED_WEIGHTS_SIZE))
    inspector = engine.create_engine_inspector()
    if inspector is not None:
        info.update(summarize_layers(inspector.get_engine_information(trt.LayerInformationFormat.JSON)))
    return info


__all__ = ["LAYER_LIMIT", "deserialize", "engine_info", "ready", "refit_from_onnx", "summarize_layers"]
