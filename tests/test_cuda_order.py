"""Which GPU CUDA makes device 0 (``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``): on recorded NVML facts, and in
real ``trtwarm key`` processes against a stand-in ``pynvml`` with two GPU products. CUDA's default order,
FASTEST_FIRST, is an unpublished heuristic: what is tested is trtwarm's approximation of it and its refusals where
the approximation cannot decide (docs/decisions.md), not CUDA."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import run_trtwarm

import standins as st
from trtwarm.errors import ConfigError
from trtwarm.node import gpu
from trtwarm.node.cudaorder import CLEAR_MARGIN, order

# (name, cc, memory GiB, PCI bus id, cores, max SM clock MHz) as NVML reports them
A100 = gpu.GpuInfo("GPU-aaaaaaaa-0000", "NVIDIA A100-SXM4-40GB", (8, 0), 40 << 30, "00000000:01:00.0",
                   cores=6912, sm_clock_mhz=1410)
H100 = gpu.GpuInfo("GPU-bbbbbbbb-0000", "NVIDIA H100 80GB HBM3", (9, 0), 80 << 30, "00000000:81:00.0",
                   cores=16896, sm_clock_mhz=1980)
V100 = gpu.GpuInfo("GPU-cccccccc-0000", "Tesla V100-SXM2-32GB", (7, 0), 32 << 30, "00000000:02:00.0",
                   cores=5120, sm_clock_mhz=1530)
T4 = gpu.GpuInfo("GPU-dddddddd-0000", "Tesla T4", (7, 5), 16 << 30, "00000000:03:00.0", cores=2560, sm_clock_mhz=1590)
A100_80 = gpu.GpuInfo("GPU-eeeeeeee-0000", "NVIDIA A100-SXM4-80GB", (8, 0), 80 << 30, "00000000:04:00.0",
                      cores=6912, sm_clock_mhz=1410)
H200 = gpu.GpuInfo("GPU-11110000-0000", "NVIDIA H200", (9, 0), 141 << 30, "00000000:19:00.0", cores=16896,
                   sm_clock_mhz=1980)
H200_B = gpu.GpuInfo("GPU-22220000-0000", "NVIDIA H200", (9, 0), 141 << 30, "00000000:0A:00.0", cores=16896,
                     sm_clock_mhz=1980)


def pick(gpus: list[gpu.GpuInfo], **env: str) -> gpu.GpuInfo:
    return gpu.select(gpus, env)


def test_fastest_first_is_the_default_and_pci_bus_id_is_honoured(caplog: pytest.LogCaptureFixture) -> None:
    """The A100 sits first on the PCI bus; CUDA's default order puts the H100 (newer, 3.4x the cores x clock)
    first. Before, a numeric CUDA_VISIBLE_DEVICES was read in PCI order and the key named the A100."""
    with caplog.at_level(logging.WARNING, "trtwarm.gpu"):
        assert pick([A100, H100], CUDA_VISIBLE_DEVICES="0") is H100
    assert "taking NVIDIA H100 80GB HBM3 at 00000000:81:00.0" in caplog.text and "PCI_BUS_ID" in caplog.text
    assert pick([A100, H100]) is H100 and pick([A100, H100], CUDA_VISIBLE_DEVICES="1") is A100
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="FASTEST_FIRST") is H100
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID") is A100
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES="1", CUDA_DEVICE_ORDER="PCI_BUS_ID") is H100
    assert pick([A100, H100], CUDA_DEVICE_ORDER="PCI_BUS_ID") is A100
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES="1,0") is A100  # the sequence's first entry is device 0


def test_uuids_name_the_device_whatever_the_order() -> None:
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES=A100.uuid) is A100
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES="GPU-aaaa") is A100  # "enough digits ... to uniquely identify"
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES=f"{A100.uuid},{H100.uuid}") is A100
    with pytest.raises(ConfigError, match="names more than one GPU"):
        pick([A100, H100], CUDA_VISIBLE_DEVICES="GPU-")
    mig = gpu.GpuInfo("MIG-12345678-0000", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", (9, 0), 10 << 30,
                      "00000000:81:00.0", "1g.10gb", parent_uuid=H100.uuid, gpu_instance=7, compute_instance=0)
    other = gpu.GpuInfo("MIG-87654321-0000", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", (9, 0), 40 << 30,
                        "00000000:81:00.0", "3g.40gb", parent_uuid=H100.uuid, gpu_instance=1, compute_instance=0)
    assert pick([H100, other, mig], CUDA_VISIBLE_DEVICES=f"MIG-{H100.uuid}/7/0") is mig  # the old MIG form
    assert pick([H100, other, mig], CUDA_VISIBLE_DEVICES="MIG-8765") is other


@pytest.mark.parametrize("gpus,why", [
    ([V100, T4], "the newer one (7.5) has half the cores x clock: the two facts disagree"),
    ([A100, A100_80], "one compute capability, the same cores x clock"),
    ([gpu.GpuInfo("GPU-1", "NVIDIA L40S", (8, 9), 48 << 30, "00000000:01:00.0"),
      gpu.GpuInfo("GPU-2", "NVIDIA L4", (8, 9), 24 << 30, "00000000:02:00.0")], "one compute capability, no cores"),
])
def test_an_order_nvml_cannot_tell_between_products_is_refused(gpus: list[gpu.GpuInfo], why: str) -> None:
    for env in ({"CUDA_VISIBLE_DEVICES": "0"}, {}, {"CUDA_VISIBLE_DEVICES": "1"}):
        with pytest.raises(ConfigError, match="cannot be told from NVML") as err:
            pick(gpus, **env)
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in (err.value.hint or "") and "UUID" in (err.value.hint or ""), why
    assert pick(gpus, CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID") is gpus[0]
    assert pick(gpus, CUDA_VISIBLE_DEVICES=gpus[1].uuid) is gpus[1]


def test_where_the_approximation_decides_and_where_no_order_matters(caplog: pytest.LogCaptureFixture) -> None:
    no_facts = [gpu.GpuInfo(g.uuid, g.name, g.compute_capability, g.memory_bytes, g.pci_bus_id) for g in (A100, H100)]
    assert pick(no_facts, CUDA_VISIBLE_DEVICES="0").name == H100.name  # compute capability alone, said
    fast = gpu.GpuInfo("GPU-f", "NVIDIA L40S", (8, 9), 48 << 30, "00000000:09:00.0", cores=18176, sm_clock_mhz=2520)
    slow = gpu.GpuInfo("GPU-s", "NVIDIA L4", (8, 9), 24 << 30, "00000000:01:00.0", cores=7424, sm_clock_mhz=2040)
    assert 18176 * 2520 > CLEAR_MARGIN * 7424 * 2040 and pick([slow, fast], CUDA_VISIBLE_DEVICES="0") is fast
    caplog.clear()
    with caplog.at_level(logging.WARNING, "trtwarm.gpu"):  # one product: any order keys alike, nothing to say
        assert pick([H200, H200_B], CUDA_VISIBLE_DEVICES="0") is H200_B and pick([H200, H200_B]) is H200
    assert caplog.text == ""
    assert [len(b) for b in order([H200, A100, H200_B], "FASTEST_FIRST")] == [2, 1]  # the H200s: one block
    assert pick([H200, H200_B, A100], CUDA_VISIBLE_DEVICES="1").name == "NVIDIA H200"
    assert pick([H200, H200_B, A100], CUDA_VISIBLE_DEVICES="2") is A100


@pytest.mark.parametrize("value", ["-1,0", "x", "2", "GPU-ffff"])
def test_an_invalid_first_entry_leaves_no_gpu_visible(value: str) -> None:
    with pytest.raises(ConfigError, match="no GPU is visible") as err:
        pick([A100, H100], CUDA_VISIBLE_DEVICES=value)
    assert "nvidia.com/gpu" in (err.value.hint or "")
    assert pick([A100, H100], CUDA_VISIBLE_DEVICES="0,-1") is H100


# --- real processes, a stand-in NVML with two products ----------------------------------------------------------------

def gpu_key(tmp_path: Path, model: Path, standins: Path, **env: str) -> tuple[int, dict, str]:
    run = run_trtwarm("key", "--json", "--builder", "command", "--builder-version", "t", "--build-command",
                      "cp {model} {output}", "--device", "gpu", "--model", str(model), "--cache-dir",
                      str(tmp_path / "c"), env={**st.pythonpath(standins), **env})
    device = json.loads(run.stdout)["document"]["device"] if run.returncode == 0 else {}
    return run.returncode, device, run.stderr


@pytest.mark.parametrize("facts", [True, False], ids=["cores-and-clock", "compute-capability-only"])
def test_a_node_with_two_gpu_products_keys_the_one_cuda_uses(tmp_path: Path, model: Path, facts: bool) -> None:
    """NVML lists the A100 first (and it is first on the PCI bus); with CUDA_VISIBLE_DEVICES=0 CUDA's default order
    builds on the H100, and so the key names the H100 (saying how it decided); PCI_BUS_ID and a UUID are exact."""
    standins = st.pynvml(tmp_path / "standins", [st.A100, st.H100], facts=facts)
    code, device, err = gpu_key(tmp_path, model, standins, CUDA_VISIBLE_DEVICES="0")
    assert code == 0 and device["product"] == st.H100["name"], err
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST (CUDA's default)" in err and "taking NVIDIA H100" in err
    code, device, err = gpu_key(tmp_path, model, standins, CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert code == 0 and device["product"] == st.A100["name"] and "taking" not in err, err
    code, device, err = gpu_key(tmp_path, model, standins, CUDA_VISIBLE_DEVICES=str(st.A100["uuid"]))
    assert code == 0 and device["product"] == st.A100["name"] and "taking" not in err, err


def test_two_products_the_order_cannot_tell_apart_exit_2(tmp_path: Path, model: Path) -> None:
    forty = {**st.A100, "pci": "00000000:01:00.0"}
    eighty = {**st.A100, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-99999999-0000-0000-0000-000000000000",
              "memory": 85899345920, "pci": "00000000:41:00.0"}
    standins = st.pynvml(tmp_path / "standins", [forty, eighty])
    code, _device, err = gpu_key(tmp_path, model, standins, CUDA_VISIBLE_DEVICES="0")
    assert code == 2 and "cannot be told from NVML" in err and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in err, err
    assert "Traceback" not in err
    code, device, err = gpu_key(tmp_path, model, standins, CUDA_VISIBLE_DEVICES="1", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert code == 0 and device["product"] == "NVIDIA A100-SXM4-80GB", err


def test_a_device_order_cuda_does_not_know_is_taken_as_its_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "trtwarm.gpu"):
        assert pick([A100, H100], CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="pci_bus_id") is H100
    assert "CUDA_DEVICE_ORDER='pci_bus_id' is neither FASTEST_FIRST nor PCI_BUS_ID" in caplog.text
