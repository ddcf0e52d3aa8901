"""Device identity for the key: the CPU (model name and the ISA flags that change kernels) or the GPU (NVML)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

_ISA = re.compile(r"^(avx2|avx512\w*|amx\w*|avx_vnni\w*|fma|f16c|sve\w*|asimd\w*|neon)$")


@lru_cache(maxsize=1)
def cpu_fields(cpuinfo: str | None = None) -> dict[str, Any]:
    """Return the key's ``device`` section for this CPU.

    :param cpuinfo: the text of ``/proc/cpuinfo`` (read when None)
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    arch = os.uname().machine  # not platform.processor(): it may run `uname -p` in a subprocess
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "cpu model") and not model:
            model = value.strip()
        elif name in ("flags", "features"):
            flags.update(f for f in value.split() if _ISA.match(f))
    return {"kind": "cpu", "arch": arch, "model": " ".join(model.split()) or arch, "isa": sorted(flags)}


def short_name(device: Mapping[str, Any]) -> str:
    """A short, readable device label for entry names: ``cpu-x86_64``, ``nvidia-h200``, ``sm8.6``; a GPU on a host
    other than ``linux-x86_64`` says so (``sm9.0-linux-aarch64``), since one volume may serve both."""
    if device.get("kind") == "cpu":
        return f"cpu-{device.get('arch', '')}"
    if "product" in device:
        label = str(device["product"])
        if device.get("mig_profile"):
            label += f"-{device['mig_profile']}"
    else:
        label = str(device.get("class", "gpu"))
    platform = device.get("platform")
    return label if platform in (None, "linux-x86_64") else f"{label}-{platform}"


__all__ = ["cpu_fields", "short_name"]
