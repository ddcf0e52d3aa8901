"""More windows between a check and a use, attacked by a writer of the volume or of a seed tier (:mod:`adversary`,
real processes): variants that ``test_windows.py`` does not try. Each test asserts what must hold whoever wins the
race: nothing unverified handed over, no exit 1, nothing outside the cache changed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from adversary import (CLOSE_NOWRITE, CLOSE_WRITE, CREATE, MOVED_TO, OPEN, Adversary, Trap, swap_symlink, tree,
                       victim)
from conftest import cmd_init_args, entries, run_trtwarm
from test_windows import EVIL, _builder_args, _forge, _handed, _trusted

from trtwarm.volume.layout import Layout


def test_a_seed_entry_turned_into_a_link_to_an_image_volume_is_still_copied(model: Path, tmp_path: Path) -> None:
    """Window: between the check of an entry in a mutable seed tier and the hand-off's decision to link in place.
    The decision was the path's: an entry directory swapped for a link to any directory on an image volume (an
    immutable mount) after its check made the init link the server to ``<tier>/entries/<name>/...`` through that
    link, with no copy and no recheck; the writer then points the link at its own bytes."""
    private, enforce = _trusted(tmp_path)
    seed_src, seed = tmp_path / "seed-src", tmp_path / "seed"
    image_src, empty, image = tmp_path / "image-src", tmp_path / "empty", tmp_path / "image"
    assert run_trtwarm(*cmd_init_args(model, seed_src, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(seed_src)
    for where in (seed, empty, image, image_src / "any", tmp_path / "evil"):
        where.mkdir(parents=True)
    (image_src / "any" / "engine.plan").write_bytes(b"on an image volume")
    (tmp_path / "evil" / "engine.plan").write_bytes(EVIL)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={image_src}:{empty}", str(image)],
                   check=True)
    subprocess.run(["mount", "--bind", str(seed_src), str(seed)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(seed)], check=True)

        def to_image(engine: Path) -> None:
            os.rename(engine.parent, tmp_path / "aside")
            os.symlink(image / "any", engine.parent)

        trap = Trap(entry, "engine.plan", CLOSE_NOWRITE, to_image)
        with Adversary(trap):
            run = run_trtwarm(*cmd_init_args(model, tmp_path / "cache", tmp_path / "h1", "--read-only",
                                             "--seed-cache", str(seed), "--trust-policy", str(enforce),
                                             "--lock-timeout", "3s"))  # a rejected seed: exit 5, not a long wait
        assert trap.fired, "the attack did not happen"
        assert "Traceback" not in run.stderr and run.returncode in (0, 5), run.stderr
        os.unlink(entry)  # later, the writer points its link at its own bytes
        os.symlink(tmp_path / "evil", entry)
        assert _handed(tmp_path / "h1") in (None, model.read_bytes()), "the server reads what the tier's writer chose"
        if run.returncode == 0:
            report = json.loads((tmp_path / "h1" / "engine.json").read_text())
            assert report["handoff"] == "copy", report
    finally:
        subprocess.run(["umount", str(seed)], check=True)
        subprocess.run(["umount", str(image)], check=True)


def test_a_build_directory_under_a_shared_parent_swapped_for_the_writers(model: Path, cache: Path,
                                                                          tmp_path: Path) -> None:
    """Window: between the private build directory's creation and the build tool's writes, when ``--build-dir``
    (or TMPDIR) is a directory others can write (mode 0777, no sticky bit: a shared hostPath). The writer renames the
    private directory away and puts its own under the name: the build tool wrote, and the load check read, the
    writer's directory, while the copy into staging read the private one (empty): exit 1 ("a bug"); had the swap
    come before the directory was opened, the whole build ran in the writer's directory."""
    private, enforce = _trusted(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)

    def swap(made: Path) -> None:  # the writer's own directory (another uid's, open to all) under the name
        os.rename(made, tmp_path / "aside")
        made.mkdir()
        (made / "their-file").write_text("theirs")
        os.chown(made, 65534, 65534)
        made.chmod(0o777)

    trap = Trap(shared, "trtwarm-build-*", CREATE, swap, dirs=True)
    with Adversary(trap):
        built = run_trtwarm(*_builder_args(model, cache, tmp_path / "hb", "--signing-key", str(private),
                                           "--trust-policy", str(enforce), "--build-dir", str(shared)))
    assert trap.fired, "the attack did not happen"
    assert built.returncode != 1 and "Traceback" not in built.stderr, built.stderr
    assert _handed(tmp_path / "hb") in (None, model.read_bytes())
    assert (trap.fired[0] / "their-file").read_text() == "theirs", "the writer's directory was emptied"
    if built.returncode == 2:  # the swap came before the directory was opened: the writer's is refused
        assert "another owner" in built.stderr and _handed(tmp_path / "hb") is None, built.stderr
    else:
        assert built.returncode == 0 and _handed(tmp_path / "hb") == model.read_bytes(), built.stderr


@pytest.mark.parametrize("what", ["a file", "a link to a credential file"])
def test_a_name_taken_in_staging_before_the_builder_writes_it(model: Path, cache: Path, tmp_path: Path,
                                                              what: str) -> None:
    """Window: between the staging directory's creation and the copy of the build into it. A writer of the volume
    (same uid, or the volume's group on a group-shared volume) creates ``engine.plan`` there first: the copy's
    ``O_EXCL`` create refused it (nothing followed or truncated) but the ``FileExistsError`` ended the init with exit
    1 ("a bug in trtwarm"). Now a refusal naming it (exit 9), like any other file trtwarm did not make in its own
    directory."""
    private, enforce = _trusted(tmp_path)
    outside = victim(tmp_path / "victim")
    before = tree(outside)
    Layout(cache).ensure()

    def take(staged: Path) -> None:
        if what == "a file":
            (staged / "engine.plan").write_bytes(EVIL)
        else:
            os.symlink(outside / "credentials", staged / "engine.plan")

    trap = Trap(cache / ".staging", "*", CREATE, take, dirs=True)
    with Adversary(trap):
        built = run_trtwarm(*_builder_args(model, cache, tmp_path / "hb", "--signing-key", str(private),
                                           "--trust-policy", str(enforce)))
    assert trap.fired, "the attack did not happen"
    assert built.returncode == 9 and "made by someone else" in built.stderr, built.stderr
    assert tree(outside) == before
    assert _handed(tmp_path / "hb") in (None, model.read_bytes())


@pytest.mark.parametrize("push", ["best-effort", "required"])
def test_a_push_to_an_oci_registry_never_uploads_a_file_a_link_swapped_in_points_at(
        model: Path, cache: Path, tmp_path: Path, push: str) -> None:
    """The push window of ``test_windows_remote.py`` against a real OCI registry, and with ``--remote-push
    required`` (the push before the local publish, from staging's neighbour: the private build): a link to a
    credential file swapped in for the engine in ``.staging`` or in the published entry, right after each is
    written or read, is never followed; no blob in the registry's storage holds the credential."""
    from registry import Registry, anonymous_env, registry_binary

    if registry_binary() is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    outside = victim(tmp_path / "victim")
    env = anonymous_env(tmp_path / "home")
    server = Registry(tmp_path / "registry").start()
    try:
        Layout(cache).ensure()
        swap = swap_symlink(outside / "credentials")

        def link(path: Path) -> None:
            with contextlib.suppress(FileNotFoundError):  # published meanwhile: that window is the other trap's
                swap(path)

        traps = (Trap(cache / ".staging", "engine.plan", CLOSE_WRITE, link, deep=True),
                 Trap(cache / "entries", "*", MOVED_TO, lambda entry: link(entry / "engine.plan"), dirs=True))
        with Adversary(*traps):
            built = run_trtwarm(*_builder_args(model, cache, tmp_path / "h", "--remote",
                                               f"oci://{server.addr}/engines/push-{push}", "--remote-push", push),
                                env=env)
        assert any(t.fired for t in traps), "the attack did not happen"
        assert "Traceback" not in built.stderr and built.returncode != 1, built.stderr
        stored = [p.read_bytes() for p in server.data.rglob("data") if p.is_file()]
        assert stored and not any(b"SENTINEL-SECRET" in blob for blob in stored), "a credential was uploaded"
        assert model.read_bytes() in stored or built.returncode != 0
    finally:
        server.stop()


@pytest.mark.parametrize("command", ["gc", "rm", "verify --fix"])
def test_cleanup_never_follows_a_link_swapped_in_for_a_directory_it_removes(model: Path, cache: Path,
                                                                            tmp_path: Path, command: str) -> None:
    """Window: between a cleanup's move of an entry (into ``.trash`` or ``.quarantine``) and its removal of the tree:
    a subdirectory of the entry swapped for a link to a directory outside (``gc`` and ``rm`` remove it at once, so the
    swap may come too late there; the quarantine keeps it, and ``gc`` removes it later). Nothing outside changes."""
    outside = victim(tmp_path / "victim")
    before = tree(outside)
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0"))
    assert run.returncode == 0, run.stderr
    [entry] = entries(cache)
    (entry / "sub" / "deeper").mkdir(parents=True)  # damage for verify; a tree for gc and rm
    (entry / "sub" / "deeper" / "f").write_text("x")
    shutil.rmtree(cache / ".leases")  # the init's lease would keep gc and rm away

    def swap(moved: Path) -> None:
        with contextlib.suppress(FileNotFoundError):  # gc and rm may have removed it first: the race is theirs
            os.rename(moved / "sub", tmp_path / "aside")
            os.symlink(outside / "private", moved / "sub")

    where = ".quarantine" if command == "verify --fix" else ".trash"
    (cache / where).mkdir(exist_ok=True)
    trap = Trap(cache / where, "*", MOVED_TO | CREATE, swap, dirs=True)
    args = {"gc": ["gc", "--max-age", "0s", "--yes"], "rm": ["rm", entry.name, "--yes"],
            "verify --fix": ["verify", "--fix"]}[command]
    with Adversary(trap):
        done = run_trtwarm(*args, "--cache-dir", str(cache))
    assert trap.fired, "the cleanup did not move the entry"
    assert "Traceback" not in done.stderr and done.returncode != 1, done.stderr
    assert tree(outside) == before, "a cleanup changed something outside the cache"
    if command == "verify --fix":  # quarantined, kept for inspection: then collected after its grace period
        done = run_trtwarm("gc", "--cache-dir", str(cache), "--quarantine-grace", "0s", "--yes")
        assert done.returncode != 1 and tree(outside) == before, done.stderr


def test_a_build_directory_turned_into_a_link_to_the_volume_after_the_start_is_refused(model: Path, cache: Path,
                                                                                        tmp_path: Path) -> None:
    """Window: between the start's check that ``--build-dir`` is off the cache volume and the private directory's
    creation there. A writer of a directory on its path (here ``shared``, open to all) swaps the build directory
    for a link into the cache volume: the build was made on the volume, where its writers can reach it. The
    private directory made is checked again, where its descriptor says it is."""
    private, enforce = _trusted(tmp_path)
    shared = tmp_path / "shared"
    (shared / "b").mkdir(parents=True)
    shared.chmod(0o777)
    Layout(cache).ensure()
    (cache / "elsewhere").mkdir()

    def to_volume(_lock: Path) -> None:
        os.rename(shared / "b", tmp_path / "aside")
        os.symlink(cache / "elsewhere", shared / "b")

    swapped = Trap(cache / ".locks", "*.lock", CREATE, to_volume)
    on_volume = Trap(cache / "elsewhere", "trtwarm-build-*", CREATE, lambda _p: None, dirs=True)
    with Adversary(swapped, on_volume):
        built = run_trtwarm(*_builder_args(model, cache, tmp_path / "hb", "--signing-key", str(private),
                                           "--trust-policy", str(enforce), "--build-dir", str(shared / "b")))
    assert swapped.fired, "the attack did not happen"
    assert "Traceback" not in built.stderr, built.stderr
    if on_volume.fired:  # made there: refused before anything is built in it
        assert built.returncode == 2 and "is on the cache volume" in built.stderr, built.stderr
        assert not entries(cache), "a build made on the volume was published"
    else:
        assert built.returncode == 0 and _handed(tmp_path / "hb") == model.read_bytes(), built.stderr


def test_hits_racing_a_loop_that_swaps_the_engine_and_the_entry_never_hand_over_unsigned_bytes(
        model: Path, cache: Path, tmp_path: Path) -> None:
    """No inotify, no timing: a writer of the volume swaps, as fast as it can, the engine for its own bytes (a new
    inode each time) and the whole entry for a consistent unsigned one, while consumers under enforce start one
    after the other. Each start either hands over the signed bytes (the copy checked as made) or nothing."""
    import threading

    private, enforce = _trusted(tmp_path)
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h0", "--signing-key", str(private))).returncode == 0
    [entry] = entries(cache)
    stash = cache / ".attacker"
    stash.mkdir()
    (stash / "genuine").write_bytes(model.read_bytes())
    (stash / "evil").write_bytes(EVIL[:len(model.read_bytes())])
    forged = _forge(entry, stash / "forged")
    shutil.copytree(entry, stash / "pristine")
    stop = threading.Event()

    def swapper() -> None:
        turn = 0
        while not stop.is_set():
            turn += 1
            with contextlib.suppress(OSError):
                if not entry.exists():  # quarantined by a start that caught it: put the signed one back
                    shutil.copytree(stash / "pristine", stash / "again")
                    os.rename(stash / "again", entry)
                name = "evil" if turn % 2 else "genuine"
                os.link(stash / name, stash / "next")
                os.replace(stash / "next", entry / "engine.plan")
                if turn % 7 == 0:  # the whole entry, now and then
                    os.rename(entry, stash / "aside")
                    os.rename(forged, entry)
                    os.rename(entry, forged)
                    os.rename(stash / "aside", entry)

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        for i in range(6):
            run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / f"h{i + 1}", "--read-only", "--trust-policy",
                                             str(enforce), "--lock-timeout", "1s"))
            assert "Traceback" not in run.stderr and run.returncode != 1, run.stderr
            handed = _handed(tmp_path / f"h{i + 1}")
            assert handed in (None, model.read_bytes()), "a start handed over bytes nobody signed"
            assert (run.returncode == 0) == (handed is not None), run.stderr
    finally:
        stop.set()
        thread.join(10)


def test_an_engine_image_never_packs_a_file_a_link_swapped_into_the_entry_points_at(model: Path, cache: Path,
                                                                                 tmp_path: Path) -> None:
    """Window: between ``prebuild --oci-image``'s check of an entry on its cache (a shared volume in the prebuild
    Job) and the packing of the image layer. The layer was packed from the entry's paths: a link to a credential file
    (the Job's signing key, in the test a credentials file) swapped in for the engine was followed, and the file went
    into an image every node pulls. The layer is packed from the descriptors checked, the manifest as read."""
    import io
    import tarfile

    from registry import Registry, anonymous_env, registry_binary

    if registry_binary() is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    outside = victim(tmp_path / "victim")
    env = anonymous_env(tmp_path / "home")
    matrix = tmp_path / "matrix.json"
    (tmp_path / model.name).write_bytes(model.read_bytes())
    matrix.write_text(json.dumps({"models": [{"model": model.name, "shape": ["input=1x16:8x16:32x16"]}],
                                  "options": {"builder": "onnxruntime"}}))
    server = Registry(tmp_path / "registry").start()
    try:
        Layout(cache).ensure()
        trap = Trap(cache / "entries", "model.ort.onnx", OPEN, swap_symlink(outside / "credentials"), deep=True)
        with Adversary(trap):
            done = run_trtwarm("prebuild", "--matrix", str(matrix), "--cache-dir", str(cache), "--oci-image",
                               f"{server.addr}/engines/image:v1", env=env)
        assert trap.fired, "the attack did not happen"
        assert "Traceback" not in done.stderr and done.returncode != 1, done.stderr
        stored = [p.read_bytes() for p in server.data.rglob("data") if p.is_file()]
        assert not any(b"SENTINEL-SECRET" in blob for blob in stored), "a credential file went into the image"
        if done.returncode == 0:
            layer = max(stored, key=len)
            with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
                packed = {m.name.rsplit("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
            assert b"SENTINEL-SECRET" not in packed["model.ort.onnx"] and packed["manifest.json"]
    finally:
        server.stop()
