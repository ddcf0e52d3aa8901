"""The start a hit record answers, and where its records are: what :mod:`trtwarm.init.fasthit` (the repeat hit) and
:mod:`trtwarm.init.hitrecord` (which writes records) must compute alike.

A start is an init's arguments, its working directory and a *keyed digest* of its environment (never a variable's
name or value: secrets have any name). The key is the stamp directory's random ``hit.key``.

Imports ``json``, ``os``, ``zlib`` and CPython's built-in SHA-256 only: the repeat hit pays for every import.
"""

from __future__ import annotations

import json
import os
import zlib

try:  # CPython's built-in SHA-256 (3.11: _sha256, 3.12+: _sha2): hashlib's OpenSSL load costs 2.5 ms per repeat
    from _sha256 import sha256
except ImportError:  # pragma: no cover - other Python versions
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256

from trtwarm.fs.info import safely_owned

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: every module imported here is paid on each repeat
    from collections.abc import Mapping
    from typing import Any

#: variables of one Pod that its siblings do not share, left out of the start so a Deployment's Pods repeat each
#: other's hits (the lease is named after the Pod anew each time); and a shell's bookkeeping (cwd is compared)
POD_OWN = frozenset({"HOSTNAME", "POD_NAME", "POD_UID", "POD_IP", "POD_IPS", "_", "SHLVL", "PWD", "OLDPWD"})
#: the stamp directory's secret salt of the environment's digest (32 random bytes, 0600, made by the first record)
ENV_KEY = "hit.key"
ENV_KEY_BYTES = 32
DEFAULT_HANDOFF_DIR = "/trtwarm"  # = config.DEFAULT_HANDOFF_DIR, not imported (config imports argparse)


def start_of(args: list[str], environ: Mapping[str, str], key: bytes) -> dict[str, Any]:
    """What an init's outcome may depend on besides files: its arguments, directory and environment.

    The environment is kept only as a digest keyed by *key* (the stamp directory's :data:`ENV_KEY`): it holds
    secrets under any name (``AWS_SECRET_ACCESS_KEY``, a database URL), which must never reach a disk, and a
    plain digest of one low-entropy value could be guessed; the keyed digest still tells any change apart.
    """
    env = sorted((k, v) for k, v in environ.items() if k not in POD_OWN)
    digest = sha256(key + json.dumps(env, separators=(",", ":")).encode("utf-8", "surrogateescape")).hexdigest()
    return {"args": list(args), "cwd": os.getcwd(), "env_sha256": digest}


def env_key(directory: str) -> bytes | None:
    """The stamp directory's :data:`ENV_KEY`, when it is a safely owned regular file of the right size; else None
    (no record of any start can then be used)."""
    try:
        fd = os.open(os.path.join(directory, ENV_KEY), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        data = os.read(fd, ENV_KEY_BYTES + 1) if safely_owned(st) and st.st_mode & 0o077 == 0 else b""
    finally:
        os.close(fd)
    return data if len(data) == ENV_KEY_BYTES else None


def record_name(start: dict[str, Any]) -> str:
    """``hit-<crc32>.json``: a checksum only finds the file; the record holds the whole start, compared in full."""
    return f"hit-{zlib.crc32(json.dumps(start, sort_keys=True).encode()):08x}.json"


def stamp_dir(args: list[str], environ: Mapping[str, str]) -> str:
    """Where the full init would keep stamps for these arguments, as its parser reads them (``--stamp-dir``, else
    ``<handoff-dir>/stamps``; the flag, else ``TRTWARM_*``). A form this misreads only looks in the wrong place,
    where no record of this start can be."""
    def option(flag: str) -> str | None:
        value = None
        for i, arg in enumerate(args):
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg[len(flag) + 1:]
        return value or environ.get("TRTWARM_" + flag[2:].upper().replace("-", "_")) or None

    found = option("--stamp-dir") or os.path.join(option("--handoff-dir") or DEFAULT_HANDOFF_DIR, "stamps")
    return os.path.abspath(found)


def boot_id() -> str:
    """This boot of this node (the CPU in the key cannot change without one)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


__all__ = ["DEFAULT_HANDOFF_DIR", "ENV_KEY", "ENV_KEY_BYTES", "POD_OWN", "boot_id", "env_key", "record_name",
           "stamp_dir", "start_of"]
