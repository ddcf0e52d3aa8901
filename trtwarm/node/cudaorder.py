"""Which visible GPU CUDA makes device 0: ``CUDA_VISIBLE_DEVICES`` resolved the way CUDA resolves it, from NVML's facts.

CUDA's documentation (CUDA C++ Programming Guide, "CUDA Environment Variables"): the variable is "a comma-separated
sequence of GPU identifiers", enumerated "in the order of the sequence"; an invalid entry hides itself and every
entry after it. An identifier is

* a **UUID** as ``nvidia-smi -L`` prints it (``GPU-8932f937-...``), or "enough digits from the beginning ... to
  uniquely identify" it; a MIG instance as ``MIG-<uuid>`` or ``MIG-GPU-<uuid>/<GPU instance>/<compute instance>``.
  Matched against NVML's UUIDs; order plays no part;
* an **index** into CUDA's own enumeration, whose order ``CUDA_DEVICE_ORDER`` sets: ``PCI_BUS_ID`` "orders devices
  by PCI bus ID in ascending order" (what nvidia-smi shows); ``FASTEST_FIRST``, the default, enumerates them "in
  fastest to slowest order using a simple heuristic" (older guides: "guess which device is fastest using a simple
  heuristic, and make that device 0, leaving the order of the rest of the devices unspecified"). The heuristic is
  not published.

:func:`order` approximates FASTEST_FIRST from NVML: by compute capability, then by CUDA cores × maximum SM clock
(``nvmlDeviceGetNumGpuCores`` × ``nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)``: the throughput the CUDA samples'
``gpuGetMaxGflopsDeviceId`` ranks by, SM count × cores per SM × clock), ties by PCI bus id. Only the *product*
matters to the key, so the approximation is used only where it decides between products, and then only when it is
clear (:func:`clearly_before`); otherwise trtwarm refuses (exit 2) rather than key a GPU CUDA may not use. Where it
decides, it says so in a warning. docs/decisions.md records the decision.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from trtwarm.errors import ConfigError

log = logging.getLogger("trtwarm.gpu")
#: cores × clock must differ by this factor between two products of one compute capability to call one faster
CLEAR_MARGIN = 1.2
_OLD_MIG = re.compile(r"MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)")
ORDER_HINT = ("set CUDA_DEVICE_ORDER=PCI_BUS_ID (the order nvidia-smi shows) in this container and the inference "
              "server's, or name the GPU: CUDA_VISIBLE_DEVICES=<its UUID, from nvidia-smi -L>")


def product(gpu: Any) -> tuple[Any, ...]:
    """What the key sees of a GPU: two devices alike here get one key whichever CUDA picks."""
    return gpu.name, tuple(gpu.compute_capability), gpu.mig_profile, gpu.memory_gib


def throughput(gpu: Any) -> int | None:
    """CUDA cores × maximum SM clock (MHz), where NVML answered both."""
    return gpu.cores * gpu.sm_clock_mhz if gpu.cores and gpu.sm_clock_mhz else None


def clearly_before(a: Any, b: Any) -> bool:
    """Whether FASTEST_FIRST surely enumerates *a* before *b*, two different products: a higher compute capability
    that throughput does not contradict, or at one compute capability a throughput :data:`CLEAR_MARGIN` higher.
    Never for a MIG device: a slice has its GPU's compute capability and a fraction of its SMs, which NVML does not
    count (``nvmlDeviceGetNumGpuCores`` answers for whole GPUs)."""
    if a.mig_profile or b.mig_profile:
        return False
    ta, tb = throughput(a), throughput(b)
    if tuple(a.compute_capability) != tuple(b.compute_capability):
        newer = tuple(a.compute_capability) > tuple(b.compute_capability)
        return newer and (ta is None or tb is None or ta > tb)
    return ta is not None and tb is not None and ta >= CLEAR_MARGIN * tb


def order(gpus: Sequence[Any], mode: str) -> list[list[Any]]:
    """CUDA's enumeration of *gpus* under *mode* (``PCI_BUS_ID`` or ``FASTEST_FIRST``), as blocks of positions: a
    device comes after the block before it only where it is clearly slower than every device there
    (:func:`clearly_before`); else it joins that block, whose order NVML cannot tell. Each block in PCI bus order.
    A block of one product keys alike whatever CUDA does inside it."""
    by_bus = sorted(gpus, key=lambda g: g.pci_bus_id.lower())
    if mode == "PCI_BUS_ID":  # one bus id: the MIG devices of one GPU (or ids NVML did not give), in no known order
        same_bus: dict[str, list[Any]] = {}
        for gpu in by_bus:
            same_bus.setdefault(gpu.pci_bus_id.lower(), []).append(gpu)
        return list(same_bus.values())
    ranked = sorted(by_bus, key=lambda g: (tuple(g.compute_capability), throughput(g) or 0), reverse=True)
    blocks: list[list[Any]] = []
    for gpu in ranked:
        if blocks and not all(product(g) != product(gpu) and clearly_before(g, gpu) for g in blocks[-1]):
            blocks[-1].append(gpu)
        else:
            blocks.append([gpu])
    return [sorted(block, key=lambda g: g.pci_bus_id.lower()) for block in blocks]


def device_order(environ: Mapping[str, str]) -> str:
    """``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` or ``FASTEST_FIRST`` (the default, also for a value CUDA does not know,
    which is said)."""
    value = environ.get("CUDA_DEVICE_ORDER", "").strip()
    if value and value not in ("PCI_BUS_ID", "FASTEST_FIRST"):
        log.warning("CUDA_DEVICE_ORDER=%r is neither FASTEST_FIRST nor PCI_BUS_ID: taken as CUDA's default, "
                    "FASTEST_FIRST", value)
    return "PCI_BUS_ID" if value == "PCI_BUS_ID" else "FASTEST_FIRST"


def by_uuid(gpus: Sequence[Any], ident: str) -> Any | None:
    """The device a UUID entry names (a unique prefix of a ``GPU-``/``MIG-`` UUID, or a ``MIG-GPU-<uuid>/<gi>/<ci>``);
    None: none. :raises ConfigError: a prefix of several devices' UUIDs"""
    old = _OLD_MIG.fullmatch(ident)
    if old:
        return next((g for g in gpus if (g.parent_uuid or "").lower() == old[1].lower()
                     and (g.gpu_instance, g.compute_instance) == (int(old[2]), int(old[3]))), None)
    found = [g for g in gpus if g.uuid.lower().startswith(ident.lower())]
    if len(found) > 1:
        raise ConfigError(f"CUDA_VISIBLE_DEVICES={ident} names more than one GPU ({', '.join(g.uuid for g in found)})",
                          hint="give enough of the UUID to name one GPU (nvidia-smi -L)")
    return found[0] if found else None


def at(gpus: Sequence[Any], position: int, mode: str, what: str) -> Any | None:
    """The device at *position* of CUDA's enumeration of *gpus*; None: past its end. *what* names the entry for the
    messages. :raises ConfigError: the position falls among devices of different products whose order CUDA does not
    make knowable here"""
    start = 0
    for block in order(gpus, mode):
        if position < start + len(block):
            products = {product(g) for g in block}
            if len(products) > 1:
                names = " and ".join(sorted({_describe(g) for g in block}))
                setting = "PCI_BUS_ID" if mode == "PCI_BUS_ID" else "FASTEST_FIRST (CUDA's default)"
                why = ("CUDA orders the MIG devices of one GPU (one PCI bus id) in no published order"
                       if mode == "PCI_BUS_ID" else "CUDA orders GPUs by a heuristic it does not publish")
                raise ConfigError(f"{what} under CUDA_DEVICE_ORDER={setting}: which of {names} CUDA enumerates there "
                                  f"cannot be told from NVML ({why}), and the key must name the GPU the engine is "
                                  "built on", hint=ORDER_HINT)
            chosen = block[position - start]
            if mode == "FASTEST_FIRST" and len({product(g) for g in gpus}) > 1:
                log.warning("%s under CUDA_DEVICE_ORDER=FASTEST_FIRST (CUDA's default), among different GPUs: taking "
                            "%s, by compute capability, then CUDA cores x maximum SM clock (an approximation of "
                            "CUDA's unpublished heuristic); %s", what, _describe(chosen), ORDER_HINT)
            return chosen
        start += len(block)
    return None


def _describe(gpu: Any) -> str:
    speed = throughput(gpu)
    facts = f"compute {gpu.compute_capability[0]}.{gpu.compute_capability[1]}" + (
        f", {gpu.cores} cores x {gpu.sm_clock_mhz} MHz" if speed else ", cores and clock unknown")
    return f"{gpu.name} at {gpu.pci_bus_id or '?'} ({facts})"


__all__ = ["CLEAR_MARGIN", "ORDER_HINT", "at", "by_uuid", "clearly_before", "device_order", "order", "product",
           "throughput"]
