"""A stand-in for ``nvidia-ml-py``'s ``pynvml`` module in child processes: the node's GPUs as recorded facts.

Put this directory first on ``PYTHONPATH`` and name a JSON file in ``NVML_STUB_DEVICES``::

    {"top": ["h100"],
     "devices": {"h100": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "cc": [9, 0], "memory": 85520809984,
                          "pci": "00000000:19:00.0", "children": ["m0"]},
                 "m0": {"name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "uuid": "MIG-...", "parent": "h100",
                        "memory": 10468982784}}}

It answers the calls :mod:`trtwarm.node.nvml` makes, and refuses where NVML documents a refusal for a MIG handle
(compute capability and PCI info only through the parent; ``NVML_ERROR_NOT_SUPPORTED``), as
``tests/test_gpu.py``'s ``RecordedNvml`` does in process. No GPU exists on the machines that run the tests: this
exercises trtwarm's reading and selection of NVML's answers (``NVIDIA_VISIBLE_DEVICES``, MIG), not NVML.
"""

from __future__ import annotations

import json
import os
from typing import Any

NVML_DEVICE_MIG_ENABLE = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6


class NVMLError(Exception):
    """``pynvml.NVMLError``: the base of every NVML failure."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _state() -> dict[str, Any]:
    with open(os.environ["NVML_STUB_DEVICES"]) as f:
        return json.load(f)


def _device(handle: str) -> dict[str, Any]:
    return _state()["devices"][handle]


def nvmlInit() -> None:
    _state()


def nvmlShutdown() -> None:
    return None


def nvmlSystemGetDriverVersion() -> str:
    return "580.159.03"


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    return 13000


def nvmlDeviceGetCount() -> int:
    return len(_state()["top"])


def nvmlDeviceGetHandleByIndex(index: int) -> str:
    return str(_state()["top"][index])


def nvmlDeviceGetName(handle: str) -> str:
    return str(_device(handle)["name"])


def nvmlDeviceGetUUID(handle: str) -> str:
    return str(_device(handle)["uuid"])


def nvmlDeviceGetCudaComputeCapability(handle: str) -> tuple[int, int]:
    if "parent" in _device(handle):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    major, minor = _device(handle)["cc"]
    return int(major), int(minor)


def nvmlDeviceGetPciInfo(handle: str) -> Any:
    if "parent" in _device(handle):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return type("PciInfo", (), {"busId": _device(handle).get("pci", "00000000:19:00.0")})()


def nvmlDeviceGetMemoryInfo(handle: str) -> Any:
    return type("Memory", (), {"total": int(_device(handle)["memory"])})()


def nvmlDeviceGetAttributes_v2(handle: str) -> Any:
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetMigMode(handle: str) -> list[int]:
    return [NVML_DEVICE_MIG_ENABLE if _device(handle).get("children") else 0, 0]


def nvmlDeviceGetMaxMigDeviceCount(handle: str) -> int:
    return 7


def nvmlDeviceGetMigDeviceHandleByIndex(handle: str, index: int) -> str:
    children = _device(handle).get("children") or []
    if index >= len(children):
        raise NVMLError(NVML_ERROR_NOT_FOUND)  # an unpopulated slot
    return str(children[index])


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: str) -> str:
    return str(_device(handle)["parent"])
