"""The windows between a check and a use, attacked by a writer of the volume (or of a seed tier) with inotify
(:mod:`adversary`): each test opens one window of docs/trust.md's threat model with real processes and asserts what
must hold whoever wins the race: nothing unverified is built, signed, loaded or handed over, and nothing outside the
cache changes. The remote pull and push are attacked in ``test_windows_remote.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from adversary import (CLOSE_NOWRITE, CLOSE_WRITE, CREATE, MOVED_TO, OPEN, Adversary, Trap, plant_fifo,
                       rewrite_in_place, swap_dir, swap_file, tree, victim)
from conftest import cmd_init_args, entries, ort_init_args, run_trtwarm, wait_until
from test_sidecar import SidecarProc, get
from test_threat_model import _rewrite
from test_trust import keypair, policy

from trtwarm.volume.layout import Layout

EVIL = b"EVIL: bytes a writer of the volume wants the GPU server to run\n" * 512


def _handed(handoff: Path) -> bytes | None:
    """The engine bytes the server would load (None: nothing handed over)."""
    link = handoff / "engine"
    return link.resolve().read_bytes() if link.exists() else None


def _slow_copy(seconds: float = 0.3) -> str:
    """A command build that takes a moment (the watcher adds its watches) and writes the model as the engine."""
    return f"sh -c 'sleep {seconds}; cp {{model}} {{output}}.part && mv {{output}}.part {{output}}'"


def _builder_args(model: Path, cache: Path, handoff: Path, *extra: str, command: str | None = None) -> list[str]:
    args = cmd_init_args(model, cache, handoff, *extra)
    args[args.index("--build-command") + 1] = command or _slow_copy()
    return args


def _trusted(tmp_path: Path) -> tuple[Path, Path]:
    """A signing key and the enforce policy trusting it."""
    private, public = keypair(tmp_path, "ci")
    return private, policy(tmp_path, "enforce", public)


def _forge(entry: Path, into: Path, payload: bytes = EVIL) -> Path:
    """What a writer of the volume makes of a genuine entry, without any key: its engine replaced, the manifest
    re-hashed to match, no signature (a consistent, unsigned entry of the same key and name)."""
    subprocess.run(["cp", "-a", str(entry), str(into)], check=True)
    _rewrite(into, payload)
    (into / "manifest.sig.json").unlink(missing_ok=True)
    return into


@pytest.mark.parametrize("attack", ["replaced when written", "rewritten in place after its close"])
def test_a_builder_signs_only_the_bytes_it_built(model: Path, cache: Path, tmp_path: Path, attack: str) -> None:
    """Window: between the build tool writing the engine and its hash. The build happens in a Pod-private directory
    and is copied into ``.staging`` hashed from the private bytes, so a change in staging breaks the signature."""
    private, enforce = _trusted(tmp_path)
    Layout(cache).ensure()
    trap = Trap(cache / ".staging", "engine.plan", CREATE | MOVED_TO, swap_file(EVIL), deep=True) \
        if attack == "replaced when written" else \
        Trap(cache / ".staging", "engine.plan", CLOSE_WRITE, rewrite_in_place(EVIL), deep=True)
    with Adversary(trap):
        built = run_trtwarm(*_builder_args(model, cache, tmp_path / "hb", "--signing-key", str(private),
                                           "--trust-policy", str(enforce)))
    assert built.returncode == 0 and built.summary["result"] == "built", built.stderr
    assert _handed(tmp_path / "hb") == model.read_bytes(), "the builder handed over what it built"
    if attack == "replaced when written":
        assert trap.fired, "the attack did not happen"
    verify = run_trtwarm("verify", "--cache-dir", str(cache), "--trust-policy", str(enforce), "--json")
    findings = json.loads(verify.stdout)["problems"]
    if trap.fired:  # the entry on the volume holds the writer's bytes under a signature over the built ones
        assert verify.returncode != 0 and findings[0]["kind"] in ("corrupt", "truncated"), verify.stdout
    consumer = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "hc", "--read-only", "--trust-policy",
                                          str(enforce), "--lock-timeout", "2s"))
    assert _handed(tmp_path / "hc") in (None, model.read_bytes()), "a consumer served bytes nobody signed"
    assert "Traceback" not in consumer.stderr + built.stderr


def test_after_its_publish_a_builder_hands_over_what_it_verified(model: Path, cache: Path, tmp_path: Path) -> None:
    """Window: between the publishing rename and the hand-over. A consistent unsigned entry renamed in under the
    builder's entry name at that moment was handed over (exit 0, ready) without the trust check."""
    private, enforce = _trusted(tmp_path)
    assert run_trtwarm(*_builder_args(model, cache, tmp_path / "h0")).returncode == 0
    [genuine] = entries(cache)
    (cache / ".attacker").mkdir()
    forged = _forge(genuine, cache / ".attacker" / "forged")
    subprocess.run(["rm", "-rf", str(genuine)], check=True)
    trap = Trap(cache / "entries", genuine.name, MOVED_TO, swap_dir(forged, cache / ".attacker" / "published"),
                dirs=True)
    with Adversary(trap):
        built = run_trtwarm(*_builder_args(model, cache, tmp_path / "hb", "--signing-key", str(private),
                                           "--trust-policy", str(enforce)))
    assert trap.fired, "the attack did not happen"
    assert _handed(tmp_path / "hb") in (None, model.read_bytes()), built.stderr
    assert built.returncode == 0 and _handed(tmp_path / "hb") == model.read_bytes(), built.stderr


def test_the_load_check_runs_on_the_verified_bytes(model: Path, cache: Path, tmp_path: Path) -> None:
    """Window: between the hash (and the signature check) and ``--verify load``. The load ran on the volume's file,
    rewritten meanwhile: ONNX Runtime in the init container parsed bytes nobody verified."""
    private, enforce = _trusted(tmp_path)
    assert run_trtwarm(*ort_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    genuine = (entry / "model.ort.onnx").read_bytes()
    trap = Trap(entry, "model.ort.onnx", CLOSE_NOWRITE, rewrite_in_place(b"\xff garbage, not a model "))
    with Adversary(trap):
        hit = run_trtwarm(*ort_init_args(model, cache, tmp_path / "h1", "--read-only", "--verify", "load",
                                         "--trust-policy", str(enforce), "--lock-timeout", "2s"))
    assert trap.fired, "the attack did not happen"
    assert "does not load" not in hit.stderr, "the load check read bytes rewritten after the check"
    assert hit.returncode == 0 and hit.summary["result"] == "hit", hit.stderr
    assert _handed(tmp_path / "h1") == genuine


def test_a_hit_hands_over_the_bytes_it_hashed(model: Path, cache: Path, tmp_path: Path) -> None:
    """Window: between a hit's hash and its hand-over copy (``--handoff copy``, the default under enforce)."""
    private, enforce = _trusted(tmp_path)
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    trap = Trap(entry, "engine.plan", CLOSE_NOWRITE, swap_file(EVIL))
    with Adversary(trap):
        hit = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1", "--read-only", "--trust-policy",
                                         str(enforce), "--lock-timeout", "2s"))
    assert trap.fired, "the attack did not happen"
    assert _handed(tmp_path / "h1") == model.read_bytes() and hit.returncode == 0, hit.stderr


def test_publish_and_cleanup_never_act_outside_the_cache(model: Path, cache: Path, tmp_path: Path) -> None:
    """Window: between the build and the publish's chmod and cleanup. Links planted in staging made the publish
    chmod a 0600 file and a 0700 directory outside the cache, and a directory of staging swapped for a link made it
    remove an empty directory there."""
    outside = victim(tmp_path / "victim")
    before = tree(outside)
    command = ("sh -c 'sleep 0.3; mkdir -p {workdir}/scratch/empty; cp {model} {output}.part && "
               "mv {output}.part {output}'")
    for attempt in range(3):  # a loaded machine can publish before the watcher acts: try again, on a new volume
        volume = cache / f"try-{attempt}"
        Layout(volume).ensure()

        def swap_scratch(engine: Path, volume: Path = volume) -> None:  # the build's scratch becomes a link
            scratch = engine.parent / "scratch"
            if scratch.exists():
                os.rename(scratch, volume / f"aside-{os.urandom(2).hex()}")
            os.symlink(outside / "private", scratch)

        def plant(engine: Path) -> None:
            os.symlink(outside / "credentials", engine.parent / "zz-file")
            os.symlink(outside / "private", engine.parent / "zz-dir")

        traps = (Trap(volume / ".staging", "engine.plan", OPEN, swap_scratch, deep=True),
                 Trap(volume / ".staging", "engine.plan", CLOSE_NOWRITE | CLOSE_WRITE, plant, deep=True))
        with Adversary(*traps):
            built = run_trtwarm(*_builder_args(model, volume, tmp_path / f"hb{attempt}", command=command))
        assert tree(outside) == before, "the publish changed something outside the cache"
        assert built.returncode in (0, 4, 6) and "Traceback" not in built.stderr, built.stderr
        if all(t.fired for t in traps):
            return
    pytest.fail("the attack did not happen in 3 tries")


def test_a_fifo_swapped_in_after_the_size_check_never_blocks_a_hit(model: Path, cache: Path, tmp_path: Path) -> None:
    """Window: between the size check and the hash of the next file. Opening a FIFO for reading waits for a writer
    forever: the init hung in ``open()``."""
    command = "sh -c 'head -c 50000000 /dev/urandom > {output}; head -c 1000 /dev/urandom > {workdir}/side.bin'"
    assert run_trtwarm(*_builder_args(model, cache, tmp_path / "h0", command=command)).returncode == 0
    [entry] = entries(cache)
    trap = Trap(entry, "engine.plan", OPEN, lambda p: plant_fifo()(p.parent / "side.bin"))
    with Adversary(trap):
        try:
            hit = run_trtwarm(*_builder_args(model, cache, tmp_path / "h1", command=command), timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("the init blocked on a FIFO")
    assert trap.fired, "the attack did not happen"
    assert hit.returncode == 0 and "Traceback" not in hit.stderr, hit.stderr
    assert _handed(tmp_path / "h1") is not None and (tmp_path / "h1" / "engine").resolve().is_file()


def test_a_junk_entry_with_a_252_byte_name_is_moved_aside_and_rebuilt(model: Path, cache: Path,
                                                                      tmp_path: Path) -> None:
    """The quarantine's name (and every name derived from an entry's) fits NAME_MAX whatever the entry is called."""
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0")).returncode == 0
    [entry] = entries(cache)
    key16 = entry.name.rpartition("--")[2]
    for run in ("init", "verify"):
        junk = cache / "entries" / ("x" * (252 - 18) + "--" + key16)
        junk.mkdir()
        (junk / "manifest.json").write_text("junk")
        subprocess.run(["rm", "-rf", str(entry)], check=True)
        done = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h-{run}")) if run == "init" else \
            run_trtwarm("verify", "--cache-dir", str(cache), "--fix")
        assert done.returncode in (0, 8) and "Traceback" not in done.stderr, done.stderr
        assert not junk.exists(), "the junk entry is still there"
        names = [p.name for p in (cache / ".quarantine").iterdir()]
        assert names and all(len(os.fsencode(n)) <= 255 for n in names)
        if run == "init":
            assert done.summary["result"] == "built"
            [entry] = entries(cache)


def test_a_seed_tier_on_a_read_only_bind_of_writable_storage_is_copied(model: Path, tmp_path: Path) -> None:
    """A read-only bind mount of a directory writable elsewhere is not immutable: linked in place, the server read
    bytes rewritten after the check, and ``/readyz`` answered 200 on them. Under enforce it is copied while hashed."""
    private, enforce = _trusted(tmp_path)
    seed_src, seed = tmp_path / "seed-src", tmp_path / "seed"
    assert run_trtwarm(*cmd_init_args(model, seed_src, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(seed_src)
    seed.mkdir()
    subprocess.run(["mount", "--bind", str(seed_src), str(seed)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(seed)], check=True)
        trap = Trap(entry, "engine.plan", CLOSE_NOWRITE, rewrite_in_place(EVIL))
        with Adversary(trap):
            run = run_trtwarm(*cmd_init_args(model, tmp_path / "cache", tmp_path / "h1", "--read-only",
                                             "--seed-cache", str(seed), "--trust-policy", str(enforce)))
        assert trap.fired, "the attack did not happen"
        assert run.returncode == 0, run.stderr
        assert _handed(tmp_path / "h1") == model.read_bytes(), "the server reads bytes rewritten after the check"
        side = SidecarProc(tmp_path / "cache", tmp_path / "h1")
        try:
            status, body = get(side.url + "/readyz")
        finally:
            side.stop()
        assert status == 503 or _handed(tmp_path / "h1") == model.read_bytes(), body
    finally:
        subprocess.run(["umount", str(seed)], check=True)


def test_readiness_rechecks_a_linked_engine_under_enforce(model: Path, cache: Path, tmp_path: Path) -> None:
    """``--handoff link`` under enforce hands over the volume's file: a same-size rewrite made after the init's check
    (and before the sidecar's first answer) is never answered 200, even with the file's identity restored as far as
    a writer can (mtime); the sidecar checks the bytes against their signed digests first."""
    private, enforce = _trusted(tmp_path)
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    handoff = tmp_path / "h1"
    run = run_trtwarm(*cmd_init_args(model, cache, handoff, "--read-only", "--trust-policy", str(enforce),
                                     "--handoff", "link"))
    assert run.returncode == 0 and "--handoff link under enforce" in run.stderr, run.stderr
    report = json.loads((handoff / "engine.json").read_text())
    assert report["handoff"] == "link" and list(report["recheck"]) == [report["path"]]
    side = SidecarProc(cache, handoff)
    try:
        wait_until(lambda: get(side.url + "/readyz")[0] == 200, 30, "ready on the signed bytes")
    finally:
        side.stop()
    engine = Path(report["path"])
    rewrite_in_place(EVIL)(engine)  # after the check
    # a write in the same timestamp tick as the check leaves the identity the init recorded: played here by
    # recording the rewritten file's identity, so only the bytes tell
    st = engine.stat()
    report["identities"][str(engine)] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    (handoff / "engine.json").write_text(json.dumps(report))
    side = SidecarProc(cache, handoff)
    try:
        wait_until(lambda: "changed after it was verified" in get(side.url + "/readyz")[1], 30,
                   "not ready on rewritten bytes")
        assert get(side.url + "/readyz")[0] == 503
    finally:
        side.stop()


def test_an_image_volume_seed_tier_is_linked_in_place(model: Path, tmp_path: Path) -> None:
    """An overlay whose superblock is read-only and has no upper directory (how CRI-O and podman mount an image)
    cannot change after the check: linked in place under enforce, no copy, ready."""
    private, enforce = _trusted(tmp_path)
    seed_src, seed, empty = tmp_path / "seed-src", tmp_path / "seed", tmp_path / "empty"
    assert run_trtwarm(*cmd_init_args(model, seed_src, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    seed.mkdir()
    empty.mkdir()
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={seed_src}:{empty}", str(seed)], check=True)
    try:
        run = run_trtwarm(*cmd_init_args(model, tmp_path / "cache", tmp_path / "h1", "--read-only", "--seed-cache",
                                         str(seed), "--trust-policy", str(enforce)))
        assert run.returncode == 0 and run.summary["result"] == "hit", run.stderr
        assert os.readlink(tmp_path / "h1" / "engine").startswith(str(seed / "entries"))
        assert not json.loads((tmp_path / "h1" / "engine.json").read_text())["recheck"]
    finally:
        subprocess.run(["umount", str(seed)], check=True)


@pytest.mark.parametrize("where", ["cache", "handoff"])
def test_a_build_directory_others_can_write_is_refused(model: Path, cache: Path, tmp_path: Path, where: str) -> None:
    """Builds happen where nobody else can write: a --build-dir on the cache volume or in the hand-off directory
    (the server's container shares it) is refused before anything is built (exit 2, naming it)."""
    inside = (cache if where == "cache" else tmp_path / "h") / "build"
    inside.mkdir(parents=True)
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--build-dir", str(inside)))
    assert run.returncode == 2 and "build directory" in run.stderr and "hint:" in run.stderr, run.stderr
    assert not (cache / "entries").exists() or not list((cache / "entries").iterdir())


def test_a_build_leaves_nothing_in_its_private_directory(model: Path, cache: Path, tmp_path: Path) -> None:
    builds = tmp_path / "builds"
    builds.mkdir()
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--build-dir", str(builds)))
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr
    assert list(builds.iterdir()) == [] and _handed(tmp_path / "h") == model.read_bytes()


def test_a_killed_builds_private_directory_is_removed_by_the_next_build(model: Path, cache: Path,
                                                                         tmp_path: Path) -> None:
    """A SIGKILLed build leaves its partial engine in the private directory (an init restarted in the same Pod
    finds the emptyDir as it was): the next build removes this host's directories of inits that are gone, never
    another host's or a live one's."""
    from trtwarm.volume.store import host_tag

    builds = tmp_path / "builds"
    dead = 2 ** 22 + 1  # a pid no process has: above the largest pid_max
    stale = {"dead": builds / f"trtwarm-build-0123456789abcdef.{host_tag()}.{dead}.x1",
             "live": builds / f"trtwarm-build-0123456789abcdef.{host_tag()}.{os.getpid()}.x2",
             "other host": builds / f"trtwarm-build-0123456789abcdef.elsewhere.{dead}.x3"}
    for path in stale.values():
        path.mkdir(parents=True)
        (path / "engine.plan.part").write_bytes(b"partial")
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--build-dir", str(builds)))
    assert run.returncode == 0 and run.summary["result"] == "built", run.stderr
    assert sorted(p.name for p in builds.iterdir()) == sorted(stale[k].name for k in ("live", "other host"))


#: ``/proc/self/mountinfo`` lines inside ``podman run --mount type=image,...,destination=/models -v DIR:/seed:ro``
#: on this machine (podman 4, overlay storage): the image volume is an overlay whose superblock is read-only with
#: lower directories only; the read-only bind shows ``ro`` for the mount and ``rw`` for its filesystem
PODMAN_MOUNTINFO = """\
84 56 0:41 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/containers/storage/overlay/l/VZ37,upperdir=/var/lib/\
containers/storage/overlay/6df2/diff,workdir=/var/lib/containers/storage/overlay/6df2/work,uuid=on
90 84 0:50 / /models rw,relatime - overlay /var/lib/containers/storage/overlay-containers/191b/userdata/overlay/9014/\
merge ro,lowerdir=/var/lib/containers/storage/overlay/21b0/merged:/var/lib/containers/storage/overlay-containers/191b
91 84 254:0 /tmp/rosrc /seed ro,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
"""


@pytest.mark.parametrize(("path", "fixed"), [("/models/cache", True), ("/seed/cache", False), ("/data", False)])
def test_what_an_image_volume_looks_like_from_inside_the_container(path: str, fixed: bool) -> None:
    from trtwarm.init.seed import immutable

    assert immutable(Path(path), PODMAN_MOUNTINFO) is fixed


@settings(max_examples=300, deadline=None)
@given(name=st.text(min_size=1, max_size=400).filter(lambda n: "/" not in n and "\0" not in n))
def test_every_name_derived_from_an_entry_fits_name_max(name: str) -> None:
    from trtwarm.names import NAME_MAX, bounded

    suffix = ".20261206T000000Z.manifest-json-is-not-valid-json.abcd"
    made = bounded(name, suffix)
    assert len(os.fsencode(made)) <= NAME_MAX and made.endswith(suffix)
    assert made == name + suffix or bounded(name + "x", suffix) != made  # two long names stay apart
