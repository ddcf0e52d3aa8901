"""The key changes with everything that changes the engine, and with nothing else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import copy_command, run_trtwarm
from trtwarm.node import gpu
from trtwarm.cli.demo import make_model
from trtwarm.node.device import cpu_fields
from trtwarm.key import canonical, diff, entry_name, key_document, key_of


def key_for(model: Path, *extra: str, version: str = "test-1") -> dict:
    run = run_trtwarm("key", "--json", "--builder", "command", "--builder-version", version, "--build-command",
                      copy_command(), "--device", "cpu", "--model", str(model), "--cache-dir",
                      str(model.parent / "cache"), *extra)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_key_is_sha256_of_canonical_document(model: Path) -> None:
    doc = key_for(model)
    assert doc["key"] == key_of(doc["document"])
    assert canonical(doc["document"]) == json.dumps(doc["document"], sort_keys=True, separators=(",", ":")).encode()
    assert doc["document"]["schema"] == 1


def test_weights_change_the_key_even_with_the_same_graph(tmp_path: Path) -> None:
    a = key_for(make_model(tmp_path / "a" / "m.onnx", seed=1))
    b = key_for(make_model(tmp_path / "b" / "m.onnx", seed=2))
    assert a["key"] != b["key"]
    assert [d[0] for d in diff(a["document"], b["document"])] == ["model.bytes", "model.sha256"] or \
        [d[0] for d in diff(a["document"], b["document"])] == ["model.sha256"]


def test_external_data_change_changes_the_key(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m" / "ext.onnx", external=True)
    before = key_for(model)
    weights = model.parent / "ext.weights"
    data = bytearray(weights.read_bytes())
    data[0] ^= 1
    weights.write_bytes(bytes(data))
    after = key_for(model)
    assert before["key"] != after["key"]
    assert [d[0] for d in diff(before["document"], after["document"])] == ["model.external_data"]


def test_moving_the_model_keeps_the_key(model: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "renamed.onnx"
    moved.parent.mkdir()
    shutil.copy(model, moved)
    assert key_for(model)["key"] == key_for(moved)["key"]


@pytest.mark.parametrize(("flags", "field"), [
    (("--precision", "fp16"), "build.precision"),
    (("--shape", "input=1x16:4x16:8x16"), "build.shapes"),
    (("--key-extra", "calibration=v2"), "build.extra"),
])
def test_build_configuration_changes_the_key(model: Path, flags: tuple[str, ...], field: str) -> None:
    base, changed = key_for(model), key_for(model, *flags)
    assert base["key"] != changed["key"]
    assert [d[0].split(".input")[0] for d in diff(base["document"], changed["document"])][0].startswith(field)


def test_runtime_version_changes_the_key(model: Path) -> None:
    a, b = key_for(model, version="trtexec-10.13.0.35"), key_for(model, version="trtexec-10.16.0.72")
    assert a["key"] != b["key"]
    assert diff(a["document"], b["document"]) == [("builder.version", "trtexec-10.13.0.35", "trtexec-10.16.0.72")]


def test_device_changes_the_key_but_gpu_uuid_does_not() -> None:
    model, builder, build = {"sha256": "a", "bytes": 1}, {"name": "tensorrt", "version": "10.13.0.35"}, {}
    h100 = gpu.GpuInfo("GPU-1111", "NVIDIA H100 80GB HBM3", (9, 0), 80 << 30)
    h100_other = gpu.GpuInfo("GPU-2222", "NVIDIA H100 80GB HBM3", (9, 0), 80 << 30, pci_bus_id="00000000:9A:00.0")
    h200 = gpu.GpuInfo("GPU-3333", "NVIDIA H200", (9, 0), 141 << 30)
    keys = {name: key_of(key_document(model, builder, gpu.key_fields(g), build))
            for name, g in (("h100", h100), ("h100_other", h100_other), ("h200", h200))}
    assert keys["h100"] == keys["h100_other"] != keys["h200"]
    avx512 = cpu_fields("model name : Xeon\nflags : fpu avx2 avx512f sse4_2\n")
    avx2 = cpu_fields("model name : Xeon\nflags : fpu avx2 sse4_2\n")
    assert avx512["isa"] == ["avx2", "avx512f"] and avx2["isa"] == ["avx2"]
    assert key_of(key_document(model, builder, avx512, build)) != key_of(key_document(model, builder, avx2, build))


def test_entry_name_is_readable_and_carries_the_key_prefix(model: Path) -> None:
    doc = key_for(model, "--shape", "input=1x16:8x16:32x16", "--name", "ResNet 50/../v2")
    name = doc["name"]
    assert name.endswith("--" + doc["key"][:16])
    assert name.startswith("resnet-50-..-v2_cpu-")
    assert "_command" in name and "input-8x16" in name
    assert entry_name(doc["document"], doc["key"], "../../etc").startswith("etc_")


def test_explain_names_the_field_that_changed(model: Path, tmp_path: Path) -> None:
    cache = model.parent / "cache"
    built = run_trtwarm("init", "--builder", "command", "--builder-version", "trtexec-10.13.0.35", "--build-command",
                        copy_command(), "--device", "cpu", "--model", str(model), "--cache-dir", str(cache),
                        "--handoff-dir", str(tmp_path / "h"))
    assert built.returncode == 0, built.stderr
    base = ["key", "--explain", "--builder", "command", "--build-command", copy_command(), "--device", "cpu",
            "--model", str(model), "--cache-dir", str(cache)]
    same = run_trtwarm(*base, "--builder-version", "trtexec-10.13.0.35")
    assert same.stdout.startswith("hit")
    newer = run_trtwarm(*base, "--builder-version", "trtexec-10.16.0.72")
    assert '    builder.version\n      entry: "trtexec-10.13.0.35"\n      this:  "trtexec-10.16.0.72"' in newer.stdout
    fp16 = run_trtwarm(*base, "--builder-version", "trtexec-10.13.0.35", "--precision", "fp16")
    assert '    build.precision\n      entry: "model"\n      this:  "fp16"' in fp16.stdout


def test_explain_names_weights_shape_and_key_extra_changes(model: Path, tmp_path: Path) -> None:
    cache = model.parent / "cache"
    flags = ["--builder", "onnxruntime", "--cache-dir", str(cache)]
    assert run_trtwarm("init", *flags, "--model", str(model), "--shape", "input=1x16:8x16:32x16", "--key-extra",
                       "calib=v1", "--handoff-dir", str(tmp_path / "h")).returncode == 0
    base = ["key", "--explain", *flags]
    shape = run_trtwarm(*base, "--model", str(model), "--shape", "input=1x16:4x16:32x16", "--key-extra", "calib=v1")
    assert "    build.shapes.input.opt\n      entry: [8, 16]\n      this:  [4, 16]" in shape.stdout
    extra = run_trtwarm(*base, "--model", str(model), "--shape", "input=1x16:8x16:32x16", "--key-extra", "calib=v2")
    assert '    build.extra.calib\n      entry: "v1"\n      this:  "v2"' in extra.stdout
    retrained = make_model(tmp_path / "other" / "mlp.onnx", seed=7)  # same name, new weights
    weights = run_trtwarm(*base, "--model", str(retrained), "--shape", "input=1x16:8x16:32x16", "--key-extra",
                          "calib=v1")
    assert "    model.sha256\n" in weights.stdout and "model.bytes" not in weights.stdout


def test_key_diff_names_a_gpu_change_on_recorded_identities() -> None:
    h100 = gpu.GpuInfo("GPU-1", "NVIDIA H100 80GB HBM3", (9, 0), 85520809984)
    h200 = gpu.GpuInfo("GPU-2", "NVIDIA H200", (9, 0), 150754820096)
    changes = {path: (old, new)
               for path, old, new in diff({"device": gpu.key_fields(h100)}, {"device": gpu.key_fields(h200)})}
    assert changes["device.product"] == ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    assert "device.compute_capability" not in changes


def test_the_host_platform_is_in_the_key_of_every_gpu_keyed_builder() -> None:
    """An engine runs only on the OS and CPU architecture it was built on (TensorRT RuntimePlatform SAME_AS_BUILD):
    an x86_64 H100 and an aarch64 GH200 are both sm9.0, so a class-keyed engine must not be shared between them; and
    a key made before the platform was in it (no ``device.platform``) is a different key, so such entries are misses."""
    model, build = {"sha256": "a", "bytes": 1}, {}
    hopper = gpu.GpuInfo("GPU-1", "NVIDIA H100 80GB HBM3", (9, 0), 80 << 30)
    for builder in ({"name": "tensorrt", "version": "10.16.1.11", "cuda": "12"},
                    {"name": "command", "version": "trtexec-10.16.1.11"},
                    {"name": "onnxruntime", "version": "1.32.0", "provider": "TensorrtExecutionProvider"}):
        for compat in ("none", "ampere+", "same-cc"):
            x86 = key_document(model, builder, gpu.key_fields(hopper, compat, "linux-x86_64"), build)
            arm = key_document(model, builder, gpu.key_fields(hopper, compat, "linux-aarch64"), build)
            assert key_of(x86) != key_of(arm)
            assert diff(x86, arm) == [("device.platform", "linux-x86_64", "linux-aarch64")]
            before = {**x86, "device": {k: v for k, v in x86["device"].items() if k != "platform"}}
            assert key_of(before) != key_of(x86)


def test_an_entry_name_says_when_its_gpu_host_is_not_x86_64() -> None:
    from trtwarm.node.device import short_name

    hopper = gpu.GpuInfo("GPU-1", "NVIDIA GH200 480GB", (9, 0), 96 << 30)
    assert short_name(gpu.key_fields(hopper, "same-cc", "linux-aarch64")) == "sm9.0-linux-aarch64"
    assert short_name(gpu.key_fields(hopper, "none", "linux-x86_64")) == "NVIDIA GH200 480GB"
