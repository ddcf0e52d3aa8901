"""What each ``--precision`` means to TensorRT, and the model and GPU facts that decide whether it can hold.

Pure (no TensorRT), so every rule here is tested everywhere. Sources, TensorRT ``include/NvInfer.h`` on
``release/10.16`` (``enum class BuilderFlag``): ``kFP16`` "Enable FP16 layer selection, with FP32 fallback";
``kINT8`` "Enable Int8 layer selection, with FP32 fallback with FP16 fallback if kFP16 also specified"; ``kBF16``
"only supported by NVIDIA Ampere and later GPUs"; ``kFP8`` "Enable plugins with FP8 input/output. This flag is not
supported when HardwareCompatibilityLevel::kAMPERE_PLUS is enabled" (so FP8 *compute* comes only from FP8 Q/DQ nodes
in a strongly typed network, which is how ModelOpt's FP8 ONNX is built: ``trtexec --stronglyTyped``). trtexec
``--best`` (``samples/common/sampleOptions.cpp`` release/10.16) sets INT8 and FP16 together, which is what INT8 users
expect. TensorRT 11 removed all of these flags and the calibrators: precision comes from the model only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trtwarm.errors import ConfigError, ModelError


@dataclass(frozen=True)
class Precision:
    """One ``--precision`` on TensorRT 10.x: the network's typing, the builder flags, what the model must carry."""

    strongly_typed: bool
    flags: tuple[str, ...]
    needs: str | None = None  # a quantization the model must contain ("int8" may come from a calibration cache)
    min_cc: tuple[int, int] | None = None
    meaning: str = ""


PRECISIONS = {
    "fp32": Precision(False, (), meaning="weakly typed, FP32 kernels (FP32 math may use TF32 unless --tf32 off)"),
    "fp16": Precision(False, ("FP16",), meaning="weakly typed, FP16 where faster, else FP32"),
    "bf16": Precision(False, ("BF16",), min_cc=(8, 0), meaning="weakly typed, BF16 where faster, else FP32; Ampere+"),
    "int8": Precision(False, ("INT8", "FP16"), needs="int8",
                      meaning="weakly typed, INT8 for layers with scales (Q/DQ nodes or --calibration-cache), then "
                      "FP16, then FP32 (trtexec --int8 --fp16)"),
    "fp8": Precision(True, (), needs="fp8", min_cc=(8, 9),
                     meaning="strongly typed: FP8 exactly where the model's FP8 Q/DQ nodes put it; compute "
                     "capability 8.9+"),
    "model": Precision(True, (), meaning="strongly typed: every tensor's type comes from the model"),
}
BAKE_HINT = ("TensorRT 11 takes precision from the model: bake it in first (FP16/BF16: `python -m "
             "modelopt.onnx.autocast --onnx_path model.onnx --output_path model_fp16.onnx`; INT8/FP8: explicit Q/DQ "
             "nodes from ModelOpt quantization, `python -m modelopt.onnx.quantization`), then use --precision model")
#: the calibrator class that reads a cache, by the algorithm its first line names (``TRT-<version>-<algorithm>``)
CALIBRATORS = {"EntropyCalibration2": "IInt8EntropyCalibrator2", "EntropyCalibration": "IInt8EntropyCalibrator",
               "MinMaxCalibration": "IInt8MinMaxCalibrator"}
# onnx.TensorProto data types -> quantization family
_QTYPES = {2: "int8", 3: "int8", 17: "fp8", 18: "fp8", 19: "fp8", 20: "fp8", 21: "int4", 22: "int4", 23: "fp4"}


def check(precision: str, major: int, hardware_compat: str, compute_capability: tuple[int, int] | None,
          calibration: bool) -> Precision:
    """The precision's rules for TensorRT *major* on this GPU. :raises ConfigError: a combination TensorRT refuses."""
    if major >= 11:
        if calibration:
            raise ConfigError(f"--calibration-cache is for TensorRT 10.x only: it needs INT8 calibrators, which "
                              f"TensorRT 11 removed (this is TensorRT {major})",
                              hint="quantize the model instead: explicit Q/DQ nodes from NVIDIA ModelOpt (`python "
                              "-m modelopt.onnx.quantization --quantize_mode int8 ...`), then --precision model")
        if precision != "model":
            raise ConfigError(f"--precision {precision} is for TensorRT 10.x only (this is TensorRT {major}): weak "
                              "typing and the precision flags were removed in TensorRT 11", hint=BAKE_HINT)
        return PRECISIONS["model"]
    rule = PRECISIONS[precision]
    if calibration and precision != "int8":
        raise ConfigError("--calibration-cache is only used with --precision int8",
                          hint="add --precision int8, or drop --calibration-cache")
    if precision == "fp8" and hardware_compat == "ampere+":
        raise ConfigError("--precision fp8 cannot be built --hardware-compat ampere+: TensorRT refuses FP8 with "
                          "HardwareCompatibilityLevel.AMPERE_PLUS, and FP8 kernels need compute capability 8.9+",
                          hint="use --hardware-compat same-cc or none for FP8 engines")
    if rule.min_cc and compute_capability and tuple(compute_capability) < rule.min_cc:
        need = ".".join(map(str, rule.min_cc))
        have = ".".join(map(str, compute_capability))
        raise ConfigError(f"--precision {precision} needs a GPU of compute capability {need}+; this one is {have}",
                          hint="use --precision fp16 (or model) on this GPU")
    return rule


def quantization(model: Path) -> set[str]:
    """The quantization families (``int8``, ``fp8``, ``int4``, ``fp4``) of the model's Q/DQ nodes, by their types.

    Reads the graph only (external weights are not loaded). The type of a QuantizeLinear comes from its
    ``output_dtype`` attribute or its zero point; a DequantizeLinear's from its quantized input; no zero point means
    uint8 (ONNX's default). :raises ModelError: not readable as ONNX.
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except (OSError, ValueError, DecodeError) as exc:
        raise ModelError(f"cannot read {model.name} to check its quantization: {exc}") from exc
    types = {t.name: t.data_type for t in graph.initializer}
    types.update({n.output[0]: a.t.data_type for n in graph.node if n.op_type == "Constant"
                  for a in n.attribute if a.name == "value"})
    found = set()
    for node in graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        dtype = next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), 0)
        probe = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if node.op_type == "DequantizeLinear" and node.input[0] in types:
            probe = node.input[0]
        dtype = dtype or (types.get(probe, 0) if probe else 2)
        found.add(_QTYPES.get(dtype, "int8"))
    return found


def check_model(precision: str, found: set[str], calibration: bool) -> None:
    """Refuse a precision the model cannot deliver. :raises ConfigError: e.g. int8 without Q/DQ or a cache."""
    rule = PRECISIONS.get(precision)
    if rule is None or rule.needs is None:
        return
    if precision == "int8" and calibration:
        if found:
            raise ConfigError("the model has Q/DQ nodes, so TensorRT ignores --calibration-cache",
                              hint="drop --calibration-cache (the Q/DQ scales are used), or use the unquantized model")
        return
    if rule.needs not in found:
        how = ("INT8 Q/DQ nodes (ModelOpt quantization) or --calibration-cache FILE" if precision == "int8"
               else "FP8 Q/DQ nodes (ModelOpt FP8 quantization)")
        raise ConfigError(f"--precision {precision}: the model has no {rule.needs.upper()} Q/DQ nodes, so TensorRT "
                          "would leave every layer in a higher precision", hint=f"give it {how}, or choose "
                          "--precision fp16")


def calibrator_for(header: bytes) -> str:
    """The calibrator class for a calibration cache, from its first line (``TRT-8601-EntropyCalibration2``).

    :raises ConfigError: not a TensorRT calibration cache, or an algorithm trtwarm cannot replay
    """
    first = header.split(b"\n", 1)[0].decode("ascii", "replace").strip()
    match = re.fullmatch(r"TRT-(\d+)-(\w+)", first)
    if not match:
        raise ConfigError(f"--calibration-cache is not a TensorRT calibration cache (first line {first[:40]!r})",
                          hint="give the file written by trtexec --calib / a calibrator's write_calibration_cache")
    algorithm = match.group(2)
    if algorithm not in CALIBRATORS:
        raise ConfigError(f"--calibration-cache uses {algorithm}, which trtwarm cannot replay",
                          hint=f"recalibrate with one of {', '.join(CALIBRATORS)}")
    return CALIBRATORS[algorithm]


__all__ = ["BAKE_HINT", "CALIBRATORS", "PRECISIONS", "Precision", "calibrator_for", "check", "check_model",
           "quantization"]
