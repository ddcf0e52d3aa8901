"""Reading GPUs through NVML (``nvidia-ml-py``, module ``pynvml``), with every query a device may refuse guarded.

A MIG instance or an integrated GPU refuses queries a discrete GPU answers: in MIG mode the parent device's
``nvmlDeviceGetMemoryInfo`` needs privileges a container lacks (``NVML_ERROR_NO_PERMISSION``), MIG handles answer
the compute capability and PCI queries only through their parent, and integrated parts such as GB10 answer
``NVML_ERROR_NOT_SUPPORTED`` for framebuffer memory (NVML API reference, MIG section;
kubernetes-sigs/dra-driver-nvidia-gpu#1073, NVIDIA/cosmos#180; ``../shared/reference/tensorrt.md`` §10). So each
query has a fallback or an "unknown", and a device whose handle or name NVML will not give is skipped: never an
exception out of :func:`read_all`. Every ``pynvml`` error derives from ``pynvml.NVMLError`` (its
``_extractNVMLErrorsAsClasses`` builds one subclass per NVML error code), which is what is caught.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("trtwarm.gpu")
T = TypeVar("T")


def _ask(nvml: Any, call: Callable[[], T], what: str) -> T | None:
    """``call()``, or None when NVML refuses it (NO_PERMISSION, NOT_SUPPORTED, ...): logged at debug level."""
    try:
        return call()
    except nvml.NVMLError as exc:
        log.debug("NVML: %s refused: %s", what, exc)
        return None


def _memory(nvml: Any, handle: Any) -> int | None:
    """Total memory: ``nvmlDeviceGetMemoryInfo``; for a MIG instance that refuses it, ``nvmlDeviceGetAttributes_v2``
    (``memorySizeMB``, MIG handles only); None where neither answers (an integrated part, a MIG parent)."""
    info = _ask(nvml, lambda: nvml.nvmlDeviceGetMemoryInfo(handle), "memory info")
    if info is not None:
        return int(info.total)
    attributes = _optional(nvml, "nvmlDeviceGetAttributes_v2", handle)
    return int(attributes.memorySizeMB) << 20 if attributes is not None else None


def _placement(nvml: Any, handle: Any) -> tuple[tuple[int, int] | None, str]:
    """``(compute capability, PCI bus id)``; a MIG handle answers both through its parent."""
    cc = _optional(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    pci = getattr(_optional(nvml, "nvmlDeviceGetPciInfo", handle), "busId", None)
    if cc is None or pci is None:
        parent = _optional(nvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        if parent is not None:
            cc = cc or _optional(nvml, "nvmlDeviceGetCudaComputeCapability", parent)
            pci = pci or getattr(_optional(nvml, "nvmlDeviceGetPciInfo", parent), "busId", None)
    pci = pci or ""
    return (tuple(cc) if cc else None), (pci if isinstance(pci, str) else pci.decode())  # type: ignore[return-value]


def _optional(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``, or None where the binding lacks the function (older ``nvidia-ml-py``, or the old
    ``pynvml`` package: no MIG calls, no ``_v2``) or NVML refuses. Bytes (older bindings return C strings as
    ``bytes``) come back as text."""
    call = getattr(nvml, name, None)
    found = None if call is None else _ask(nvml, lambda: call(*args), name)
    return found.decode(errors="replace") if isinstance(found, bytes) else found


def _speed(nvml: Any, handle: Any) -> dict[str, Any]:
    """What CUDA's default device order is approximated from (:mod:`trtwarm.node.cudaorder`): the CUDA cores
    (``nvmlDeviceGetNumGpuCores``) and the maximum SM clock in MHz (``nvmlDeviceGetMaxClockInfo``,
    ``NVML_CLOCK_SM``)."""
    cores = _optional(nvml, "nvmlDeviceGetNumGpuCores", handle)
    clock = _optional(nvml, "nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
    return {"cores": int(cores) if cores else None, "sm_clock_mhz": int(clock) if clock else None}


def _info(nvml: Any, handle: Any, system: dict[str, Any]) -> dict[str, Any] | None:
    """One device's facts, or None when NVML will not name it (its UUID, name or compute capability)."""
    name, uuid = _optional(nvml, "nvmlDeviceGetName", handle), _optional(nvml, "nvmlDeviceGetUUID", handle)
    cc, pci = _placement(nvml, handle)
    if not name or not uuid or cc is None:
        log.warning("NVML does not name one of its devices (name %r, UUID %r, compute capability %r): skipped",
                    name, uuid, cc)
        return None
    return {"uuid": uuid, "name": name, "compute_capability": cc, "memory_bytes": _memory(nvml, handle),
            "pci_bus_id": pci, **_speed(nvml, handle), **system}


def _mig_children(nvml: Any, handle: Any, system: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The MIG devices of a GPU in MIG mode (CUDA sees those instead of the GPU); None: MIG is off or unsupported."""
    mode = _optional(nvml, "nvmlDeviceGetMigMode", handle)  # refused: not MIG-capable
    if mode is None or mode[0] != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    children, parent = [], _optional(nvml, "nvmlDeviceGetUUID", handle)
    for i in range(_optional(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
        child = _optional(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        info = _info(nvml, child, system) if child is not None else None  # None: an unpopulated MIG slot
        if info is not None:  # what names it in CUDA_VISIBLE_DEVICES=MIG-GPU-<uuid>/<gi>/<ci>
            info.update(parent_uuid=parent, gpu_instance=_optional(nvml, "nvmlDeviceGetGpuInstanceId", child),
                        compute_instance=_optional(nvml, "nvmlDeviceGetComputeInstanceId", child))
            children.append(info)
    return children


def read_all(nvml: Any) -> list[dict[str, Any]]:
    """Every GPU and MIG device *nvml* (the ``pynvml`` module) lists, as dicts of :class:`~trtwarm.node.gpu.GpuInfo`
    fields; [] when NVML cannot be initialised. Never raises an ``NVMLError``."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:  # no driver library, or no GPU: the caller says what is missing
        return []
    try:
        system = {"driver_version": _optional(nvml, "nvmlSystemGetDriverVersion") or "",
                  "cuda_driver_version": _optional(nvml, "nvmlSystemGetCudaDriverVersion_v2")
                  or _optional(nvml, "nvmlSystemGetCudaDriverVersion") or 0}
        found: list[dict[str, Any]] = []
        for i in range(_ask(nvml, nvml.nvmlDeviceGetCount, "device count") or 0):
            handle = _ask(nvml, lambda: nvml.nvmlDeviceGetHandleByIndex(i), f"device {i}")  # NO_PERMISSION: not ours
            if handle is None:
                continue
            info, children = _info(nvml, handle, system), _mig_children(nvml, handle, system)
            if info is not None:
                found.append({**info, "mig_enabled": children is not None})
            found.extend(children or [])
        return found
    finally:
        _ask(nvml, nvml.nvmlShutdown, "shutdown")


__all__ = ["read_all"]
