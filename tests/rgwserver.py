"""A throwaway single-node Ceph RGW on 127.0.0.1 for the remote tests: the "older S3 store" (Ceph 16 in Debian 12:
``If-None-Match: *`` on PutObject works, on CompleteMultipartUpload it is ignored, ``If-Match`` only matches
unquoted ETags; ``../shared/reference/remote.md``).

:meth:`RgwServer.start` runs ``tests/ceph-rgw-single-node.sh`` (one monitor, one BlueStore OSD on a sparse file,
radosgw; no systemd, no manager; about 16 s), then creates the bucket with a SigV4-signed ``curl``. :meth:`stop`
ends each daemon by the pid it wrote, waits for it, and removes the directory. Needs root and
``apt-get install radosgw ceph-mon ceph-osd uuid-runtime curl`` (:func:`missing` says what is not there).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "ceph-rgw-single-node.sh"
KEY = ("testkey", "testsecret")  # the script's S3 user


def missing() -> str | None:
    """Why no RGW can start here, or None."""
    tools = [t for t in ("radosgw", "ceph-mon", "ceph-osd", "uuidgen", "curl") if shutil.which(t) is None]
    if tools:
        return f"{', '.join(tools)} not installed (apt-get install radosgw ceph-mon ceph-osd uuid-runtime curl)"
    if os.geteuid() != 0:
        return "a single-node Ceph needs root here"
    return None


@dataclass
class RgwServer:
    """One single-node Ceph with radosgw in *workdir*; ``endpoint`` and ``env`` as :class:`s3server.SeaweedServer`."""

    workdir: Path
    buckets: tuple[str, ...] = ("engines",)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, who: tuple[str, str] = KEY) -> dict[str, str]:
        """The AWS variables of the script's one user (*who* is accepted for the SeaweedServer interface only)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": KEY[0], "AWS_SECRET_ACCESS_KEY": KEY[1],
                "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def start(self) -> RgwServer:
        """Start the cluster and create the buckets. :raises RuntimeError: with the script's log tail"""
        log = self.workdir.parent / f"{self.workdir.name}.log"
        with open(log, "w") as handle:
            proc = subprocess.run(["bash", str(SCRIPT), str(self.workdir)], stdout=handle, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=300, check=False)
        port_file = self.workdir / "rgw.port"
        if proc.returncode != 0 or not port_file.exists():
            self.stop()
            raise RuntimeError(f"the single-node Ceph did not start: {log.read_text()[-2000:]}")
        self.port = int(port_file.read_text())
        try:
            for bucket in self.buckets:  # RGW refuses curl's signature without the x-amz-content-sha256 header
                subprocess.run(["curl", "-sSf", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3",
                                "--user", f"{KEY[0]}:{KEY[1]}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                                f"{self.endpoint}/{bucket}"], check=True, timeout=60, capture_output=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            self.stop()
            raise RuntimeError(f"cannot create the buckets on the single-node Ceph: {exc}") from None
        return self

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM every daemon by its pid file, SIGKILL what is left after *timeout*, then remove the directory."""
        pids = []
        for pid_file in (self.workdir / "run").glob("*.pid"):
            try:
                pid = int(pid_file.read_text())
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
            except (ValueError, ProcessLookupError):
                pass
        deadline = time.monotonic() + timeout
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
