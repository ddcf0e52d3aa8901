"""How many CPUs this process may keep busy: its affinity mask, capped by its cgroup's CPU quota.

``os.cpu_count()`` is the node's count: a container limited to 2 CPUs on a 64-core node sees 64, and 64 hashing
threads there would only take turns in the quota's time slices. The quota is ``cpu.max`` (cgroup v2: ``"max 100000"``
or ``"<quota> <period>"``) or ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (v1: quota ``-1`` for none), read in the
process's own cgroup and every ancestor up to the mount (a parent's limit binds the child too); the tightest wins,
rounded up (1.5 CPUs allow 2 threads: the second one's share is not lost).

Reads only small files under ``/proc/self`` and the cgroup mounts; any that is missing or unreadable counts as "no
limit" (the affinity mask still holds).
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

_FILES = {"cgroup2": ("cpu.max",), "cgroup": ("cpu.cfs_quota_us", "cpu.cfs_period_us")}


def quota_cpus(version: str, texts: tuple[str, ...]) -> float | None:
    """The CPUs a quota allows, from the text of ``cpu.max`` (*version* ``cgroup2``) or of ``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us`` (``cgroup``); None for no limit or text that is not a quota."""
    try:
        if version == "cgroup2":
            quota, period = texts[0].split()
        else:
            quota, period = texts[0].strip(), texts[1].strip()
        if quota == "max":
            return None
        quota_us, period_us = int(quota), int(period)
    except (ValueError, IndexError):
        return None
    if quota_us <= 0 or period_us <= 0:  # v1's -1: no limit
        return None
    return quota_us / period_us


def cgroup_dirs(proc_cgroup: str, mountinfo: str) -> list[tuple[str, str]]:
    """``[(version, directory)]`` holding this process's CPU quota files, from the text of ``/proc/self/cgroup`` and
    of ``/proc/self/mountinfo``: its own cgroup first, then each ancestor up to the mount's root."""
    paths = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths.setdefault("cgroup2", parts[2])
        elif "cpu" in parts[1].split(","):
            paths.setdefault("cgroup", parts[2])
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in paths:
            continue
        if tail[0] == "cgroup" and "cpu" not in tail[2].split(","):
            continue
        found += [(tail[0], d) for d in _below(fields[4], fields[3], paths[tail[0]])]
    return found


def _below(point: str, root: str, path: str) -> list[str]:
    """The directories from the cgroup *path* up to the mount at *point* (which shows the cgroup *root*)."""
    root, path = root.rstrip("/") or "/", path.rstrip("/") or "/"
    if root != "/" and path != root and not path.startswith(root + "/"):
        return [point]  # the cgroup is outside what is mounted (a namespace's view): only the mount's own files
    rel = path[len(root):].strip("/") if root != "/" else path.strip("/")
    parts = [p for p in rel.split("/") if p and p not in (".", "..")]
    return [os.path.join(point, *parts[:i]) for i in range(len(parts), -1, -1)]


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read(256)


def quota_limit(proc_cgroup: str, mountinfo: str) -> float | None:
    """The tightest CPU quota over this process's cgroups (None: no quota), reading their files."""
    limits = []
    for version, directory in cgroup_dirs(proc_cgroup, mountinfo):
        try:
            texts = tuple(_read(os.path.join(directory, name)) for name in _FILES[version])
        except OSError:
            continue
        if (cpus := quota_cpus(version, texts)) is not None:
            limits.append(cpus)
    return min(limits, default=None)


@lru_cache(maxsize=1)
def usable_cpus() -> int:
    """The CPUs this process may keep busy at once: its affinity mask, capped by its cgroup CPU quota; at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    try:
        limit = quota_limit(_read_all("/proc/self/cgroup"), _read_all("/proc/self/mountinfo"))
    except OSError:
        limit = None
    if limit is not None:
        count = min(count, math.ceil(limit))
    return max(1, count)


def _read_all(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


__all__ = ["cgroup_dirs", "quota_cpus", "quota_limit", "usable_cpus"]
