"""Where the cache and the hand-off go when nobody said: ``/models/cache`` and ``/trtwarm`` (the chart's mounts),
except for a user outside Kubernetes who can neither find nor create them (issue 27: a newcomer's first ``init``).

:func:`local_defaults` is called once, on the parsed flags; it reads only the mapping it is given and the file
system's answer to "does this exist, may I create it".
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from trtwarm.config import DEFAULT_CACHE_DIR, DEFAULT_HANDOFF_DIR


class Preset(str):
    """A default path nobody chose: the flag's default while neither the flag nor its variable is given (argparse
    keeps the object), so :func:`local_defaults` can tell it from the same path given on purpose."""


CACHE_PRESET, HANDOFF_PRESET = Preset(DEFAULT_CACHE_DIR), Preset(DEFAULT_HANDOFF_DIR)


def _creatable(path: Path) -> bool:
    """Whether *path* exists (of any type: a mount, read-only or not, is used as it is), or this user could create it
    (its nearest existing ancestor is a directory this user may write)."""
    if os.path.lexists(path):
        return True
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    return os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK)


def _writable(path: Path) -> bool:
    """Whether *path* is a directory this user may write, or could create: a hand-off is only ever written."""
    if os.path.lexists(path):
        return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)
    return _creatable(path)


def user_cache_home(environ: Mapping[str, str]) -> Path | None:
    """``$XDG_CACHE_HOME/trtwarm``, else ``~/.cache/trtwarm`` (``$HOME``); None without an absolute one of them."""
    for base, below in ((environ.get("XDG_CACHE_HOME", ""), ()), (environ.get("HOME", ""), (".cache",))):
        if os.path.isabs(base):
            return Path(base, *below, "trtwarm")
    return None


def local_defaults(ns: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """Outside Kubernetes, move a preset ``cache_dir`` that does not exist and that this user cannot create, and a
    preset ``handoff_dir`` that this user can neither write nor create (a newcomer's machine: no ``/models``, no
    writable ``/trtwarm``, not root), under the user's cache directory (:func:`user_cache_home`): ``cache`` and
    ``handoff`` there, side by side.

    Nothing changes in a Pod (``KUBERNETES_SERVICE_HOST``), for a path given by flag or variable, for a cache that
    exists (a mounted volume is used as it is, even read-only: it serves hits and ``ls``), or for a path this user may
    create (root), or when the user's cache directory cannot be created either. :return: the one log line saying
    what moved and why, or None
    """
    home = user_cache_home(environ)
    if environ.get("KUBERNETES_SERVICE_HOST") or home is None or not _writable(home):
        return None
    moved = []
    for dest, below, usable in (("cache_dir", "cache", _creatable), ("handoff_dir", "handoff", _writable)):
        value = getattr(ns, dest, None)
        if isinstance(value, Preset) and not usable(Path(value)):
            setattr(ns, dest, str(home / below))
            moved.append((value, home / below, "--" + dest.replace("_", "-")))
    if not moved:
        return None
    return (f"not in a Kubernetes Pod, and this user cannot create or write {' or '.join(m[0] for m in moved)}: "
            f"using {' and '.join(str(m[1]) for m in moved)} instead (choose with {', '.join(m[2] for m in moved)})")


__all__ = ["CACHE_PRESET", "HANDOFF_PRESET", "Preset", "local_defaults", "user_cache_home"]
