"""The TensorRT builder. Its logic (plan headers, logger verdicts, option mapping for 10.x and 11.x, the timing
cache's id and file protocol, the no-TensorRT paths) runs everywhere; real builds are marked ``tensorrt`` and skip
with the reason where TensorRT or a GPU is missing. Nothing here imitates TensorRT."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import env_for, run_trtwarm

from trtwarm.node import gpu
from trtwarm.builders.tensorrt.compat import (
    HARDWARE_LEVELS,
    PLAN_MAGIC,
    config_plan,
    default_precision,
    load_verdict,
    parse_version,
    plan_header,
    timing_cache_id,
)
from trtwarm.builders.tensorrt.precision import PRECISIONS, calibrator_for, check_model, quantization
from trtwarm.builders.tensorrt.timing_cache import TimingCacheFile
from trtwarm.config import Identity, Settings
from trtwarm.model import parse_shape
from trtwarm.errors import ConfigError
from trtwarm.volume.layout import Layout

HAVE_TRT = importlib.util.find_spec("tensorrt") is not None
HAVE_GPU = bool(gpu.detect())
needs_trt = pytest.mark.skipif(not (HAVE_TRT and HAVE_GPU), reason="needs the tensorrt package and an NVIDIA GPU "
                               f"(tensorrt installed: {HAVE_TRT}, GPU visible: {HAVE_GPU})")


def plan_bytes(version: tuple[int, int, int, int], magic: int = PLAN_MAGIC, serialization: int = 0) -> bytes:
    """A plan header as trtexec's printPlanVersion reads it, followed by filler."""
    return struct.pack("<II", magic, serialization) + b"\0" * 16 + bytes(version) + b"\x55" * 64


def settings(**kw: object) -> Settings:
    return Settings(model=Path("/m.onnx"), **kw)  # type: ignore[arg-type]


# --- plan header ------------------------------------------------------------------------------------------------

def test_a_plan_of_this_tensorrt_passes_the_header_check() -> None:
    header = plan_header(plan_bytes((10, 16, 1, 11)))
    assert header.status == "ok" and header.version == (10, 16, 1, 11)
    assert header.mismatch("10.16.1.11") is None


def test_a_plan_of_another_tensorrt_is_a_miss_before_tensorrt_is_touched() -> None:
    reason = plan_header(plan_bytes((10, 13, 3, 9))).mismatch("10.16.1.11")
    assert reason == "engine was built by TensorRT 10.13.3.9, this is TensorRT 10.16.1.11"
    assert plan_header(plan_bytes((10, 16, 1, 10))).mismatch("10.16.1.11")  # build numbers must match too


@pytest.mark.parametrize("blob,status,words", [
    (b"\x08\x07onnx-model-bytes" * 4, "not-a-plan", "wrong magic"),
    (plan_bytes((10, 16, 1, 11))[:20], "truncated", "truncated"),
    (b"", "truncated", "truncated"),
])
def test_bytes_that_are_no_plan_are_rejected_with_the_reason(blob: bytes, status: str, words: str) -> None:
    header = plan_header(blob)
    assert header.status == status and words in (header.mismatch("10.16.1.11") or "")


def test_an_unknown_header_format_is_left_to_deserialization() -> None:
    header = plan_header(plan_bytes((11, 4, 0, 106), serialization=3))
    assert header.status == "unknown-format" and header.mismatch("11.4.0.106") is None


def test_version_strings_with_suffixes_parse() -> None:
    assert parse_version("10.7.0.post1") == (10, 7, 0)
    assert parse_version("11.4.0.106") == (11, 4, 0, 106)


# --- logger verdicts (the error strings users meet, from ../shared/reference/tensorrt.md §2.3) -------------------

REAL_MESSAGES = [
    (1, "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion stdVersionRead == "
        "kSERIALIZATION_VERSION failed.Version tag does not match. Note: Current Version: 237, Serialized Engine "
        "Version: 239)", "another TensorRT version"),
    (1, "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file is not compatible with "
        "this version of TensorRT, expecting library version 10.12.0.36 got .)", "another TensorRT version"),
    (1, "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file is generated on an "
        "incompatible device, expecting compute 8.9 got compute 8.6, please rebuild.)", "another GPU architecture"),
    (1, "Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match", "not a TensorRT engine"),
    (1, "INVALID_ARGUMENT: Cannot deserialize with an empty memory buffer.", "empty"),
    (2, "Using an engine plan file across different models of devices is not supported and is likely to affect "
        "performance or even cause errors or deadlock.", "another GPU model"),
    (2, "Using an engine plan file across different models of devices is not recommended and is likely to affect "
        "performance or even cause errors.", "another GPU model"),
    (0, "[runtime.cpp::deserializeCudaEngine::50] Error Code 4: Internal Error (Engine deserialization failed.)",
     "could not deserialize"),
]


@pytest.mark.parametrize("severity,message,meaning", REAL_MESSAGES)
def test_each_known_load_message_rejects_the_engine_with_its_meaning(severity: int, message: str, meaning: str) -> None:
    verdict = load_verdict([(3, "Loaded engine size: 12 MiB"), (severity, message)])
    assert verdict is not None and meaning in verdict and message.strip() in verdict


def test_info_and_unrelated_warnings_do_not_reject() -> None:
    assert load_verdict([(3, "Loaded engine size: 101 MiB"), (4, "Deserialization required 3 microseconds."),
                         (2, "CUDA lazy loading is not enabled.")]) is None
    assert "reported an error" in load_verdict([(1, "some new error wording")])


# --- options by name, 10.x and 11.x ----------------------------------------------------------------------------

# Each precision on 10.x maps to exactly these (network typing, builder flags): what the README's table says.
PRECISION_TABLE = [
    ("fp32", False, ()),
    ("fp16", False, ("FP16",)),
    ("bf16", False, ("BF16",)),
    ("int8", False, ("INT8", "FP16")),  # FP16 fallback for unquantised layers, as trtexec --int8 --fp16 / --best
    ("fp8", True, ()),  # FP8 compute only from FP8 Q/DQ in a strongly typed network; BuilderFlag.FP8 is plugin I/O
    ("model", True, ()),
]


@pytest.mark.parametrize("precision,strong,flags", PRECISION_TABLE)
def test_tensorrt_10_each_precision_maps_to_exactly_the_documented_flags(precision: str, strong: bool,
                                                                          flags: tuple[str, ...]) -> None:
    plan = config_plan(settings(), 10, 16, precision, (9, 0))
    assert plan.strongly_typed is strong and plan.set_flags == flags
    assert set(PRECISIONS) == {p for p, _, _ in PRECISION_TABLE}


def test_combinations_tensorrt_refuses_are_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="with HardwareCompatibilityLevel.AMPERE_PLUS"):
        config_plan(settings(hardware_compat="ampere+"), 10, 16, "fp8", (9, 0))
    with pytest.raises(ConfigError, match="compute capability 8.9"):
        config_plan(settings(), 10, 16, "fp8", (8, 0))
    with pytest.raises(ConfigError, match="compute capability 8.0"):
        config_plan(settings(), 10, 16, "bf16", (7, 5))
    assert config_plan(settings(hardware_compat="same-cc"), 10, 16, "fp8", (9, 0)).strongly_typed


def test_calibration_cache_is_int8_on_tensorrt_10_only(tmp_path: Path) -> None:
    cache = tmp_path / "calib.cache"
    with pytest.raises(ConfigError, match="only used with --precision int8"):
        config_plan(settings(calibration_cache=cache), 10, 16, "fp16", (9, 0))
    with pytest.raises(ConfigError) as err:
        config_plan(settings(calibration_cache=cache), 11, 1, "model", (9, 0))
    assert "TensorRT 11 removed" in err.value.message and "modelopt" in (err.value.hint or "")
    plan = config_plan(settings(calibration_cache=cache), 10, 16, "int8", (9, 0), "IInt8EntropyCalibrator2")
    assert plan.calibrator == "IInt8EntropyCalibrator2" and plan.set_flags == ("INT8", "FP16")


def test_a_calibration_cache_header_picks_the_calibrator_that_replays_it() -> None:
    assert calibrator_for(b"TRT-8601-EntropyCalibration2\ninput: 3c010204\n") == "IInt8EntropyCalibrator2"
    assert calibrator_for(b"TRT-100300-MinMaxCalibration\n") == "IInt8MinMaxCalibrator"
    with pytest.raises(ConfigError, match="not a TensorRT calibration cache"):
        calibrator_for(b"\x08\x07onnx bytes")
    with pytest.raises(ConfigError, match="cannot replay"):
        calibrator_for(b"TRT-8601-LegacyCalibration\n")


def _qdq_model(path: Path, zero_point_type: int | None) -> Path:
    """input -> QuantizeLinear -> DequantizeLinear -> output, the zero point of the given ONNX type (None: none)."""
    import onnx
    from onnx import TensorProto, helper

    inits = [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.1])]
    q_inputs = ["input", "scale"]
    if zero_point_type is not None:
        inits.append(helper.make_tensor("zp", zero_point_type, [], [0]))
        q_inputs.append("zp")
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", q_inputs, ["q"]), helper.make_node("DequantizeLinear", ["q", *q_inputs[1:]],
                                                                               ["output"])],
        "qdq", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])], inits)
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    return path


def test_int8_and_fp8_need_the_quantization_in_the_model(tmp_path: Path, model: Path) -> None:
    from onnx import TensorProto

    int8 = quantization(_qdq_model(tmp_path / "int8.onnx", TensorProto.INT8))
    fp8 = quantization(_qdq_model(tmp_path / "fp8.onnx", TensorProto.FLOAT8E4M3FN))
    assert int8 == {"int8"} and fp8 == {"fp8"} and quantization(model) == set()
    assert quantization(_qdq_model(tmp_path / "u8.onnx", None)) == {"int8"}  # no zero point: uint8
    check_model("int8", int8, calibration=False)
    check_model("int8", set(), calibration=True)
    check_model("fp8", fp8, calibration=False)
    with pytest.raises(ConfigError, match="no INT8 Q/DQ"):
        check_model("int8", set(), calibration=False)
    with pytest.raises(ConfigError, match="no FP8 Q/DQ"):
        check_model("fp8", int8, calibration=False)
    with pytest.raises(ConfigError, match="ignores --calibration-cache"):
        check_model("int8", int8, calibration=True)


def test_tensorrt_11_takes_precision_from_the_model_only() -> None:
    assert default_precision(11) == "model" and default_precision(10) == "fp16"
    plan = config_plan(settings(), 11, 4, "model")
    assert plan.strongly_typed and plan.set_flags == ()
    with pytest.raises(ConfigError) as err:
        config_plan(settings(), 11, 4, "fp16")
    assert "removed in TensorRT 11" in err.value.message and "modelopt.onnx.autocast" in (err.value.hint or "")


def test_builder_options_map_by_name() -> None:
    s = settings(workspace=4 << 30, opt_level=5, hardware_compat="ampere+", version_compatible=True,
                 exclude_lean_runtime=True, tf32=False, shapes=(parse_shape("input=1x3:8x3:32x3"),))
    plan = config_plan(s, 10, 16, "model")
    assert plan.set_flags == ("VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME") and plan.clear_flags == ("TF32",)
    assert plan.hardware_level == "AMPERE_PLUS" and plan.workspace == 4 << 30 and plan.opt_level == 5
    assert plan.profiles == ({"input": ((1, 3), (8, 3), (32, 3))},)
    assert set(HARDWARE_LEVELS.values()) == {"NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"}


def test_options_a_tensorrt_cannot_honour_are_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="only applies with --version-compatible"):
        config_plan(settings(exclude_lean_runtime=True), 10, 16, "model")
    with pytest.raises(ConfigError, match="needs TensorRT 10.9"):
        config_plan(settings(hardware_compat="same-cc"), 10, 8, "model")
    assert config_plan(settings(hardware_compat="same-cc"), 10, 9, "model").hardware_level == "SAME_COMPUTE_CAPABILITY"


# --- timing cache ----------------------------------------------------------------------------------------------

H200 = gpu.GpuInfo("GPU-1", "NVIDIA H200", (9, 0), 150754820096, driver_version="580.65.06")
H100 = gpu.GpuInfo("GPU-2", "NVIDIA H100 80GB HBM3", (9, 0), 85520809984)
A100 = gpu.GpuInfo("GPU-3", "NVIDIA A100-SXM4-80GB", (8, 0), 85899345920)


def test_timing_cache_id_follows_tensorrt_gpu_product_and_tf32() -> None:
    base = config_plan(settings(), 10, 16, "fp16", (9, 0))
    no_tf32 = config_plan(settings(tf32=False), 10, 16, "fp16", (9, 0))
    ids = {timing_cache_id("10.16.1.11", H200, base), timing_cache_id("10.16.1.11", H100, base),
           timing_cache_id("10.13.3.9", H200, base), timing_cache_id("10.16.1.11", H200, no_tf32)}
    assert len(ids) == 4
    assert timing_cache_id("10.16.1.11", H200, base).startswith("trt10.16.1.11-")


@pytest.mark.parametrize("compat", ["ampere+", "same-cc"])
def test_two_gpu_products_of_one_class_get_two_timing_cache_files(compat: str, tmp_path: Path) -> None:
    """The engine key holds the class (one engine serves A100 and H100 under ampere+), but TensorRT rejects another
    device's timing cache, so each product keeps its own file."""
    plan = config_plan(settings(hardware_compat=compat), 10, 16, "fp16", (8, 0))
    assert gpu.key_fields(H100, compat) == gpu.key_fields(H200, compat)  # one engine key for the class
    layout = Layout(tmp_path / "cache")
    files = {TimingCacheFile(layout, timing_cache_id("10.16.1.11", info, plan)).path for info in (H100, H200, A100)}
    assert len(files) == 3
    strip = config_plan(settings(strip_weights=True), 10, 16, "fp16", (9, 0))
    assert "STRIP_PLAN" in strip.set_flags and timing_cache_id("10.16.1.11", H200, strip) != \
        timing_cache_id("10.16.1.11", H200, config_plan(settings(), 10, 16, "fp16", (9, 0)))


def test_timing_cache_file_is_merged_under_its_lock_and_replaced_atomically(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "cache")
    layout.ensure()
    cache = TimingCacheFile(layout, "trt10.16.1.11-abc")
    assert cache.read() is None
    seen: list[bytes | None] = []
    me = Identity(None, None, None, "host")
    assert cache.publish(lambda cur: seen.append(cur) or b"first", me)
    assert cache.publish(lambda cur: seen.append(cur) or (cur or b"") + b"+second", me)
    assert seen == [None, b"first"] and cache.read() == b"first+second"
    assert not cache.publish(lambda cur: None, me) and cache.read() == b"first+second"  # nothing to write
    assert not list(layout.timing_caches.glob("*.tmp")) and (layout.locks / "timing-trt10.16.1.11-abc.lock").exists()



@pytest.mark.parametrize("when", ["before the build", "while the build merges"])
def test_a_timing_cache_directory_swapped_for_a_link_is_never_written_through(tmp_path: Path, when: str) -> None:
    """A writer of the volume replaces ``timing-caches`` by a link to another directory (before the build, or while
    it holds the cache's lock and merges): the cache was written by path, so a file ``<id>.cache`` appeared, or was
    replaced, in whatever directory the link named. Now refused (exit 9), nothing written there."""
    from trtwarm.errors import UnsafeVolume

    layout = Layout(tmp_path / "cache")
    layout.ensure()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "trt10.16.1.11-abc.cache").write_bytes(b"someone else's file")

    def swap() -> None:
        os.rename(layout.timing_caches, tmp_path / "aside")
        os.symlink(elsewhere, layout.timing_caches)

    if when == "before the build":
        swap()
    cache = TimingCacheFile(layout, "trt10.16.1.11-abc")
    assert cache.read() is None  # nothing read through the link either
    with pytest.raises(UnsafeVolume):
        cache.publish(lambda cur: (swap() if when != "before the build" else None) or b"tactics", Identity(
            None, None, None, "host"))
    assert [p.name for p in elsewhere.iterdir()] == ["trt10.16.1.11-abc.cache"]
    assert (elsewhere / "trt10.16.1.11-abc.cache").read_bytes() == b"someone else's file"


# --- without TensorRT or a GPU ---------------------------------------------------------------------------------

@pytest.mark.skipif(HAVE_TRT, reason="TensorRT is installed here")
def test_key_with_the_tensorrt_builder_names_the_extra_when_tensorrt_is_missing(model: Path) -> None:
    run = run_trtwarm("key", "--builder", "tensorrt", "--model", str(model), "--cache-dir", str(model.parent / "c"))
    assert run.returncode == 2 and "pip install 'trtwarm[tensorrt]'" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is visible here")
def test_selftest_without_a_gpu_says_what_is_missing() -> None:
    proc = subprocess.run([sys.executable, "-m", "trtwarm", "selftest"], capture_output=True, text=True,
                          env=env_for(), check=False)
    assert proc.returncode == 2 and "none visible through NVML" in proc.stdout
    assert "nvidia.com/gpu" in proc.stderr and "Traceback" not in proc.stderr


# --- real TensorRT on a real GPU (skipped with the reason elsewhere) --------------------------------------------

@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
def test_real_build_cache_reload_and_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "trtwarm", "selftest", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, env=env_for(), timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "selftest ok" in proc.stdout
    [entry] = list((tmp_path / "cache" / "entries").iterdir())
    import tensorrt as trt

    header = plan_header((entry / "engine.plan").read_bytes()[:28])
    assert header.status == "ok" and header.mismatch(trt.__version__) is None
    report = json.loads((tmp_path / "h1" / "engine.json").read_text())
    assert report["result"] == "built" and report["extra"]["timing_cache"] in ("used", "new")
    assert list((tmp_path / "cache" / "timing-caches").glob("*.cache"))
    info = json.loads((entry / "manifest.json").read_text())["extra"]["engine_info"]  # read back from the engine
    assert info["layers"] > 0 and info["profiles"] >= 1 and info["device_memory_bytes"] >= 0
    assert info["hardware_compatibility_level"] == "NONE" and info["driver_version"]


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_trt
def test_real_weight_stripped_engine_is_smaller_and_refits_on_load(tmp_path: Path) -> None:
    from trtwarm.cli.demo import make_model

    model = make_model(tmp_path / "wide.onnx", hidden=4096, dynamic=False)
    sizes = {}
    for strip in (False, True):
        handoff = tmp_path / f"h-{strip}"
        args = ["init", "--model", str(model), "--cache-dir", str(tmp_path / "cache"), "--handoff-dir", str(handoff),
                "--precision", "fp32", "--verify", "load"] + (["--strip-weights"] if strip else [])
        assert run_trtwarm(*args, timeout=900).returncode == 0
        again = run_trtwarm(*args, timeout=900)  # a hit, loaded with --verify load: refitted from the ONNX weights
        assert again.returncode == 0, again.stderr
        sizes[strip] = json.loads((handoff / "engine.json").read_text())["engine_bytes"]
    assert sizes[True] < sizes[False] / 4


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.skipif(True, reason="needs two TensorRT versions installed side by side (separate venvs); no machine "
                    "here has even one")
def test_real_engine_of_another_tensorrt_version_is_rebuilt() -> None:
    """Build with TensorRT A in one venv, init with TensorRT B in another on the same volume: B's key differs, and
    an entry planted under B's key is refused by the header check and rebuilt."""


def test_several_profiles_map_one_to_one_and_name_the_entry() -> None:
    from trtwarm.key import entry_name

    s = settings(profiles=((parse_shape("ids=1x1:1x128:1x512"), parse_shape("mask=1x1:1x128:1x512")),
                           (parse_shape("ids=8x1:8x128:8x512"), parse_shape("mask=8x1:8x128:8x512"))))
    plan = config_plan(s, 10, 16, "model")
    assert [sorted(p) for p in plan.profiles] == [["ids", "mask"], ["ids", "mask"]]
    assert plan.profiles[1]["ids"] == ((8, 1), (8, 128), (8, 512))
    build = {"precision": "model", "shapes": {}, "profiles": [{"ids": {"opt": [1, 128]}}, {"ids": {"opt": [8, 128]}}]}
    doc = {"builder": {"name": "tensorrt", "version": "10.16.1.11"}, "device": {"kind": "gpu", "class": "sm9.0"},
           "build": build}
    assert "_ids-1x128-2profiles--" in entry_name(doc, "f" * 64, "bert")


def test_profile_flags_parse_and_do_not_mix_with_shape(model: Path) -> None:
    base = ["key", "--builder", "command", "--builder-version", "t", "--build-command", "cp {model} {output}",
            "--device", "cpu", "--model", str(model), "--cache-dir", str(model.parent / "c")]
    mixed = run_trtwarm(*base, "--shape", "input=1x16", "--profile", "input=1x16:8x16:32x16")
    assert mixed.returncode == 2 and "--shape and --profile do not mix" in mixed.stderr
    other = run_trtwarm(*base, "--profile", "input=1x16:8x16:32x16", "--profile", "input=64x16")
    assert other.returncode == 2 and "is for the tensorrt builder" in other.stderr
    twice = run_trtwarm(*base, "--profile", "input=1x16;input=2x16")
    assert twice.returncode == 2 and "names input 'input' more than once" in twice.stderr


def test_the_driver_an_engine_was_built_on_is_named_from_its_manifest() -> None:
    from trtwarm.builders.tensorrt.compat import built_on

    manifest = {"extra": {"timing_cache": "new", "engine_info": {"driver_version": "580.65.06", "layers": 3}}}
    assert built_on(manifest) == "built on driver 580.65.06"
    assert built_on({}) == "" and built_on({"extra": "junk"}) == "" and built_on({"extra": {"engine_info": 1}}) == ""


def test_inspector_layer_information_is_summarised_per_precision() -> None:
    """The inspector's JSON as documented for ProfilingVerbosity.DETAILED (10.x "Format/Datatype", 11.x "DataType")
    and LAYER_NAMES_ONLY (names only); anything else gives no precision, never an error."""
    from trtwarm.builders.tensorrt.runtime import summarize_layers

    detailed = json.dumps({"Layers": [
        {"Name": "conv1", "LayerType": "CaskConvolution",
         "Outputs": [{"Format/Datatype": "Channel major FP16 format"}]},
        {"Name": "fc", "Outputs": [{"DataType": "FP32"}]}, {"Name": "odd", "Outputs": []}]})
    summary = summarize_layers(detailed)
    assert summary["layers_by_precision"] == {"FP16": 1, "FP32": 1}
    assert summary["layer_precisions"] == {"conv1": "FP16", "fc": "FP32", "odd": None}
    assert summarize_layers(json.dumps({"Layers": ["conv1", "fc"]}))["layer_precisions"] == {"conv1": None, "fc": None}
    assert summarize_layers("not json")["layers_by_precision"] == {}


def test_ls_and_key_explain_show_what_the_engine_reported(model: Path, tmp_path: Path) -> None:
    """An entry whose manifest carries ``extra.engine_info`` (as a TensorRT build writes it, published through the
    store like any build): ``ls --json`` shows the facts, ``key --explain`` names the driver it was built on."""
    from trtwarm.fs.ops import sha256_file
    from trtwarm.key import entry_name, key_of
    from trtwarm.volume.store import EngineStore

    cache = tmp_path / "cache"
    base = ["--builder", "command", "--build-command", "cp {model} {output}", "--device", "cpu", "--model", str(model),
            "--cache-dir", str(cache)]
    doc = json.loads(run_trtwarm("key", *base, "--builder-version", "old", "--json").stdout)["document"]
    key = key_of(doc)
    layout = Layout(cache)
    layout.ensure()
    store = EngineStore(layout)
    info = {"layers": 3, "profiles": 1, "device_memory_bytes": 1024, "hardware_compatibility_level": "NONE",
            "driver_version": "580.65.06", "layers_by_precision": {"FP16": 3}, "layer_precisions": {"a": "FP16"}}
    with store.staging(key) as staging:
        (staging.path / "engine.plan").write_bytes(b"plan bytes")
        digest, size = sha256_file(staging.path / "engine.plan")
        assert store.publish(staging, entry_name(doc, key, "m"), {
            "schema": 1, "key": key, "name": entry_name(doc, key, "m"), "key_document": doc,
            "engine_file": "engine.plan", "engine_sha256": digest, "engine_bytes": size, "created": 1.7e9,
            "extra": {"timing_cache": "new", "engine_info": info}})
    [row] = json.loads(run_trtwarm("ls", "--cache-dir", str(cache), "--json").stdout)
    assert row["engine_info"]["driver_version"] == "580.65.06" and row["engine_info"]["layers"] == 3
    assert "layer_precisions" not in row["engine_info"]
    explain = run_trtwarm("key", *base, "--builder-version", "new", "--explain")
    assert "(built on driver 580.65.06)" in explain.stdout
    assert 'builder.version\n      entry: "old"\n      this:  "new"' in explain.stdout


# --- third review (issue 29): versions, profiles, plugins, timing-cache id, messages for 11.x ------------------------

@pytest.mark.parametrize("given,dist,version", [
    ("10.16.1.11", "tensorrt", "10.16.1.11"), ("10.16.01.11+cu12", "tensorrt-cu12", "10.16.1.11"),
    (" 011.04.0.106+cu013 ", "tensorrt-cu13", "11.4.0.106")])
def test_a_declared_tensorrt_version_is_keyed_in_one_spelling(given: str, dist: str, version: str) -> None:
    from trtwarm.builders.tensorrt.version import declared_version

    if HAVE_TRT:
        pytest.skip("TensorRT is installed here: a declared version must equal it")
    assert declared_version(given) == (dist, version)


@pytest.mark.parametrize("given,words", [
    ("10.16", "is not exact"), ("10.16.1", "is not exact"), ("10.16.1.11.2", "is not exact"),
    ("10.7.0.post1", "packaging revision"), ("10.7.0.post1+cu12", "packaging revision"), ("10.x", "not a TensorRT")])
def test_a_declared_tensorrt_version_that_is_not_exact_is_refused(model: Path, given: str, words: str) -> None:
    """Two or three parts cannot be made exact (a plan loads only in the TensorRT of the same four numbers), and a
    wheel's .postN is not TensorRT's version: each is a usage error naming what to give, never a key that no
    builder's key can equal."""
    run = run_trtwarm("key", "--model", str(model), "--tensorrt-version", given, "--cache-dir", str(model.parent / "c"))
    assert run.returncode == 2 and words in run.stderr and "tensorrt.__version__" in run.stderr
    assert "Traceback" not in run.stderr


def test_canonical_versions() -> None:
    from trtwarm.builders.tensorrt.compat import canonical_version

    assert canonical_version("10.16.01.11") == "10.16.1.11" and canonical_version("10.7.0.post1") is None
    assert canonical_version("10.16.1") is None and canonical_version("11.4.0.106") == "11.4.0.106"


def test_strip_weights_with_several_profiles_is_refused_before_tensorrt() -> None:
    """A weight-stripped plan is refittable (STRIP_PLAN implies REFIT_IDENTICAL), and addOptimizationProfile "may be
    called at most once when building a refittable engine" (NvInfer.h release/10.16 L11419-11430)."""
    profiles = ((parse_shape("input=1x16:8x16:32x16"),), (parse_shape("input=64x16"),))
    with pytest.raises(ConfigError, match="one optimization profile for a refittable engine") as err:
        config_plan(settings(strip_weights=True, profiles=profiles), 10, 16, "fp16", (9, 0))
    assert "drop --strip-weights" in (err.value.hint or "")
    assert config_plan(settings(strip_weights=True, profiles=profiles[:1]), 10, 16, "fp16", (9, 0)).profiles
    assert len(config_plan(settings(profiles=profiles), 10, 16, "fp16", (9, 0)).profiles) == 2


def test_the_timing_cache_id_has_the_cuda_major_and_the_platform() -> None:
    """setTimingCache checks only the CUDA device property (NvInfer.h release/10.16 L11657-11675): the id itself
    must keep a cu12 build's cache from a cu13 build's, and an x86_64 host's from an aarch64 one's."""
    plan = config_plan(settings(), 10, 16, "fp16", (9, 0))
    ids = {timing_cache_id("10.16.1.11", H200, plan, "12", "linux-x86_64"),
           timing_cache_id("10.16.1.11", H200, plan, "13", "linux-x86_64"),
           timing_cache_id("10.16.1.11", H200, plan, "12", "linux-aarch64")}
    assert len(ids) == 3
    no_wheel = gpu.GpuInfo("GPU-1", "NVIDIA H200", (9, 0), 150754820096, cuda_driver_version=12080)
    assert timing_cache_id("10.16.1.11", no_wheel, plan) != timing_cache_id(
        "10.16.1.11", gpu.GpuInfo("GPU-1", "NVIDIA H200", (9, 0), 150754820096, cuda_driver_version=13000), plan)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "int8", "fp8"])
def test_on_tensorrt_11_the_precision_flags_say_they_are_10x_only(precision: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_plan(settings(), 11, 1, precision, (9, 0))
    assert "TensorRT 10.x only (this is TensorRT 11)" in err.value.message
    assert "modelopt" in (err.value.hint or "")
    with pytest.raises(ConfigError, match=r"--calibration-cache is for TensorRT 10.x only: .* \(this is TensorRT 11\)"):
        config_plan(settings(calibration_cache=Path("c.cache")), 11, 1, "model", (9, 0))


def _shared_object(tmp_path: Path, name: str, source: str) -> Path:
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("no C compiler here to make a shared object")
    src, out = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


def test_version_compatible_plugins_must_be_serializable_and_given_once(tmp_path: Path) -> None:
    """A version-compatible engine carries its plugin libraries through IPluginRegistry.load_library and
    plugins_to_serialize; load_library takes only a library exporting setLoggerFinder and getPluginCreators (or
    getCreators). Read here from real shared objects' dynamic symbol tables, without loading them."""
    from trtwarm.builders.tensorrt.plugins import exported_symbols

    good = _shared_object(tmp_path, "libgood", "void setLoggerFinder(void *f) {}\n"
                          "void *getPluginCreators(int *n) { *n = 0; return 0; }\n")
    plain = _shared_object(tmp_path, "libplain", "int add(int a, int b) { return a + b; }\n")
    text = tmp_path / "libtext.so"
    text.write_text("not a library")
    assert {"setLoggerFinder", "getPluginCreators"} <= exported_symbols(good) and "add" in exported_symbols(plain)
    config_plan(settings(version_compatible=True, plugins=(good,)), 10, 16, "model")
    config_plan(settings(plugins=(plain,)), 10, 16, "model")  # dlopen'ed as usual when not version-compatible
    with pytest.raises(ConfigError, match="does not export setLoggerFinder, getPluginCreators or getCreators"):
        config_plan(settings(version_compatible=True, plugins=(plain,)), 10, 16, "model")
    with pytest.raises(ConfigError, match="not an ELF file"):
        config_plan(settings(version_compatible=True, plugins=(text,)), 10, 16, "model")
    with pytest.raises(ConfigError, match="No such file"):
        config_plan(settings(version_compatible=True, plugins=(tmp_path / "gone.so",)), 10, 16, "model")
    (tmp_path / "other").mkdir()
    twin = tmp_path / "other" / good.name
    twin.write_bytes(good.read_bytes())
    with pytest.raises(ConfigError, match="are the same library"):
        config_plan(settings(plugins=(good, twin)), 10, 16, "model")
