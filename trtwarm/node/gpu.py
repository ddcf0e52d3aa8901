"""GPU identity through NVML (``nvidia-ml-py``, module ``pynvml``): no CUDA context is created.

:func:`detect` reads every NVML device (and MIG device), then :func:`select` picks the one this container builds
on: CUDA's device 0, honouring ``NVIDIA_VISIBLE_DEVICES`` (which devices the container has), then
``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` as CUDA does (:mod:`trtwarm.node.cudaorder`: a UUID names the
device; an index counts in CUDA's order, PCI bus order or the default fastest-first, which NVML's facts can only
approximate, so an index among different products that the approximation cannot order is refused).

``NVIDIA_VISIBLE_DEVICES`` comes in every form the NVIDIA device plugin's ``deviceListStrategy`` produces
(k8s-device-plugin README; container-toolkit docs "Specialized configurations with Docker"): ``all``; ``none`` (no
GPU); ``void`` or empty (the runtime ignores the variable, e.g. when CDI injects the devices: NVML lists exactly
those); host indices (``0,1``; ``0:1`` for MIG) which mean nothing inside the container, where NVML only lists the
allocated devices; ``GPU-``/``MIG-`` UUIDs; CDI device names (``nvidia.com/gpu=GPU-...``); and, with
``volume-mounts``, the directory :data:`VOLUME_MOUNTS_DIR` whose file names are the allocated device ids.

The key uses :func:`key_fields`: product, compute capability, MIG profile, memory in GiB and the host platform
(OS and CPU architecture); never the UUID, so identical GPUs share engines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtwarm.errors import ConfigError
from trtwarm.node.hostplatform import host_platform

_NO_GPU_HINT = ("request a GPU for this container (resources.limits: nvidia.com/gpu: 1, the same as the inference "
                "container) and run it with the NVIDIA container runtime")


#: where the device plugin's ``volume-mounts`` strategy lists the allocated devices (one empty file per device id)
VOLUME_MOUNTS_DIR = Path("/var/run/nvidia-container-devices")
_CDI_NAME = re.compile(r"^[\w.-]+/[\w.-]+=(.+)$")  # vendor/class=name


@dataclass(frozen=True)
class GpuInfo:
    """What NVML says about one (MIG) device."""

    uuid: str
    name: str
    compute_capability: tuple[int, int]
    memory_bytes: int | None  # None: NVML does not say (an integrated GPU, a MIG parent)
    pci_bus_id: str = ""
    mig_profile: str | None = None
    driver_version: str = ""
    cuda_driver_version: int = 0
    cores: int | None = None  # CUDA cores (nvmlDeviceGetNumGpuCores): with the clock, CUDA's device order
    sm_clock_mhz: int | None = None  # maximum SM clock (nvmlDeviceGetMaxClockInfo)
    parent_uuid: str | None = None  # a MIG instance's GPU, GPU instance and compute instance (MIG-GPU-<uuid>/gi/ci)
    gpu_instance: int | None = None
    compute_instance: int | None = None
    mig_enabled: bool = False  # a GPU in MIG mode: CUDA sees its MIG devices, never the GPU itself

    @property
    def memory_gib(self) -> int | None:
        """Memory rounded to whole GiB (NVML reports slightly different totals across driver versions); None where
        NVML does not report it."""
        return None if self.memory_bytes is None else round(self.memory_bytes / (1 << 30))


#: what :func:`declared` accepts for a compute capability (``9.0``, ``12.1``)
_CC = re.compile(r"^(\d{1,2})\.(\d{1,2})$")


def declared(product: str, compute_capability: str, memory_gib: str) -> GpuInfo:
    """A GPU named by its facts instead of read through NVML: a command that never builds (``trtwarm prewarm``, on a
    node whose GPUs it does not hold) keys for it exactly as an init on that GPU does. *product* is the name NVML
    gives (a MIG slice's includes ``MIG <profile>``, from which the profile is read as :func:`detect` reads it);
    *memory_gib* the whole GiB of :attr:`GpuInfo.memory_gib`, or ``none`` where NVML reports no memory.

    :raises ConfigError: a fact that is empty or malformed (exit 2)
    """
    hint = ("give the facts of the key's device section, e.g. --gpu-product 'NVIDIA H100 80GB HBM3' "
            "--gpu-compute-capability 9.0 --gpu-memory-gib 80 (`trtwarm key --json` on that GPU prints them)")
    name = str(product).strip()  # as NVML spells it, inner spaces included: the key compares it verbatim
    if not name or len(name) > 256 or not name.isprintable():
        raise ConfigError(f"--gpu-product {product!r} is not a GPU name", hint=hint)
    match = _CC.match(str(compute_capability).strip())
    if not match:
        raise ConfigError(f"--gpu-compute-capability {compute_capability!r} is not MAJOR.MINOR (e.g. 9.0)", hint=hint)
    memory = str(memory_gib).strip().lower()
    if memory not in ("none", "unknown") and not (memory.isdigit() and 0 < int(memory) <= 1 << 16):
        raise ConfigError(f"--gpu-memory-gib {memory_gib!r} is not a whole number of GiB (or none)", hint=hint)
    size = None if memory in ("none", "unknown") else int(memory) << 30
    return GpuInfo(f"GPU-declared-{name}", name, (int(match[1]), int(match[2])), size, mig_profile=mig_profile(name))


def mig_profile(name: str) -> str | None:
    """Extract ``1g.10gb`` from a MIG device name like ``NVIDIA H100 80GB HBM3 MIG 1g.10gb``."""
    match = re.search(r"MIG\s+((?:\d+c\.)?\d+g\.\d+gb)", name, re.IGNORECASE)
    return match[1].lower() if match else None


def _visible(value: str | None) -> list[str] | None:
    """Parse a ``CUDA_VISIBLE_DEVICES`` value: None means all, [] means none."""
    if value is None:
        return None
    value = value.strip()
    if value.lower() in ("all",):
        return None
    if value.lower() in ("", "none", "void", "nodevfiles"):
        return []
    return [v.strip() for v in value.split(",") if v.strip()]


def _listed_devices(directory: Path) -> list[str]:
    """The device ids the ``volume-mounts`` strategy left as file names in *directory*.

    :raises ConfigError: the directory is missing, unreadable or empty (exit 2)
    """
    try:
        names = sorted(entry.name for entry in directory.iterdir())
    except OSError as exc:
        raise ConfigError(f"NVIDIA_VISIBLE_DEVICES points at {directory}, which cannot be read ({exc.strerror})",
                          hint=_NO_GPU_HINT) from None
    if not names:
        raise ConfigError(f"no GPU is visible ({directory} lists no device)", hint=_NO_GPU_HINT)
    return names


def _nvidia_visible(value: str | None, devices_dir: Path) -> list[str] | None:
    """Parse ``NVIDIA_VISIBLE_DEVICES`` into device ids to match, None (every device NVML lists) or [] (none)."""
    value = (value or "").strip()
    if value.startswith("/"):
        items = _listed_devices(devices_dir)
    elif value.lower() == "none":
        return []
    elif value.lower() in ("", "all", "void"):
        return None
    else:
        items = [v.strip() for v in value.split(",") if v.strip()]
    items = [(_CDI_NAME.match(v) or [None, v])[1] for v in items]
    if "all" in items or all(re.fullmatch(r"\d+(:\d+)?", v) for v in items):
        return None  # host indices: inside the container NVML lists only the allocated devices
    return items


def _pick(gpus: list[GpuInfo], wanted: list[str] | None) -> list[GpuInfo]:
    """The devices ``NVIDIA_VISIBLE_DEVICES`` gives this container (by UUID or a prefix of one), in its order; a GPU
    in MIG mode given whole (the device plugin's ``mig.strategy=none``) gives its MIG devices, which CUDA sees."""
    if wanted is None:
        return gpus
    chosen = []
    for item in wanted:
        match = [g for g in gpus if g.uuid == item or g.uuid.startswith(item)]
        chosen.extend(match[:1] or [g for g in gpus if g.parent_uuid and g.parent_uuid.startswith(item)])
    return chosen


def _cuda_device0(visible: list[GpuInfo], environ: Mapping[str, str]) -> GpuInfo | None:
    """CUDA's device 0 among the container's *visible* devices (:mod:`trtwarm.node.cudaorder`); None: CUDA sees
    none (the first ``CUDA_VISIBLE_DEVICES`` entry is invalid or names no device here)."""
    from trtwarm.node import cudaorder

    value = environ.get("CUDA_VISIBLE_DEVICES")
    entries, mode = _visible(value), cudaorder.device_order(environ)
    if not visible or entries == []:
        return None
    if entries is None:  # unset: CUDA's device 0; of one product, the first NVML lists (any keys alike)
        device = cudaorder.at(visible, 0, mode, "CUDA device 0 (CUDA_VISIBLE_DEVICES unset)")
        if device is None or mode == "PCI_BUS_ID":
            return device
        return next(g for g in visible if cudaorder.product(g) == cudaorder.product(device))
    first = entries[0]  # the sequence is enumerated in its order: its first entry is device 0
    if re.fullmatch(r"-?\d+", first):
        index = int(first)
        return cudaorder.at(visible, index, mode, f"CUDA_VISIBLE_DEVICES={value}") if index >= 0 else None
    if first.upper().startswith(("GPU-", "MIG-")):
        return cudaorder.by_uuid(visible, first)
    return None  # an invalid entry: CUDA shows no device from it on


def select(gpus: list[GpuInfo], environ: Mapping[str, str], devices_dir: Path = VOLUME_MOUNTS_DIR) -> GpuInfo:
    """Return the GPU CUDA device 0 would be, given the visible-devices variables and ``CUDA_DEVICE_ORDER``.

    *devices_dir* is where the ``volume-mounts`` strategy lists device ids when ``NVIDIA_VISIBLE_DEVICES`` is a path
    (always :data:`VOLUME_MOUNTS_DIR` in a Pod; a parameter so tests can use a real directory elsewhere).

    :raises ConfigError: no GPU is visible (exit 2), with a hint about the Pod's ``nvidia.com/gpu`` request; or a
        GPU whose place in CUDA's order cannot be told among different products (exit 2)
    """
    nvidia = _nvidia_visible(environ.get("NVIDIA_VISIBLE_DEVICES"), devices_dir)
    if nvidia == []:
        raise ConfigError(f"no GPU is visible (NVIDIA_VISIBLE_DEVICES={environ.get('NVIDIA_VISIBLE_DEVICES')!r})",
                          hint=_NO_GPU_HINT)
    candidates = [g for g in gpus if not _in_mig_mode(g, gpus)]
    if nvidia and any(v.upper().startswith("MIG-") for v in nvidia):
        candidates = [g for g in gpus if g.mig_profile]
    visible = _pick(candidates, nvidia)
    chosen = _cuda_device0(visible, environ)
    if chosen is None:
        raise _none_visible(visible, environ)
    return chosen


def _in_mig_mode(device: GpuInfo, gpus: list[GpuInfo]) -> bool:
    """Whether *device* is a GPU in MIG mode, which shows CUDA its MIG devices instead of itself (the other GPUs
    stay: MIG is per GPU): NVML said so, or a MIG device names it as its parent or shares its PCI bus id (a MIG
    device answers with its GPU's)."""
    if device.mig_profile:
        return False
    return device.mig_enabled or any(g.mig_profile and (g.parent_uuid == device.uuid or (
        g.pci_bus_id and g.pci_bus_id.lower() == device.pci_bus_id.lower())) for g in gpus)


def _none_visible(visible: list[GpuInfo], environ: Mapping[str, str]) -> ConfigError:
    """Why CUDA sees no device: none in the container, or ``CUDA_VISIBLE_DEVICES`` naming none of them."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if not visible or value is None:
        return ConfigError("no GPU is visible to this container", hint=_NO_GPU_HINT)
    devices = ", ".join(f"{g.uuid} ({g.name})" for g in visible)
    return ConfigError(f"no GPU is visible to CUDA: CUDA_VISIBLE_DEVICES={value!r} names none of this container's "
                       f"({devices}): its first entry is neither an index of one nor (a unique prefix of) one's "
                       "UUID, and CUDA ignores it and every entry after it",
                       hint="set CUDA_VISIBLE_DEVICES as the inference server's (an index from 0, or a UUID "
                       f"nvidia-smi -L prints), or unset it; if the container lacks its GPU: {_NO_GPU_HINT}")


def key_fields(gpu: GpuInfo, hardware_compat: str = "none", platform: str | None = None) -> dict[str, Any]:
    """Return the key's ``device`` section for *gpu* on *platform* (default: this host's, see
    :func:`trtwarm.node.hostplatform.host_platform`).

    With ``ampere+`` the engine runs on any Ampere-or-newer GPU, and with ``same-cc`` on any GPU of the same
    compute capability, so the product name and memory stay out of the key and one engine serves the class. The
    platform is in every form: an engine runs only on the OS and CPU architecture it was built on (TensorRT's
    ``RuntimePlatform.SAME_AS_BUILD``), and an x86_64 H100 and an aarch64 GH200 share ``sm9.0``.
    """
    cc = f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}"
    where = {"platform": platform or host_platform()}
    if hardware_compat == "ampere+":
        return {"kind": "gpu", "class": "ampere+", **where}
    if hardware_compat == "same-cc":
        return {"kind": "gpu", "class": f"sm{cc}", "compute_capability": cc, **where}
    return {"kind": "gpu", "product": gpu.name, "compute_capability": cc, "mig_profile": gpu.mig_profile,
            "memory_gib": gpu.memory_gib, **where}


def detect(nvml: Any = None) -> list[GpuInfo]:
    """Read every GPU and MIG device through NVML; an empty list when there is no driver or no GPU.

    *nvml*: the ``pynvml`` module (imported when None); every query a MIG instance or an integrated GPU may refuse
    is guarded in :func:`trtwarm.node.nvml.read_all`.
    """
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return []
    from trtwarm.node.nvml import read_all

    return [GpuInfo(**fields, mig_profile=mig_profile(fields["name"])) for fields in read_all(nvml)]


def lock_id(info: GpuInfo) -> str:
    """The per-GPU build lock's id: the lower-cased UUID (``gpu-…``, or ``mig-…`` for a MIG instance)."""
    return info.uuid.lower()


def current(environ: Mapping[str, str], gpus: list[GpuInfo] | None = None) -> GpuInfo:
    """Select this container's GPU among *gpus* (default: :func:`detect` them). :raises ConfigError: none visible
    (exit 2)."""
    gpus = detect() if gpus is None else gpus
    if not gpus:
        raise ConfigError("no NVIDIA GPU found (NVML could not be initialised or lists no device)",
                          hint=_NO_GPU_HINT)
    return select(gpus, environ)


def probe(choice: str, environ: Mapping[str, str]) -> GpuInfo | None:
    """The GPU a ``--device`` *choice* builds on: None for ``cpu``, and for ``auto`` where NVML lists no GPU; for
    ``gpu`` (or ``auto`` with GPUs) this container's. :raises ConfigError: ``gpu`` and none visible (exit 2)"""
    if choice == "cpu":
        return None
    gpus = detect()
    return None if choice == "auto" and not gpus else current(environ, gpus)


__all__ = ["VOLUME_MOUNTS_DIR", "GpuInfo", "current", "declared", "detect", "key_fields", "lock_id", "mig_profile",
           "probe", "select"]
