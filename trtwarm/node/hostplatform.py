"""The host platform: operating system and CPU architecture, as an engine built on a GPU depends on them.

TensorRT names an engine's target with ``RuntimePlatform``; the default, ``SAME_AS_BUILD``, "can only run on the
identical platform it was built on" (``include/NvInfer.h`` release/10.16 L10406-10427, main L9905-9923;
``python/docstrings/infer/pyCoreDoc.h`` ``RuntimePlatformDoc``): an engine built on an x86_64 H100 does not load on
an aarch64 GH200, although both are compute capability 9.0. So every GPU-keyed key carries ``linux-x86_64`` or
``linux-aarch64`` (``<os>-<arch>``, lower case, the architecture under its Linux name).
"""

from __future__ import annotations

import os
import re

#: other spellings of the same architecture (macOS/Windows/Go names) -> the Linux name ``uname -m`` gives
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
PLATFORM_RE = re.compile(r"^[a-z0-9]+-[a-z0-9_]+$")


def normalise(os_name: str, machine: str) -> str:
    """``("Linux", "arm64")`` -> ``linux-aarch64``."""
    arch = machine.strip().lower()
    return f"{os_name.strip().lower()}-{_ARCH_ALIASES.get(arch, arch)}"


def host_platform() -> str:
    """This host's platform, e.g. ``linux-x86_64`` (``os.uname``: no subprocess, unlike ``platform.processor``)."""
    uname = os.uname()
    return normalise(uname.sysname, uname.machine)


def parse_platform(text: str) -> str:
    """A platform as a user writes it (``linux-arm64``, ``Linux-x86_64``) in the canonical form.

    :raises ValueError: not ``<os>-<arch>``
    """
    os_name, sep, machine = text.strip().partition("-")
    value = normalise(os_name, machine) if sep else ""
    if not PLATFORM_RE.match(value):
        raise ValueError(f"{text!r} is not a platform: give <os>-<arch>, e.g. linux-x86_64 or linux-aarch64")
    return value


__all__ = ["PLATFORM_RE", "host_platform", "normalise", "parse_platform"]
