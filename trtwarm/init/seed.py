"""Read-only lower tiers: ``init --seed-cache DIR`` (repeatable; ``TRTWARM_SEED_CACHE``), e.g. an engine image
mounted as a Kubernetes image volume (``trtwarm prebuild --oci-image``; docs/oci.md).

A tier is looked up after the local volume and before the remote repository, in the order given. An entry found
there is verified like a local one (through descriptors; sizes and SHA-256, or the node's stamps under ``--verify
stamp``; its signature under a trust policy; the builder's checks) and handed over **in place**, without a copy,
only where trtwarm can know that its bytes cannot change after the check (:func:`immutable`: an image volume);
under ``enforce`` any other tier is handed over as this Pod's copy, made while it is hashed. A damaged or untrusted
entry there cannot be quarantined (the tier is read-only): it is reported and skipped.

**How it knows** (:func:`immutable`). The mount holding the tier, as ``/proc/self/mountinfo`` shows it, must be a
filesystem whose *superblock* is read-only (``ro`` in the super options, after the source) of a type that has no
other writer: ``overlay`` without an ``upperdir`` (how CRI-O and podman mount an image: the image's layers as
lower directories only), ``squashfs`` or ``erofs``. Nothing in the Pod and no other Pod can write such a
filesystem (only root on the node can, which is out of the threat model). A read-only *bind* mount (``ro`` in the
mount options, ``rw`` in the super options) of a hostPath, an NFS export or a PVC is a view of storage that may be
written elsewhere: it is not immutable, whatever ``statvfs`` says. A runtime that presents an image as a read-only
bind of its snapshot directory looks the same from inside the Pod, so it is copied too (safe, not free).

A tier that is missing, empty or has no ``VERSION`` (a runtime that mounted nothing, a wrong ``subPath``) fails the
start at once (exit 6): nobody will ever fill an immutable tier, so waiting ``--lock-timeout`` for it would only
delay the failure.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trtwarm.errors import EntryInvalid, VolumeError
from trtwarm.fs.ops import Mount, mount_of, mount_of_fd
from trtwarm.fs.ops import mountinfo as read_mountinfo
from trtwarm.volume.layout import Layout
from trtwarm.volume.store import EngineStore
from trtwarm.volume.entry import Entry, check_entry

log = logging.getLogger("trtwarm.init.warm")


def check_tiers(tiers: Iterable[Path]) -> None:
    """Each tier must be a trtwarm cache (a directory with a ``VERSION`` this trtwarm reads). :raises VolumeError:"""
    for tier in tiers:
        try:
            Layout(tier).require()
        except VolumeError as exc:
            raise VolumeError(f"--seed-cache {tier}: {exc.message.removeprefix(f'cache dir {tier} ')}",
                              hint="a seed cache is read-only and nobody fills it: check that the engine image is "
                              "mounted there (volumes[].image; with containerd < 2.2 subPath is ignored: mount the "
                              "image at /models and pass --seed-cache /models/cache), or drop --seed-cache") from None


def lookup(plan: Any) -> Entry | None:
    """The verified entry of *plan*'s key in the first seed tier that has one, or None."""
    for tier in plan.settings.seed_caches:
        path = EngineStore(Layout(tier)).find(plan.key, plan.name)
        if path is None:
            continue
        in_place = plan.settings.handoff is None and immutable(path)  # no copy needed: no checker that copies
        checker = (plan.stamps.checker() if plan.stamps else None) if in_place else plan.checker
        entry = None
        try:
            entry = check_entry(path, plan.key, checker=checker, keep=True, trust=plan.trust_check)  # trust first
            plan.load_check(trust=False)(entry)  # the builder's checks, on what was checked
            # the path guessed; the files checked decide (a link swapped in for the entry since leads elsewhere)
            plan.in_place = in_place and entry.opened is not None and immutable_fds(entry.opened.fds.values())
        except EntryInvalid as exc:
            if entry is not None:
                entry.close()
            log.warning("the seed cache %s holds %s, but it is refused (%s); it is read-only, so it stays there: "
                        "looking further", tier, plan.label, exc.reason)
            plan.emit("SeedEngineRejected", f"{plan.name} in the seed cache {tier} was refused: {exc.reason}",
                      "Warning")
            continue
        log.info("found %s in the seed cache %s", plan.label, tier)
        return entry
    return None


#: filesystems with no writer once their superblock is read-only (overlay: only without an upper directory)
IMMUTABLE_TYPES = ("overlay", "squashfs", "erofs")


def immutable(path: Path, mountinfo: str | None = None) -> bool:
    """Whether *path* lies on a mount nobody can write after the check (see the module's "How it knows"): a guess
    made before the check, which :func:`immutable_fds` confirms on the files checked. *mountinfo*: the text of
    ``/proc/self/mountinfo`` (read when None; unreadable: False)."""
    mountinfo = mountinfo if mountinfo is not None else read_mountinfo()
    return mountinfo is not None and _fixed(mount_of(os.path.realpath(path), mountinfo))


def immutable_fds(fds: Iterable[int], mountinfo: str | None = None) -> bool:
    """Whether every open file of *fds* was reached through a mount nobody can write (each descriptor's own mount,
    ``mnt_id`` in ``/proc/self/fdinfo``, never a path looked up again): only then is an entry handed over in place
    under ``enforce``. Unknown: False."""
    mountinfo = mountinfo if mountinfo is not None else read_mountinfo()
    fds = list(fds)
    return mountinfo is not None and bool(fds) and all(_fixed(mount_of_fd(fd, mountinfo)) for fd in fds)


def _fixed(mount: Mount | None) -> bool:
    """A read-only superblock of a type with no other writer (overlay: only without an upper directory)."""
    if mount is None:
        return False
    options = mount.super_options.split(",")
    return mount.fstype in IMMUTABLE_TYPES and "ro" in options and not any(o.startswith("upperdir=") for o in options)


__all__ = ["IMMUTABLE_TYPES", "check_tiers", "immutable", "immutable_fds", "lookup"]
