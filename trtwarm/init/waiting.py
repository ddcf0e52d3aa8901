"""What an init that cannot build says while it waits: whose build it waits for, on the key's lock or the GPU's, and
why it only waits (``--read-only``, or a trust policy it cannot sign for)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trtwarm.init.plan import Plan
from trtwarm.volume.lock import describe_owner

log = logging.getLogger("trtwarm.init.warm")


def wait_message(name: str, owner: dict[str, Any] | None, gpu_lock: str | None = None) -> str:
    """What a blocked init says: whose build of *name* it waits for, or, on the GPU's lock, which other engine."""
    if gpu_lock is None:
        doing = (owner or {}).get("doing")
        if isinstance(doing, str) and doing.startswith("pulling from "):
            return f"waiting for {name}: being pulled from {doing.removeprefix('pulling from ')[:200]} by " \
                   f"{describe_owner(owner)}"
        return f"waiting for {name}: being built by {describe_owner(owner)}"
    other = (owner or {}).get("label") or "another engine"
    return f"waiting for the GPU ({gpu_lock}) to build {name}: {other} is being built on it by {describe_owner(owner)}"


def on_wait(plan: Plan, gpu_lock: str | None = None) -> Callable[[float, dict[str, Any] | None], None]:
    """Progress lines, and one Event, while blocked on the key's lock or on the GPU's (builds on one GPU are
    serialized: parallel builds skew TensorRT's tactic timing)."""
    said = []

    def report(elapsed: float, owner: dict[str, Any] | None) -> None:
        log.info("%s (%.0f s waited)", wait_message(plan.label, owner, gpu_lock), elapsed)
        if not said:
            said.append(True)
            plan.emit("WaitingForEngineBuild", wait_message(plan.name, owner, gpu_lock))  # its message says a pull

    return report


def wait_reason(plan: Plan) -> tuple[str, str, str]:
    """Why this Pod waits instead of building: (log prefix, what it waits for, what to do when it waited too long)."""
    if plan.settings.read_only:
        return ("--read-only", "another builder to publish",
                "build it elsewhere first (a Pod without --read-only, or CI), or raise --lock-timeout")
    if plan.stuck is not None:  # a damaged entry on a volume this Pod cannot write (trtwarm.init.warm._replacement)
        return ("damaged entry on a volume this Pod cannot write", "a writer to replace",
                "run `trtwarm verify --fix` where the volume is mounted read-write (or let a Pod that may write it "
                "start), or raise --lock-timeout")
    return ("trust policy enforce, no --signing-key",
            "a builder with a trusted signing key to publish a signed entry of",
            "this Pod would refuse what it built itself, so it only waits: run a builder with a signing key the "
            "policy trusts (e.g. the prebuild Job, deploy/README.md), give this Pod --signing-key "
            "(TRTWARM_SIGNING_KEY), or raise --lock-timeout")


__all__ = ["on_wait", "wait_message", "wait_reason"]
