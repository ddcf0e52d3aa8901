"""How many CPUs a process may use (trtwarm.fs.cpus): its affinity mask capped by its cgroup's CPU quota, read from
real cgroup files where this machine lets a test make a cgroup (we are root), and from fixture text otherwise; the
parsers never raise on any text."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_chunked import CHECK_IN_CHILD

from trtwarm.fs.cpus import cgroup_dirs, quota_cpus, quota_limit

ROOT = Path(__file__).resolve().parent.parent

V2_MOUNTINFO = ("24 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
                "rw,nsdelegate,memory_recursiveprot\n")
V1_MOUNTINFO = ("25 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:10 - cgroup cgroup rw,cpu,cpuacct\n"
                "26 24 0:24 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory\n")


def test_quota_text_of_both_versions() -> None:
    assert quota_cpus("cgroup2", ("max 100000\n",)) is None
    assert quota_cpus("cgroup2", ("200000 100000\n",)) == 2.0
    assert quota_cpus("cgroup2", ("150000 100000",)) == 1.5
    assert quota_cpus("cgroup", ("-1\n", "100000\n")) is None
    assert quota_cpus("cgroup", ("50000\n", "100000\n")) == 0.5
    for bad in (("",), ("max",), ("1 2 3",), ("x 100000",), ("100000 0",), ("0 100000",)):
        assert quota_cpus("cgroup2", bad) is None, bad


def test_the_cgroup_directories_from_own_cgroup_up_to_the_mount() -> None:
    k8s = "/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope"
    assert cgroup_dirs(f"0::{k8s}\n", V2_MOUNTINFO) == [
        ("cgroup2", "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope"),
        ("cgroup2", "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice"),
        ("cgroup2", "/sys/fs/cgroup/kubepods.slice"), ("cgroup2", "/sys/fs/cgroup")]
    # a container with its own cgroup namespace sees itself at the root: only the mount's files
    assert cgroup_dirs("0::/\n", V2_MOUNTINFO) == [("cgroup2", "/sys/fs/cgroup")]
    # cgroup v1, cpu comounted with cpuacct; the memory hierarchy is not the cpu one
    v1 = "5:memory:/pod1/c1\n4:cpu,cpuacct:/pod1/c1\n"
    assert cgroup_dirs(v1, V1_MOUNTINFO) == [("cgroup", "/sys/fs/cgroup/cpu,cpuacct/pod1/c1"),
                                             ("cgroup", "/sys/fs/cgroup/cpu,cpuacct/pod1"),
                                             ("cgroup", "/sys/fs/cgroup/cpu,cpuacct")]
    # the container's own cgroup bind-mounted (Docker without a cgroup namespace): the mount's root is the cgroup
    bound = "25 24 0:23 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    assert cgroup_dirs("4:cpu:/docker/abc\n", bound) == [("cgroup", "/sys/fs/cgroup/cpu")]


def test_the_tightest_quota_on_the_way_up_wins(tmp_path: Path) -> None:
    """Real files in a tree laid out as a cgroup2 mount: the parent's 1.5 CPUs bind a child without a limit."""
    child = tmp_path / "pod" / "container"
    child.mkdir(parents=True)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "pod" / "cpu.max").write_text("150000 100000\n")
    (child / "cpu.max").write_text("max 100000\n")
    mountinfo = f"24 30 0:22 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    assert quota_limit("0::/pod/container\n", mountinfo) == 1.5
    (child / "cpu.max").write_text("50000 100000\n")
    assert quota_limit("0::/pod/container\n", mountinfo) == 0.5
    (child / "cpu.max").unlink()  # unreadable or missing: no limit from that level
    assert quota_limit("0::/pod/container\n", mountinfo) == 1.5
    assert quota_limit("0::/elsewhere\n", mountinfo) is None


def _cpu_cgroup() -> tuple[str, Path] | None:
    """A cgroup this test may make under its own, with a CPU quota file: ``(version, directory)``, or None."""
    for version, base in cgroup_dirs(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()):
        probe = Path(base) / f"trtwarm-test-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
        except OSError:
            continue
        quota = probe / ("cpu.max" if version == "cgroup2" else "cpu.cfs_quota_us")
        if quota.exists():
            return version, probe
        probe.rmdir()
    return None


def _limit(version: str, directory: Path, cpus: float | None) -> None:
    if version == "cgroup2":
        (directory / "cpu.max").write_text("max 100000" if cpus is None else f"{int(cpus * 100000)} 100000")
    else:
        (directory / "cpu.cfs_quota_us").write_text("-1" if cpus is None else str(int(cpus * 100000)))


def _in_cgroup(directory: Path, code: str, *args: str) -> list[str]:
    """Run *code* in a Python process that moved itself into *directory* first: its output's words."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    mover = f"import sys; open({str(directory / 'cgroup.procs')!r}, 'w').write('0'); exec(sys.argv.pop(1))"
    return subprocess.run([sys.executable, "-c", mover, code, *args], env=env, capture_output=True, text=True,
                          check=True, timeout=120).stdout.split()


def test_a_real_cgroup_quota_caps_the_workers_and_the_threads_a_check_starts(tmp_path: Path) -> None:
    """A process in a real cgroup limited to one CPU, on a machine with more: one worker, no thread beside the
    caller's for a check of 32 chunks; in a child cgroup without a limit of its own, the parent's still binds."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: a quota of one changes nothing to see")
    made = _cpu_cgroup()
    if made is None:
        pytest.skip("no cgroup with a CPU quota file can be made here (no writable cpu controller)")
    version, parent = made
    child = parent / "inner"
    try:
        _limit(version, parent, 1.0)
        assert _in_cgroup(parent, "from trtwarm.fs.cpus import usable_cpus; print(usable_cpus())") == ["1"]
        assert _in_cgroup(parent, CHECK_IN_CHILD, str(tmp_path / "f")) == ["1", "0", "True"]
        if version == "cgroup2":
            (parent / "cgroup.subtree_control").write_text("+cpu")
        child.mkdir()
        assert _in_cgroup(child, "from trtwarm.fs.cpus import usable_cpus; print(usable_cpus())") == ["1"]
        _limit(version, parent, None)
        want = str(len(os.sched_getaffinity(0)))
        assert _in_cgroup(child, "from trtwarm.fs.cpus import usable_cpus; print(usable_cpus())") == [want]
    finally:
        for directory in (child, parent):
            if directory.exists():
                directory.rmdir()


_text = st.text(alphabet=st.sampled_from("0123456789 :/-\nmaxcgroup2,cpu.acct"), max_size=200) | st.text(max_size=200)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["cgroup", "cgroup2"]), st.lists(_text, max_size=3).map(tuple))
def test_fuzz_quota_text_never_raises(version: str, texts: tuple[str, ...]) -> None:
    got = quota_cpus(version, texts)
    assert got is None or got > 0


@settings(max_examples=500, deadline=None)
@given(_text, _text | st.sampled_from([V2_MOUNTINFO, V1_MOUNTINFO]))
def test_fuzz_cgroup_and_mountinfo_text_never_raises(proc_cgroup: str, mountinfo: str) -> None:
    for version, directory in cgroup_dirs(proc_cgroup, mountinfo):
        assert version in ("cgroup", "cgroup2") and isinstance(directory, str)
    got = quota_limit(proc_cgroup, mountinfo)
    assert got is None or got > 0
