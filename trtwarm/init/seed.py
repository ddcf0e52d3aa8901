"""Read-only lower tiers: ``init --seed-cache DIR`` (repeatable; ``TRTWARM_SEED_CACHE``), e.g. an engine image
mounted as a Kubernetes image volume (``trtwarm prebuild --oci-image``; docs/oci.md).

A tier is looked up after the local volume and before the remote repository, in the order given. An entry found
there is verified like a local one (sizes and SHA-256, or the node's stamps under ``--verify stamp``; its signature
under a trust policy; the builder's checks) and handed over **in place**, without a copy: an image mount is
immutable and pinned by digest. A damaged or untrusted entry there cannot be quarantined (the tier is read-only): it
is reported and skipped. A tier that is missing, empty or has no ``VERSION`` (a runtime that mounted nothing, a wrong
``subPath``) fails the start at once (exit 6): nobody will ever fill an immutable tier, so waiting ``--lock-timeout``
for it would only delay the failure.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trtwarm.errors import EntryInvalid, VolumeError
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
        try:
            entry = check_entry(path, plan.key, file_digest=plan.stamps.digest if plan.stamps else None)
            plan.load_check()(entry)  # the signature under a trust policy, the builder's checks
        except EntryInvalid as exc:
            log.warning("the seed cache %s holds %s, but it is refused (%s); it is read-only, so it stays there: "
                        "looking further", tier, plan.label, exc.reason)
            plan.emit("SeedEngineRejected", f"{plan.name} in the seed cache {tier} was refused: {exc.reason}",
                      "Warning")
            continue
        log.info("found %s in the seed cache %s", plan.label, tier)
        return entry
    return None


def read_only_mount(path: Path) -> bool:
    """Whether *path* lies on a read-only mount (an image volume, a ``ro`` bind): only then can an entry found there
    be handed over in place under ``enforce``, since nobody can rewrite it after the check."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


__all__ = ["check_tiers", "lookup", "read_only_mount"]
