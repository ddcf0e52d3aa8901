"""The lifecycle commands: ``ls``, ``stats``, ``verify``, ``gc``, ``rm``. Each inspects, plans, then executes.

Modelled on ``hf cache ls|rm|prune|verify`` and ``ccache -s``: a table for people, ``--json`` for scripts, and
nothing removed without ``--yes`` (or a ``y`` at the terminal's prompt).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trtwarm.errors import EntriesDamaged, LockTimeoutError, volume_error
from trtwarm.lifecycle import gc as gclib
from trtwarm.lifecycle.inventory import Inventory, collector_paused, scan
from trtwarm.lifecycle.tables import human_age, human_bytes, render, utc
from trtwarm.volume.layout import Layout

_SORTS: dict[str, Any] = {"used": lambda r: -(r["last_used_ts"] or r["created_ts"] or 0.0),
                          "size": lambda r: -(r["bytes"] or 0), "name": lambda r: r["name"] or ""}


def _inventory(ns: argparse.Namespace, manifests: bool = False, index: bool = False) -> Inventory:
    layout = Layout(Path(ns.cache_dir))
    layout.require()  # a missing or foreign dir is exit 6, not "0 entries": an unmounted volume must not look empty
    if not index:
        return scan(layout, manifests=manifests)
    from trtwarm.lifecycle.manifest_index import ManifestIndex

    return scan(layout, index=ManifestIndex.load(layout))


def _print_json(doc: Any) -> None:
    # indented for a person at a terminal; compact for a pipe (the indenting encoder is pure Python, ~10x slower)
    if sys.stdout.isatty():
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(json.dumps(doc, sort_keys=True, separators=(",", ":")))


def cmd_ls(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm ls``: entries with their use, plus builds in progress and (``--all``) quarantined entries."""
    with collector_paused():  # the index, the scan, the records and their JSON: 10^5 objects, no cycles
        return _ls(ns)


def _ls(ns: argparse.Namespace) -> int:
    from trtwarm.lifecycle import listing
    from trtwarm.lifecycle.filters import Filters
    from trtwarm.lifecycle.verify import apply_record

    filters = Filters.from_namespace(ns)
    columns = listing.parse_columns(ns.columns)  # before the scan: a wrong --columns fails at once
    # manifest and size checks, no hashing: damage shows as `damaged: why`; unchanged manifests come from the index
    inv = _inventory(ns, index=True)
    verified = apply_record(inv.layout, inv.entries)  # plus what the last `trtwarm verify` found by hashing
    rows = filters.apply(listing.records(inv, ns.all or filters.wants_quarantined))
    rows.sort(key=lambda r: (r["status"] == "quarantined", _SORTS[ns.sort](r)))
    if ns.json:
        _print_json(rows)
    else:
        _print_table(inv, rows, filters, columns, verified)
    if inv.index is not None and inv.index.stale:
        if sys.stdout is not None:  # None: started with standard output closed
            sys.stdout.flush()  # the listing is out before the index is written
        inv.index.save(inv.layout)
    damaged = [r for r in rows if r["status"] == "damaged"]
    if damaged:  # answered for every entry; the exit code says some are damaged (their reasons are listed)
        raise EntriesDamaged(f"{len(damaged)} of the entries listed {'is' if len(damaged) == 1 else 'are'} damaged: "
                             + ", ".join(r["name"] or "?" for r in damaged[:3]) + (", ..." if len(damaged) > 3 else ""))
    return 0


def _print_table(inv: Inventory, rows: list[dict[str, Any]], filters: Any, columns: tuple[list[str], bool],
                 verified: dict[str, Any] | None) -> None:
    """``ls``'s table, its totals and when the volume was last verified."""
    from trtwarm.lifecycle import listing
    from trtwarm.lifecycle.filters import Filters

    print(listing.table(rows, columns[0], inv.now, listing.WIDTH if columns[1] else None))
    shown = [r for r in rows if r["status"] in ("ok", "damaged")]
    print(f"\n{len(shown)} {'entry' if len(shown) == 1 else 'entries'}, {human_bytes(sum(r['bytes'] for r in shown))}; "
          f"{sum(bool(r['pods']) for r in shown)} in use; {sum(r['status'] == 'building' for r in rows)} building; "
          f"{len(inv.quarantined)} quarantined"
          + ("" if filters == Filters() else f" (filtered by {filters.describe()}, from the flags or their TRTWARM_* "
                                              f"variables; {len(inv.entries)} on the volume)"))
    when = verified.get("finished") if verified else None
    last = f"last run {human_age(inv.now - when)} ago" if isinstance(when, (int, float)) else "never run here"
    print(f"status checks manifests and sizes only; `trtwarm verify` re-hashes every file ({last})")


def stats(inv: Inventory) -> dict[str, Any]:
    """The ``trtwarm stats`` summary of a volume."""
    uses = [e.last_used for e in inv.entries if e.last_used]
    by_builder: dict[str, dict[str, int]] = {}
    for e in inv.entries:
        row = by_builder.setdefault(e.describe()["builder"], {"entries": 0, "bytes": 0})
        row["entries"] += 1
        row["bytes"] += e.bytes
    return {"cache_dir": str(inv.layout.root), "entries": len(inv.entries),
            "bytes": sum(e.bytes for e in inv.entries), "damaged": sum(e.status != "ok" for e in inv.entries),
            "quarantined": len(inv.quarantined), "quarantined_bytes": sum(e.bytes for e in inv.quarantined),
            "in_use": sum(e.in_use for e in inv.entries), "builds_in_progress": len(inv.building),
            "staging": len(inv.staging), "oldest_use_ts": min(uses, default=None),
            "newest_use_ts": max(uses, default=None), "by_builder": by_builder}


def cmd_stats(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm stats``: a ``ccache -s`` style summary (damage: what a scan sees, plus the last verification's)."""
    from trtwarm.lifecycle.verify import apply_record

    inv = _inventory(ns)
    apply_record(inv.layout, inv.entries)
    s = stats(inv)
    if ns.json:
        _print_json(s)
        return 0
    age = (lambda ts: "-" if ts is None else f"{utc(ts)} ({human_age(inv.now - ts)} ago)")
    lines = [("cache directory", s["cache_dir"]), ("entries", f"{s['entries']} ({human_bytes(s['bytes'])})"),
             ("  damaged", s["damaged"]), ("  in use now", s["in_use"]),
             ("quarantined", f"{s['quarantined']} ({human_bytes(s['quarantined_bytes'])})"),
             ("builds in progress", s["builds_in_progress"]), ("staging directories", s["staging"]),
             ("oldest use", age(s["oldest_use_ts"])), ("newest use", age(s["newest_use_ts"]))]
    lines += [(f"  {name}", f"{row['entries']} entries, {human_bytes(row['bytes'])}")
              for name, row in sorted(s["by_builder"].items())]
    print("\n".join(f"{k:<22}{v}" for k, v in lines[:9]))
    if s["by_builder"]:
        print("by builder version")
        print("\n".join(f"{k:<22}{v}" for k, v in lines[9:]))
    return 0


def cmd_verify(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm verify``: exit 0 when clean (or all fixed), 8 (:class:`EntriesDamaged`) when problems remain."""
    from trtwarm.lifecycle.verify import fix, inspect, record
    from trtwarm.volume.store import EngineStore

    gate = None
    if ns.trust_policy or ns.trust_mode:
        from trtwarm.trust.policy import Gate

        gate = Gate.create(Path(ns.trust_policy) if ns.trust_policy else None, ns.trust_mode)
    inv = _inventory(ns, manifests=True)
    checked, problems = inspect(inv, gate)
    fixed, failure = fix(EngineStore(inv.layout), problems) if ns.fix and not ns.dry_run else ([], None)
    remaining = [p for p in problems if p not in fixed and p.fix != "warn"]
    if not ns.dry_run:
        record(inv.layout, checked, remaining)  # what `trtwarm ls` shows until the next verification
    if ns.json:
        _print_json({"checked": checked, "problems": [p.as_json() for p in problems],
                     "fixed": [p.as_json() for p in fixed], "remaining": len(remaining)})
    else:
        if problems:
            print(render(["KIND", "FIX", "PATH", "DETAIL"], [[p.kind, "fixed" if p in fixed else p.fix,
                                                              p.path.name, p.detail] for p in problems]))
        print(_verify_summary(checked, problems, fixed, gate, ns))
    if failure is not None:  # asked to repair and the volume refused: exit 6 with its hint, not "problems remain"
        raise volume_error(failure, "repair", failure.filename or inv.layout.root)
    if remaining:
        raise EntriesDamaged(f"{len(remaining)} problem{'s' if len(remaining) != 1 else ''} found"
                             + ("" if ns.fix and not ns.dry_run else "; `trtwarm verify --fix` repairs them"),
                             hint="the table above lists each problem and what --fix does about it")
    return 0


def _verify_summary(checked: int, problems: list[Any], fixed: list[Any], gate: Any, ns: argparse.Namespace) -> str:
    """``N entries checked; M problems; K fixed``: what ``--trust-mode warn`` lists is not counted, and a dry run
    says what it would fix."""
    counted = [p for p in problems if p.fix != "warn"]
    line = f"{checked} entries checked"
    if gate is not None and gate.mode != "off":
        line += f" (signatures checked, trust mode {gate.mode})"
    line += f"; {len(counted)} problems"
    if len(counted) < len(problems):
        line += f" (and {len(problems) - len(counted)} untrusted, listed but not counted under warn)"
    if ns.fix and ns.dry_run:
        return line + f"; --dry-run: would fix {len(counted)}, nothing changed"
    return line + f"; {len(fixed)} fixed" + ("" if ns.fix or not counted else " (run with --fix to repair)")


def _confirm(ns: argparse.Namespace, question: str) -> bool:
    """Whether to execute: never on a dry run (whatever else is given), then ``--yes``, then a terminal's answer."""
    if ns.dry_run:
        return False
    if ns.yes:
        return True
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _show_plan(plan: gclib.Plan, now: float, as_json: bool) -> None:
    if as_json:
        return
    if plan.actions:
        print(render(["REASON", "SIZE", "LAST USED", "NAME"], [
            [a.reason, human_bytes(a.bytes), f"{human_age(now - a.last_used)} ago" if a.last_used else "-", a.name]
            for a in plan.actions], right=("SIZE",)))
    for info, why in plan.protected:
        print(f"keep {info.name}: {why}")
    more = f"; {plan.deferred} more next pass" if plan.deferred else ""
    print(f"plan: remove {len(plan.actions)}, free {human_bytes(plan.bytes)}{more}")


def _carry_out(ns: argparse.Namespace, inv: Inventory, plan: gclib.Plan, what: str) -> int:
    _show_plan(plan, inv.now, ns.json)
    go = bool(plan.actions) and _confirm(ns, f"{what} {len(plan.actions)} items, {human_bytes(plan.bytes)}?")
    done: list[gclib.Action] = []
    if go:
        try:
            with gclib.VolumeGcLock(inv.layout, ns.lock_mode):
                done = gclib.execute(inv.layout, plan, respect_leases=not getattr(ns, "force", False))
        except LockTimeoutError:  # another gc: a TimeoutError, hence an OSError, but exit 5
            raise
        except OSError as exc:  # read-only, unwritable, full (.trash), I/O error: nothing half-removed is visible
            raise volume_error(exc, f"{what} entries in", inv.layout.root) from exc
    if ns.json:
        _print_json({"plan": [a.as_json() for a in plan.actions], "deferred": plan.deferred,
                     "kept": [{"name": i.name, "why": w} for i, w in plan.protected], "executed": go,
                     "removed": [a.as_json() for a in done], "freed_bytes": sum(a.bytes for a in done)})
    elif go:
        print(f"removed {len(done)}, freed {human_bytes(sum(a.bytes for a in done))}")
    elif plan.actions:
        print("nothing removed: " + ("--dry-run" if ns.dry_run else "pass --yes to remove"))
    return 0


def cmd_gc(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm gc``: plan by age, byte budget and count per model; execute only when confirmed."""
    policy = gclib.Policy.parse(ns.max_age, ns.max_bytes, ns.keep_per_model, ns.quarantine_grace, ns.max_remove)
    if None is policy.max_age is policy.max_bytes is policy.keep_per_model and not ns.json:
        print("no policy given (--max-age, --max-bytes, --keep-per-model): only quarantined entries older than "
              f"--quarantine-grace ({ns.quarantine_grace}) and staging directories of dead builders are planned\n"
              "hint: e.g. trtwarm gc --max-age 30d --max-bytes 100G --dry-run")
    inv = _inventory(ns)
    return _carry_out(ns, inv, gclib.plan(inv, policy), "remove")


def cmd_rm(ns: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """``trtwarm rm KEY|NAME...``: entries in use are kept unless ``--force``."""
    from trtwarm.errors import ConfigError

    inv = _inventory(ns)
    plan, unmatched = gclib.plan_remove(inv, ns.selectors, ns.force)
    if unmatched:
        raise ConfigError(f"no entry matches {', '.join(unmatched)}", hint="`trtwarm ls` lists names and keys; "
                          "a key prefix needs at least 8 hex digits")
    code = _carry_out(ns, inv, plan, "remove")
    if plan.protected and not ns.json:
        print("hint: an entry in use is kept; pass --force to remove it anyway (its Pods keep the engine they have "
              "open, but a restart rebuilds it)")
    return code


def add_parsers(sub: Any, cache_default: str) -> None:
    """Define ``ls``, ``stats``, ``verify``, ``gc`` and ``rm`` on the subparsers action *sub*."""
    def parser(name: str, func: Any, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--cache-dir", default=cache_default, help="the shared cache volume (%(default)s)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    ls = parser("ls", cmd_ls, "list the entries: use, size, Pods using them, status")
    ls.add_argument("--sort", default="used", choices=sorted(_SORTS), help="order (%(default)s: recent first)")
    ls.add_argument("--all", action="store_true", help="also list quarantined entries")
    ls.add_argument("--columns", help="comma-separated columns, or all (default: a table that fits 120 characters: "
                    "key,model,builder,device,precision,shapes,size,used,pods,status; also name,created,path)")
    from trtwarm.lifecycle.filters import add_flags

    add_flags(ls)
    parser("stats", cmd_stats, "summary of the volume")
    verify = parser("verify", cmd_verify, "re-hash every entry; find corrupt, truncated and orphaned files")
    verify.add_argument("--fix", action="store_true", help="quarantine bad entries, remove stale staging")
    verify.add_argument("--dry-run", action="store_true", help="with --fix: only say what would be fixed")
    verify.add_argument("--trust-policy", help="also check each entry's signature against this policy (JSON)")
    verify.add_argument("--trust-mode", choices=["enforce", "warn", "off"], help="override the policy's mode")
    gc = parser("gc", cmd_gc, "remove entries by age, byte budget and count per model (plan first)")
    gc.add_argument("--max-age", help="remove entries unused for longer, e.g. 30d")
    gc.add_argument("--max-bytes", help="then remove least recently used entries until under this, e.g. 100G")
    gc.add_argument("--keep-per-model", type=int, help="keep only the N most recently used entries of each model and "
                    "configuration (precision, device, shapes: an fp16 engine never displaces the int8 one)")
    gc.add_argument("--quarantine-grace", default="7d", help="keep quarantined entries this long (%(default)s)")
    gc.add_argument("--max-remove", type=int, default=gclib.MAX_REMOVE, help="bound per pass (%(default)s)")
    rm = parser("rm", cmd_rm, "remove entries by key, key prefix, entry name or model name")
    rm.add_argument("selectors", nargs="+", metavar="KEY|NAME", help="a key, a key prefix (8+ hex digits, any case), "
                    "an entry name with or without its --key16 suffix, or a model name (all its entries)")
    rm.add_argument("--force", action="store_true", help="also remove entries a live Pod holds a lease on")
    for p in (gc, rm):
        p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
        p.add_argument("--yes", "-y", action="store_true", help="do not ask")
        p.add_argument("--lock-mode", default="auto", choices=["auto", "flock", "lease"],
                       help="for the volume's gc lock, as for trtwarm init (%(default)s)")


__all__ = ["add_parsers", "cmd_gc", "cmd_ls", "cmd_rm", "cmd_stats", "cmd_verify", "stats"]
