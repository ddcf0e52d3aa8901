"""A hostile HTTP proxy for the bad-day tests: in front of a real server (Debian's ``docker-registry``, a real
SeaweedFS), it forwards each request untouched (a signed S3 request stays valid: the ``Host`` header and every byte
are kept) and misbehaves one way per rule, only on the answers and their timing: a black hole, 1 byte/s headers or
body, endless and huge bodies on success and error, a ``Location``/``Link``/redirect to another origin (a second
listener, :class:`Elsewhere`, records what reaches it), a ``Link`` to itself, ``Retry-After: 3600``, nested or
duplicated-key JSON, 201 and nothing stored, a HEAD and a GET that disagree.

Rules are ``(predicate, behaviour)`` pairs tried in order; the first whose predicate matches the request serves it
(``forward`` when none does). A behaviour gets the proxy, the request and the client socket, and writes the answer.
Every request is recorded (:attr:`Hostile.seen`). Threads only, stopped by :meth:`Hostile.close`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from s3server import close_both


@dataclass
class Request:
    """One request as the proxy received it (``head``: its bytes up to the blank line, as received)."""

    method: str
    target: str
    headers: dict[str, str]
    head: bytes
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""


@dataclass
class Reply:
    """An answer: status, headers (in order) and body."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    reason: str = ""

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def without(self, *names: str) -> list[tuple[str, str]]:
        low = {n.lower() for n in names}
        return [(k, v) for k, v in self.headers if k.lower() not in low]


Behaviour = Callable[["Hostile", Request, socket.socket], None]
Predicate = Callable[[Request], bool]


def _read_request(reader: Any) -> Request | None:
    head = b""
    while True:
        line = reader.readline(65537)
        if not line:
            return None
        head += line
        if line in (b"\r\n", b"\n"):
            break
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = b""
    if "chunked" in headers.get("transfer-encoding", ""):
        raise ValueError("chunked request bodies are not used by the clients under test")
    if headers.get("content-length", "0").isdigit() and int(headers.get("content-length", "0")):
        body = reader.read(int(headers["content-length"]))
    return Request(method, target, headers, head, body)


class Hostile:
    """The proxy; :attr:`endpoint` is what the client is pointed at."""

    def __init__(self, upstream: tuple[str, int] | None = None) -> None:
        self.upstream = upstream
        self.rules: list[tuple[Predicate, Behaviour]] = []
        self.seen: list[Request] = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.addr}"

    def on(self, predicate: Predicate, behaviour: Behaviour) -> Hostile:
        """Serve requests matching *predicate* with *behaviour* (rules added first win)."""
        self.rules.append((predicate, behaviour))
        return self

    def reset(self) -> None:
        self.rules.clear()
        self.seen.clear()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        try:
            while not self._closed.is_set():
                request = _read_request(reader)
                if request is None:
                    return
                self.seen.append(request)
                behaviour = next((b for p, b in self.rules if p(request)), forward)
                behaviour(self, request, conn)
                if request.headers.get("connection", "").lower() == "close":
                    return
        except (OSError, ValueError, http.client.HTTPException):
            return
        finally:
            with contextlib.suppress(OSError):
                reader.close()
            close_both(conn)

    def fetch(self, request: Request) -> Reply:
        """*request* sent to the upstream server as received (one connection), its whole answer."""
        assert self.upstream is not None
        up = socket.create_connection(self.upstream, timeout=60)
        try:
            head = request.head
            if b"connection:" not in head.lower():
                head = head[:-2] + b"Connection: close\r\n\r\n"
            up.sendall(head + request.body)
            response = http.client.HTTPResponse(up, method=request.method)
            response.begin()
            body = response.read() if request.method != "HEAD" else b""
            headers = [(k, v) for k, v in response.getheaders() if k.lower() not in ("transfer-encoding",
                                                                                     "connection")]
            return Reply(response.status, headers, body, response.reason)
        finally:
            up.close()

    def close(self) -> None:
        self._closed.set()
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# --- writing answers ------------------------------------------------------------------------------------------------
def head_bytes(reply: Reply, length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {reply.status} {reply.reason or http.client.responses.get(reply.status, 'X')}"]
    lines += [f"{k}: {v}" for k, v in reply.headers if k.lower() != "content-length" or length is None]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def send(conn: socket.socket, reply: Reply, *, head_rate: float = 0.0, body_rate: float = 0.0,
         method: str = "GET") -> None:
    """Write *reply* (Content-Length from its body; a HEAD's kept as the upstream said), optionally trickled."""
    length = None if method == "HEAD" else len(reply.body)
    _trickle(conn, head_bytes(reply, length), head_rate)
    if method != "HEAD":
        _trickle(conn, reply.body, body_rate)


def _trickle(conn: socket.socket, data: bytes, rate: float) -> None:
    if not rate:
        conn.sendall(data)
        return
    for i in range(len(data)):
        conn.sendall(data[i:i + 1])
        time.sleep(1 / rate)


def forward(proxy: Hostile, request: Request, conn: socket.socket) -> None:
    """The upstream's answer, unchanged."""
    send(conn, proxy.fetch(request), method=request.method)


def hold(proxy: Hostile, request: Request, conn: socket.socket) -> None:
    """A black hole: the request is read, nothing ever answers (until the proxy closes)."""
    proxy._closed.wait()


def trickle_head(proxy: Hostile, request: Request, conn: socket.socket) -> None:
    """The upstream's answer, its status line and headers at 1 byte/s."""
    send(conn, proxy.fetch(request), head_rate=1.0, method=request.method)


def trickle_body(proxy: Hostile, request: Request, conn: socket.socket) -> None:
    """The upstream's answer, its headers at once and its body at 1 byte/s."""
    send(conn, proxy.fetch(request), body_rate=1.0, method=request.method)


def endless(status: int, content_type: str = "application/json") -> Behaviour:
    """An answer of *status* whose chunked body never ends (64 KiB chunks as fast as the client takes them)."""
    def behave(proxy: Hostile, request: Request, conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 {status} {http.client.responses.get(status, 'X')}\r\nContent-Type: {content_type}"
                     "\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n%s\r\n" % (65536, b'{"errors": [' + b" " * (65536 - 13) + b"x")
        while not proxy._closed.is_set():
            conn.sendall(chunk)
    return behave


def huge(status: int, size: int = 200 << 20, content_type: str = "application/json") -> Behaviour:
    """An answer of *status* with a *size*-byte body (a Content-Length, all of it sent)."""
    def behave(proxy: Hostile, request: Request, conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 {status} {http.client.responses.get(status, 'X')}\r\nContent-Type: {content_type}"
                     f"\r\nContent-Length: {size}\r\n\r\n".encode())
        block = b" " * (1 << 20)
        for _ in range(size >> 20):
            conn.sendall(block)
    return behave


def answer(status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None) -> Behaviour:
    """A fixed answer (the upstream never sees the request): ``201`` and nothing stored, a 503 loop..."""
    def behave(proxy: Hostile, request: Request, conn: socket.socket) -> None:
        send(conn, Reply(status, list(headers or []), body), method=request.method)
    return behave


def rewrite(change: Callable[[Request, Reply], Reply]) -> Behaviour:
    """The upstream's answer, changed by *change* (a header replaced, the body altered)."""
    def behave(proxy: Hostile, request: Request, conn: socket.socket) -> None:
        send(conn, change(request, proxy.fetch(request)), method=request.method)
    return behave


def nested(depth: int = 100_000) -> bytes:
    return b"[" * depth + b"]" * depth


def duplicated(doc_text: str) -> bytes:
    """A JSON object whose first key is given twice (the second value first, so last-wins would read the first)."""
    doc = json.loads(doc_text)
    first = next(iter(doc))
    rest = json.dumps(doc)[1:]
    return f'{{"{first}": "shadow", {rest}'.encode()


class Elsewhere:
    """Another origin (a second listener): records every request's headers and answers with *status*."""

    def __init__(self, status: int = 401) -> None:
        self.status = status
        self.requests: list[dict[str, str]] = []
        self.proxy = Hostile().on(lambda r: True, self._record)

    @property
    def addr(self) -> str:
        return self.proxy.addr

    def _record(self, proxy: Hostile, request: Request, conn: socket.socket) -> None:
        self.requests.append({"method": request.method, "target": request.target, **request.headers})
        send(conn, Reply(self.status, [("Content-Type", "application/json")], b'{"errors": []}'),
             method=request.method)

    @property
    def authorizations(self) -> list[str]:
        return [r["authorization"] for r in self.requests if "authorization" in r]

    def close(self) -> None:
        self.proxy.close()


# --- running a real trtwarm under a hostile peer ----------------------------------------------------------------------
@dataclass
class Measured:
    """A finished ``trtwarm`` process: its exit code, wall time, peak memory (its own ``VmHWM``, polled), output."""

    returncode: int
    seconds: float
    peak_mb: float
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads(self.stdout.strip().splitlines()[-1])


def _vm_hwm_kib(pid: int) -> int:
    """The peak resident memory of the running process *pid* (``VmHWM``, KiB; 0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run_measured(args: list[str], env: dict[str, str], timeout: float = 180.0,
                 signal_when: Callable[[], bool] | None = None, signum: int = 15) -> tuple[Measured, float | None]:
    """Run ``trtwarm ARGS``; with *signal_when*, send *signum* once it is true. :return: the run, and the seconds
    from the signal to the exit (None without one). The peak memory is the child's own (``wait4``)."""
    import os
    import signal as signals
    import subprocess
    import tempfile

    from conftest import env_for, trtwarm_argv

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(trtwarm_argv(*args), stdout=out, stderr=err, env=env_for(env),
                                start_new_session=True)
        signalled: float | None = None
        peak_kib = 0
        while True:
            peak_kib = max(peak_kib, _vm_hwm_kib(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if signalled is None and signal_when is not None and signal_when():
                os.kill(proc.pid, signum)
                signalled = time.monotonic()
            if now - start > timeout:
                os.killpg(proc.pid, signals.SIGKILL)
            time.sleep(0.02)
        ended = time.monotonic()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        # the child's own high-water mark: wait4's ru_maxrss also counts the test process's memory where the child
        # was vfork()ed from it before its exec (Linux charges the old mm's high-water mark at exec)
        run = Measured(proc.returncode, ended - start, (peak_kib or usage.ru_maxrss) / 1024,
                       out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    return run, (ended - signalled if signalled is not None else None)


# --- what every bad-day case shares ----------------------------------------------------------------------------------
#: the engine the cases pull and push (bytes): long enough that a trickle or a cut lands inside its body
ENGINE = 3 << 20
#: waits faster than the defaults, so a case costs seconds; the default budget is measured by its own case
FAST = {"TRTWARM_REMOTE_READ_TIMEOUT": "2s", "TRTWARM_REMOTE_RETRY_TIMEOUT": "3s",
        "TRTWARM_REMOTE_CONNECT_TIMEOUT": "2s"}
#: the most memory (MB) a process may reach on any bad day
PEAK_MB = 300


def build_args(model: Any, cache: Any, handoff: Any, url: str, *extra: str) -> list[str]:
    """A builder init of an ``ENGINE``-byte engine (the same bytes every time: the same key, the same blob)."""
    from conftest import cmd_init_args

    args = cmd_init_args(model, cache, handoff, "--remote", url, *extra)
    args[args.index("--build-command") + 1] = f"sh -c 'head -c {ENGINE} /dev/zero > {{output}}'"
    return args


def nothing_handed_over(tmp_path: Any) -> None:
    """No entry in ``tmp_path/c``, no staging debris, no hand-off in ``tmp_path/h`` that says ready, no engine link."""
    from conftest import debris, entries

    assert entries(tmp_path / "c") == [] and debris(tmp_path / "c") == []
    report = tmp_path / "h" / "engine.json"
    assert not report.exists() or json.loads(report.read_text()).get("ready") is False
    assert not (tmp_path / "h" / "engine").exists()


def failed_within(run: Measured, tmp_path: Any, code: int, words: str, bound: float) -> None:
    """A pull-only init that met a bad peer: exit *code* with *words* (a regex) in its log, within *bound* seconds
    and :data:`PEAK_MB`, no traceback, nothing handed over."""
    import re

    assert run.returncode == code, run.stderr[-3000:]
    assert re.search(words, run.stderr), run.stderr[-3000:]
    assert run.seconds <= bound, (run.seconds, run.stderr[-2000:])
    assert run.peak_mb < PEAK_MB, run.peak_mb
    assert "Traceback" not in run.stderr
    nothing_handed_over(tmp_path)


def flip(request: Request, reply: Reply) -> Reply:
    """The answer with one byte of its body changed (same length): a GET that disagrees with its HEAD."""
    body = bytearray(reply.body)
    if body:
        body[len(body) // 2] ^= 0xFF
    return Reply(reply.status, reply.headers, bytes(body), reply.reason)


def after_seen(proxy: Hostile, predicate: Predicate, wait: float) -> Callable[[], bool]:
    """True once *proxy* has seen a request matching *predicate* and *wait* more seconds passed (when to signal)."""
    seen: list[float] = []

    def ready() -> bool:
        if not seen and any(predicate(r) for r in list(proxy.seen)):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] > wait
    return ready


class TlsRelay:
    """A TLS front on 127.0.0.1 for a plain server (a store that speaks https): its own CA, written to *cafile*
    (point ``SSL_CERT_FILE`` at it), a certificate for 127.0.0.1, bytes relayed both ways untouched."""

    def __init__(self, upstream: tuple[str, int], cafile: Any) -> None:
        import datetime
        import ipaddress
        import ssl
        import tempfile

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trtwarm test store")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(2).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        pem = cert.public_bytes(serialization.Encoding.PEM)
        cafile.write_bytes(pem)
        with tempfile.NamedTemporaryFile(suffix=".pem", delete=False) as both:
            both.write(pem + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(both.name)
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except OSError:
            conn.close()
            return
        self.accepted += 1
        up = socket.create_connection(self.upstream, timeout=60)
        threading.Thread(target=_copy, args=(up, tls), daemon=True).start()
        _copy(tls, up)

    def close(self) -> None:
        self.listener.close()


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        close_both(src, dst)


__all__ = ["ENGINE", "FAST", "PEAK_MB", "Elsewhere", "Hostile", "Measured", "Reply", "Request", "after_seen", "answer",
           "build_args", "duplicated", "endless", "failed_within", "flip", "forward", "hold", "huge", "nested",
           "nothing_handed_over", "rewrite", "run_measured", "send", "trickle_body", "trickle_head", "TlsRelay"]
