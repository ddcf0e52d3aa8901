"""GPU identity: selection and key logic on recorded NVML values everywhere; real NVML where a GPU exists."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import run_trtwarm, spawn, wait_for_log, wait_until
from trtwarm.node import gpu
from trtwarm.node.hostplatform import host_platform
from trtwarm.errors import ConfigError
from trtwarm.init.waiting import wait_message

H200 = gpu.GpuInfo("GPU-5a1c0f2e-0000-1111-2222-333344445555", "NVIDIA H200", (9, 0), 150754820096,
                   "00000000:19:00.0", None, "580.159.03", 13000)
H200_B = gpu.GpuInfo("GPU-9f00aa11-0000-1111-2222-333344445555", "NVIDIA H200", (9, 0), 150754820096,
                     "00000000:0A:00.0", None, "580.159.03", 13000)
A100 = gpu.GpuInfo("GPU-0c0c0c0c-0000-1111-2222-333344445555", "NVIDIA A100-SXM4-40GB", (8, 0), 42949672960,
                   "00000000:3B:00.0")
MIG = gpu.GpuInfo("MIG-11112222-3333-4444-5555-666677778888", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", (8, 0),
                  5368709120, "00000000:3B:00.0", "1g.5gb")


def test_mig_profile_is_read_from_the_device_name() -> None:
    assert gpu.mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert gpu.mig_profile("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb") == "1c.3g.20gb"
    assert gpu.mig_profile("NVIDIA H200") is None


def test_cuda_index_order_is_pci_bus_order_not_nvml_order() -> None:
    assert gpu.select([H200, H200_B], {"CUDA_VISIBLE_DEVICES": "0"}) is H200_B  # 0A sorts before 19
    assert gpu.select([H200, H200_B], {"CUDA_VISIBLE_DEVICES": "1"}) is H200


def test_visible_devices_by_uuid_and_prefix() -> None:
    assert gpu.select([H200, H200_B], {"CUDA_VISIBLE_DEVICES": H200.uuid}) is H200
    assert gpu.select([H200, H200_B], {"NVIDIA_VISIBLE_DEVICES": "GPU-9f00aa11"}) is H200_B


def test_with_mig_enabled_cuda_sees_the_mig_device() -> None:
    assert gpu.select([A100, MIG], {}) is MIG
    assert gpu.key_fields(MIG)["mig_profile"] == "1g.5gb"


def test_a_declared_gpu_keys_as_the_same_gpu_read_through_nvml() -> None:
    """`prewarm --gpu-*`: the facts of the key's device section, without NVML: equal device sections for the plain
    GPU, a MIG slice (its profile read from its name, as detect() does) and a part NVML reports no memory for."""
    assert gpu.key_fields(gpu.declared("NVIDIA H200", "9.0", "140")) == gpu.key_fields(H200)
    assert gpu.key_fields(gpu.declared("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "8.0", "5")) == gpu.key_fields(MIG)
    assert gpu.key_fields(gpu.declared("NVIDIA A100-SXM4-40GB", " 8.0 ", "40"), "same-cc") == \
        gpu.key_fields(A100, "same-cc")
    assert gpu.declared("NVIDIA GB10", "12.1", "none").memory_gib is None
    assert gpu.declared("NVIDIA  H200", "9.0", "140").name == "NVIDIA  H200"  # verbatim: the key compares it so
    for bad in (("", "9.0", "1"), ("x", "9", "1"), ("x", "9.0.1", "1"), ("x", "9.0", "0"), ("x", "9.0", "-1"),
                ("x", "9.0", "1.5"), ("x" * 300, "9.0", "1"), ("NVIDIA\nH200", "9.0", "1")):
        with pytest.raises(ConfigError) as info:
            gpu.declared(*bad)
        assert "--gpu-" in info.value.message and "trtwarm key --json" in str(info.value.hint)


@pytest.mark.parametrize("env", [{"NVIDIA_VISIBLE_DEVICES": "none"}, {"CUDA_VISIBLE_DEVICES": ""},
                                 {"CUDA_VISIBLE_DEVICES": "GPU-nope"}, {"NVIDIA_VISIBLE_DEVICES": "GPU-nope"}])
def test_no_visible_gpu_is_a_config_error_about_the_gpu_request(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        gpu.select([H200], env)
    assert "nvidia.com/gpu" in str(info.value.hint)


def test_key_fields_round_memory_and_drop_the_uuid() -> None:
    fields = gpu.key_fields(H200)
    assert fields == {"kind": "gpu", "product": "NVIDIA H200", "compute_capability": "9.0", "mig_profile": None,
                      "memory_gib": 140, "platform": host_platform()}
    assert gpu.key_fields(H200) == gpu.key_fields(H200_B)


def test_hardware_compat_keys_the_class_not_the_product() -> None:
    assert gpu.key_fields(H200, "ampere+") == gpu.key_fields(A100, "ampere+") == {"kind": "gpu", "class": "ampere+",
                                                                                  "platform": host_platform()}
    assert gpu.key_fields(H200, "same-cc") != gpu.key_fields(A100, "same-cc")
    assert gpu.key_fields(H200, "same-cc")["class"] == "sm9.0"


def test_gpu_device_without_a_gpu_exits_2(model: Path, tmp_path: Path) -> None:
    if gpu.detect():
        pytest.skip("a GPU is visible here")
    run = run_trtwarm("key", "--builder", "command", "--builder-version", "x", "--build-command", "cp {model} {output}",
                      "--device", "gpu", "--model", str(model), "--cache-dir", str(tmp_path / "c"))
    assert run.returncode == 2 and "nvidia.com/gpu" in run.stderr and "Traceback" not in run.stderr


needs_gpu = pytest.mark.skipif(not gpu.detect(), reason="no NVIDIA GPU visible through NVML on this machine")


@pytest.mark.gpu
@needs_gpu
def test_real_nvml_identity(model: Path, tmp_path: Path) -> None:
    gpus = gpu.detect()
    chosen = gpu.current(os.environ)
    print("NVML:", json.dumps([g.__dict__ for g in gpus], default=list))
    assert chosen.name.startswith("NVIDIA") and chosen.compute_capability[0] >= 7 and chosen.memory_gib > 0
    assert chosen.uuid.startswith(("GPU-", "MIG-")) and chosen.driver_version
    assert gpu.select(gpus, {"CUDA_VISIBLE_DEVICES": chosen.uuid}) == chosen
    run = run_trtwarm("key", "--json", "--builder", "command", "--builder-version", "x", "--build-command",
                      "cp {model} {output}", "--device", "gpu", "--model", str(model), "--cache-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    device = json.loads(run.stdout)["document"]["device"]
    print("key device section:", json.dumps(device))
    assert device == gpu.key_fields(chosen) and chosen.uuid not in run.stdout


def test_a_wait_on_the_gpu_lock_names_the_other_engine_not_this_one() -> None:
    owner = {"pod": "bert-0", "node": "gpu-node-3", "label": "bert_H200_trt10_fp16--0123abcd", "started": time.time()}
    key_wait = wait_message("resnet50_H200_trt10_fp16--89ab", owner)
    gpu_wait = wait_message("resnet50_H200_trt10_fp16--89ab", owner, gpu.lock_id(H200))
    assert key_wait.startswith("waiting for resnet50_H200_trt10_fp16--89ab: being built by pod bert-0 on node "
                               "gpu-node-3")
    assert f"the GPU ({H200.uuid.lower()})" in gpu_wait
    assert "bert_H200_trt10_fp16--0123abcd is being built on it" in gpu_wait
    assert "another engine is being built" in wait_message("m", None, "gpu-x")


@pytest.mark.gpu
@needs_gpu
def test_two_keys_on_one_gpu_build_one_after_the_other(model: Path, tmp_path: Path) -> None:
    """The command builder (e.g. trtexec) on a GPU holds the per-GPU build lock, as the TensorRT builder does."""
    gate, staging = tmp_path / "gate", tmp_path / "cache" / ".staging"
    gate.touch()
    command = f"sh -c 'while [ -e {gate} ]; do sleep 0.05; done; cp {{model}} {{output}}'"

    def init(variant: str) -> subprocess.Popen[str]:
        return spawn(["init", "--builder", "command", "--builder-version", "t", "--build-command", command,
                      "--device", "gpu", "--model", str(model), "--cache-dir", str(tmp_path / "cache"),
                      "--handoff-dir", str(tmp_path / variant), "--key-extra", f"variant={variant}",
                      "--progress-interval", "1s"], env={"POD_NAME": f"pod-{variant}"})

    first = init("a")
    wait_until(lambda: staging.is_dir() and any(staging.iterdir()), timeout=60, what="first build started")
    second = init("b")
    wait_for_log(second, "waiting for the GPU (gpu-")
    assert len(list(staging.iterdir())) == 1  # the second key's build has not started
    gate.unlink()
    assert first.wait(60) == 0 and second.wait(60) == 0
    log_b = second.log.read_text()  # type: ignore[attr-defined]
    print(log_b)
    assert "being built on it by pod pod-a" in log_b and json.loads(second.stdout.read())["result"] == "built"


MIG_B = gpu.GpuInfo("MIG-99998888-3333-4444-5555-666677778888", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", (8, 0),
                    5368709120, "00000000:3B:00.0", "1g.5gb")


@pytest.mark.parametrize("value,gpus,expected", [
    ("all", [H200, H200_B], H200),              # every device NVML lists; the first in NVML order
    ("void", [H200_B], H200_B),                 # the runtime ignores it (CDI injected the devices NVML lists)
    ("", [H200_B], H200_B),
    ("3", [H200_B], H200_B),                    # a host index: inside the container only the allocated GPU is listed
    ("0,1", [H200, H200_B], H200),
    ("0:1", [A100, MIG], MIG),                  # a host GPU:MIG index pair
    (H200_B.uuid, [H200, H200_B], H200_B),
    (f"{H200_B.uuid},{H200.uuid}", [H200, H200_B], H200_B),
    (MIG_B.uuid, [A100, MIG, MIG_B], MIG_B),    # a MIG UUID (deviceIDStrategy uuid with MIG)
    (f"nvidia.com/gpu={H200_B.uuid}", [H200, H200_B], H200_B),  # a CDI device name
    (f"nvidia.com/mig={MIG_B.uuid}", [A100, MIG, MIG_B], MIG_B),
    ("nvidia.com/gpu=all", [H200, H200_B], H200),
], ids=["all", "void", "empty", "index", "indices", "mig-index", "uuid", "uuids", "mig-uuid", "cdi-uuid", "cdi-mig",
        "cdi-all"])
def test_every_nvidia_visible_devices_form_of_the_device_plugin(value: str, gpus: list, expected: gpu.GpuInfo) -> None:
    assert gpu.select(gpus, {"NVIDIA_VISIBLE_DEVICES": value}) is expected


def test_volume_mounts_strategy_lists_the_devices_as_file_names(tmp_path: Path) -> None:
    devices = tmp_path / "nvidia-container-devices"  # what the device plugin mounts: one /dev/null per device id
    devices.mkdir()
    (devices / H200_B.uuid).touch()
    env = {"NVIDIA_VISIBLE_DEVICES": str(gpu.VOLUME_MOUNTS_DIR)}
    assert gpu.select([H200, H200_B], env, devices_dir=devices) is H200_B
    (devices / H200_B.uuid).unlink()
    (devices / MIG_B.uuid).touch()
    assert gpu.select([A100, MIG, MIG_B], env, devices_dir=devices) is MIG_B
    (devices / MIG_B.uuid).unlink()
    with pytest.raises(ConfigError, match="lists no device") as info:
        gpu.select([H200], env, devices_dir=devices)
    assert "nvidia.com/gpu" in str(info.value.hint)
    with pytest.raises(ConfigError, match="cannot be read"):
        gpu.select([H200], env, devices_dir=tmp_path / "missing")


# --- NVML's refusals on MIG instances and integrated GPUs ------------------------------------------------------

class RecordedNvml:
    """A stand-in for the ``pynvml`` module, answering from recorded device facts and raising the real
    ``nvidia-ml-py`` exception classes (``pynvml.NVMLError(code)`` builds the documented subclass, e.g.
    ``NVMLError_NoPermission``) where NVML documents a refusal. No GPU exists here: this tests trtwarm's handling
    of NVML's documented error codes, not NVML or a GPU."""

    def __init__(self, devices: dict[str, dict], refuse: dict[tuple[str, str], int], top: list[str]) -> None:
        import pynvml

        self.NVMLError, self.NVML_DEVICE_MIG_ENABLE = pynvml.NVMLError, pynvml.NVML_DEVICE_MIG_ENABLE
        self.devices, self.refuse, self.top, self.shut = devices, refuse, top, False

    def _answer(self, call: str, handle: str, value: object) -> object:
        if (call, handle) in self.refuse:
            raise self.NVMLError(self.refuse[(call, handle)])
        return value

    def nvmlInit(self) -> None:
        self._answer("init", "", None)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.03"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return len(self.top)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return str(self._answer("handle", self.top[i], self.top[i]))

    def nvmlDeviceGetName(self, h: str) -> str:
        return str(self._answer("name", h, self.devices[h]["name"]))

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return str(self._answer("uuid", h, self.devices[h]["uuid"]))

    def nvmlDeviceGetCudaComputeCapability(self, h: str) -> object:
        return self._answer("cc", h, self.devices[h].get("cc", (9, 0)))

    def nvmlDeviceGetPciInfo(self, h: str) -> object:
        return self._answer("pci", h, type("Pci", (), {"busId": b"00000000:19:00.0"})())

    def nvmlDeviceGetMemoryInfo(self, h: str) -> object:
        return self._answer("memory", h, type("Mem", (), {"total": self.devices[h].get("memory", 80 << 30)})())

    def nvmlDeviceGetAttributes_v2(self, h: str) -> object:
        if "parent" not in self.devices[h]:  # documented: "currently only supports MIG device handles"
            raise self.NVMLError(__import__("pynvml").NVML_ERROR_NOT_SUPPORTED)
        return self._answer("attributes", h, type("Attr", (), {"memorySizeMB": 10240})())

    def nvmlDeviceGetMigMode(self, h: str) -> object:
        return self._answer("mig", h, [1 if self.devices[h].get("children") else 0, 0])

    def nvmlDeviceGetMaxMigDeviceCount(self, h: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: str, i: int) -> str:
        children = self.devices[h]["children"]
        if i >= len(children):
            raise self.NVMLError(__import__("pynvml").NVML_ERROR_NOT_FOUND)  # an unpopulated slot
        return str(children[i])

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: str) -> str:
        if "parent" not in self.devices[h]:  # documented: INVALID_ARGUMENT for a handle that is no MIG device
            raise self.NVMLError(__import__("pynvml").NVML_ERROR_INVALID_ARGUMENT)
        return str(self.devices[h]["parent"])


def _nvml_codes() -> tuple[int, int]:
    import pynvml

    return pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_NOT_SUPPORTED


def test_a_mig_container_reads_its_instance_when_the_parent_refuses_its_memory() -> None:
    """NVML in a MIG container: the parent's memory query is NO_PERMISSION, the MIG handle answers compute capability
    and PCI only through its parent (NOT_SUPPORTED), and one instance refuses memory info too (then its MIG
    attributes give the size). Before: an NVMLError escaped and every GPU builder exited 1 "this is a bug"."""
    no_permission, not_supported = _nvml_codes()
    devices = {"h100": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa", "children": ["m0", "m1"]},
               "m0": {"name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "uuid": "MIG-0000", "parent": "h100",
                      "memory": 10 << 30},
               "m1": {"name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "uuid": "MIG-1111", "parent": "h100"}}
    refuse = {("memory", "h100"): no_permission, ("memory", "m1"): no_permission,
              **{(call, m): not_supported for call in ("cc", "pci") for m in ("m0", "m1")}}
    nvml = RecordedNvml(devices, refuse, ["h100"])
    found = gpu.detect(nvml)
    assert [g.uuid for g in found] == ["GPU-aaaa", "MIG-0000", "MIG-1111"] and nvml.shut
    parent, first, second = found
    assert parent.memory_bytes is None and parent.memory_gib is None
    assert first.memory_gib == 10 and second.memory_bytes == 10240 << 20  # nvmlDeviceGetAttributes_v2
    assert first.compute_capability == (9, 0) and first.pci_bus_id == "00000000:19:00.0"
    chosen = gpu.select(found, {"NVIDIA_VISIBLE_DEVICES": "MIG-1111"})
    assert gpu.key_fields(chosen)["mig_profile"] == "1g.10gb" and gpu.key_fields(chosen)["memory_gib"] == 10


def test_an_integrated_gpu_without_memory_or_mig_queries_is_read() -> None:
    """GB10-like: framebuffer memory, PCI info and MIG mode answer NOT_SUPPORTED; the key says memory unknown."""
    _no_permission, not_supported = _nvml_codes()
    devices = {"gb10": {"name": "NVIDIA GB10", "uuid": "GPU-bbbb", "cc": (12, 1)}}
    refuse = {(call, "gb10"): not_supported for call in ("memory", "attributes", "mig", "pci")}
    [info] = gpu.detect(RecordedNvml(devices, refuse, ["gb10"]))
    assert info.compute_capability == (12, 1) and info.memory_bytes is None and info.pci_bus_id == ""
    fields = gpu.key_fields(gpu.select([info], {}))
    assert fields["memory_gib"] is None and fields["product"] == "NVIDIA GB10"


def test_devices_nvml_will_not_open_or_name_are_skipped_and_no_driver_is_no_gpu() -> None:
    import pynvml

    no_permission, not_supported = _nvml_codes()
    devices = {"a": {"name": "NVIDIA H200", "uuid": "GPU-a"}, "b": {"name": "NVIDIA H200", "uuid": "GPU-b"},
               "c": {"name": "NVIDIA H200", "uuid": "GPU-c"}}
    nvml = RecordedNvml(devices, {("handle", "a"): no_permission, ("uuid", "c"): not_supported}, ["a", "b", "c"])
    assert [g.uuid for g in gpu.detect(nvml)] == ["GPU-b"]
    missing = RecordedNvml({}, {("init", ""): pynvml.NVML_ERROR_LIBRARY_NOT_FOUND}, [])
    assert gpu.detect(missing) == []


def test_the_platform_is_in_every_gpu_key_form() -> None:
    """An x86_64 H100 and an aarch64 GH200 share sm9.0: the key's device section names the host platform."""
    from trtwarm.node.hostplatform import host_platform, parse_platform

    for compat in ("none", "ampere+", "same-cc"):
        assert gpu.key_fields(H200, compat)["platform"] == host_platform()
        assert gpu.key_fields(H200, compat, "linux-aarch64") != gpu.key_fields(H200, compat, "linux-x86_64")
    assert parse_platform("Linux-arm64") == "linux-aarch64" and parse_platform("linux-amd64") == "linux-x86_64"
    with pytest.raises(ValueError, match="not a platform"):
        parse_platform("aarch64")
