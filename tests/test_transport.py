"""The transport contract on real sockets (tests/hostile.py serving scripted answers on loopback): every bound,
cap, retry rule, credential rule and stop of :mod:`trtwarm.transport`, one behaviour per test. The same rules
against the real registry and SeaweedFS, through real ``trtwarm`` processes: tests/test_hostile_*.py."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
from hostile import Elsewhere, Hostile, Reply, answer, hold, send
from hypothesis import given
from hypothesis import strategies as st

from trtwarm.errors import RemoteError, RemoteUnreachable, Terminated
from trtwarm.transport import breaker, stop
from trtwarm.transport.answer import Refused
from trtwarm.transport.listing import KeyOrder, TokenChains
from trtwarm.transport.listing import check_page as _check_page
from trtwarm.transport.http import HttpClient
from trtwarm.transport.limits import RATE_WINDOW, Limits
from trtwarm.transport.origin import origin_of
from trtwarm.transport.retry import Budget, may_retry, retry_after

FAST = Limits(connect_timeout=1, read_timeout=1, retry_timeout=2, retries=4)


@pytest.fixture(autouse=True)
def fresh() -> Any:
    breaker.reset()
    stop.reset()
    yield
    breaker.reset()
    stop.reset()


@pytest.fixture
def server() -> Any:
    proxy = Hostile()
    yield proxy
    proxy.close()


def trickled(head_rate: float = 0.0, body_rate: float = 0.0, body: bytes = b"x" * 100) -> Any:
    def behave(proxy: Hostile, request: Any, conn: Any) -> None:
        send(conn, Reply(200, [], body), head_rate=head_rate, body_rate=body_rate)
    return behave


def timed(fn: Any) -> tuple[Any, float]:
    start = time.monotonic()
    try:
        return fn(), time.monotonic() - start
    except Exception as exc:  # noqa: BLE001 (the test looks at what it was)
        return exc, time.monotonic() - start


def test_headers_at_one_byte_per_second_fail_within_the_read_timeout(server: Hostile) -> None:
    server.on(lambda r: True, trickled(head_rate=1.0))
    error, took = timed(lambda: HttpClient(FAST).request("GET", f"{server.endpoint}/v2/"))
    assert isinstance(error, RemoteUnreachable) and "no complete answer within 1 s" in error.message, error
    assert took < 1 + 2 + 2, took  # one attempt, a retry that starts inside the 2 s window, no more
    assert breaker.is_down(str(origin_of(server.endpoint)))


def test_a_body_at_one_byte_per_second_fails_on_the_rate_floor_and_the_next_request_pays_nothing(
        server: Hostile) -> None:
    server.on(lambda r: True, trickled(body_rate=5.0, body=b"x" * 1000))  # far under the floor, never idle for 1 s
    client = HttpClient(FAST)
    answer_ = client.request("GET", f"{server.endpoint}/blob")
    error, took = timed(lambda: answer_.read(10_000, "the blob"))
    assert isinstance(error, RemoteUnreachable) and "slower than the 32 KiB/s minimum" in error.message, error
    assert RATE_WINDOW - 0.5 < took < RATE_WINDOW + 3, took
    again, took = timed(lambda: client.request("GET", f"{server.endpoint}/other"))
    assert isinstance(again, RemoteUnreachable) and "skipped for the rest of this process" in again.message
    assert took < 0.5


def test_a_black_hole_costs_one_budget(server: Hostile) -> None:
    server.on(lambda r: True, hold)
    error, took = timed(lambda: HttpClient(FAST).request("GET", f"{server.endpoint}/v2/"))
    assert isinstance(error, RemoteUnreachable), error
    assert took < FAST.budget + 1.5, took
    assert 2 <= len(server.seen) <= 3  # retried inside the window only


def test_retry_after_beyond_the_budget_ends_the_request_at_once_and_a_short_one_is_honoured(server: Hostile) -> None:
    server.on(lambda r: r.path == "/long", answer(503, b"busy", [("Retry-After", "3600")]))
    error, took = timed(lambda: HttpClient(FAST).request("GET", f"{server.endpoint}/long"))
    assert isinstance(error, RemoteError) and "retry after 3600 s" in error.message and took < 1, (error, took)
    calls = []
    server.on(lambda r: r.path == "/short" and not calls.append(1) and len(calls) == 1,
              answer(429, b"", [("Retry-After", "1")]))
    server.on(lambda r: r.path == "/short", answer(200, b"ok"))
    got, took = timed(lambda: HttpClient(FAST).request("GET", f"{server.endpoint}/short").read(10, "x"))
    assert got == b"ok" and 1 <= took < 2, (got, took)


@pytest.mark.parametrize("method, status, tries", [("POST", 503, 1), ("PATCH", 500, 1), ("POST", 429, 3),
                                                    ("GET", 503, 3), ("PUT", 502, 3), ("GET", 404, 1)])
def test_only_idempotent_requests_are_retried_blindly(server: Hostile, method: str, status: int,
                                                      tries: int) -> None:
    server.on(lambda r: True, answer(status, b"no"))
    limits = Limits(read_timeout=1, retry_timeout=5, retries=2)
    got = HttpClient(limits).request(method, f"{server.endpoint}/x", body=b"data")
    assert got.status == status and len(server.seen) == tries, [r.method for r in server.seen]


def test_a_post_that_got_no_answer_is_not_sent_again(server: Hostile) -> None:
    server.on(lambda r: True, hold)
    error, _took = timed(lambda: HttpClient(FAST).request("POST", f"{server.endpoint}/blobs/uploads/"))
    assert isinstance(error, RemoteUnreachable) and len(server.seen) == 1


class _Auth:
    def __init__(self, origin: Any) -> None:
        self.origin = origin
        self.challenges = 0

    def header(self) -> str:
        return "Bearer registry-token-1234"

    def challenge(self, answer_: Any) -> bool:
        self.challenges += 1
        return True


def test_credentials_never_follow_a_redirect_to_another_origin(server: Hostile) -> None:
    other = Elsewhere(status=200)
    try:
        server.on(lambda r: True, answer(307, b"", [("Location", f"http://{other.addr}/storage/blob")]))
        auth = _Auth(origin_of(server.endpoint))
        got = HttpClient(FAST).request("GET", f"{server.endpoint}/v2/x/blobs/sha256:ab", auth=auth,
                                       headers={"Authorization": "Basic c2VjcmV0", "Cookie": "session=1"})
        assert got.status == 200 and len(other.requests) == 1
        assert other.authorizations == [] and "cookie" not in other.requests[0]
        assert server.seen[0].headers["authorization"] == "Bearer registry-token-1234"
    finally:
        other.close()


def test_a_401_from_another_origin_is_not_answered_with_this_origins_credentials(server: Hostile) -> None:
    other = Elsewhere(status=401)
    try:
        server.on(lambda r: True, answer(302, b"", [("Location", f"http://{other.addr}/x")]))
        auth = _Auth(origin_of(server.endpoint))
        got = HttpClient(FAST).request("GET", f"{server.endpoint}/x", auth=auth)
        assert got.status == 401 and auth.challenges == 0 and other.authorizations == []
    finally:
        other.close()


def test_redirect_loops_and_chains_are_refused(server: Hostile) -> None:
    server.on(lambda r: r.path == "/a", answer(302, b"", [("Location", "/b")]))
    server.on(lambda r: r.path == "/b", answer(302, b"", [("Location", "/a")]))
    server.on(lambda r: r.path.startswith("/n"), lambda p, r, c: answer(302, b"", [
        ("Location", f"/n{int(r.path[2:] or 0) + 1}")])(p, r, c))
    with pytest.raises(Refused, match="loop back"):
        HttpClient(FAST).request("GET", f"{server.endpoint}/a")
    with pytest.raises(Refused, match="more than 5 redirects"):
        HttpClient(FAST).request("GET", f"{server.endpoint}/n0")


@pytest.mark.parametrize("location", ["/v2/a b", "/v2/a\x7fb", "ftp://elsewhere/x", "http://[::1"])
def test_a_redirect_to_a_url_no_request_can_carry_is_refused(server: Hostile, location: str) -> None:
    def redirect(proxy: Hostile, request: Any, conn: Any) -> None:
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: " + location.encode() + b"\r\nContent-Length: 0\r\n\r\n")
    server.on(lambda r: True, redirect)
    error, took = timed(lambda: HttpClient(FAST).request("GET", f"{server.endpoint}/x"))
    assert isinstance(error, (Refused, RemoteError)) and took < 1, error
    assert len(server.seen) == 1


@pytest.mark.parametrize("body, words", [(b"x" * 5000, "larger than 4096 bytes"),
                                         (b'{"a": 1, "a": 2}', "given twice"),
                                         (b"[" * 100_000 + b"]" * 100_000, "larger than|nested deeper"),
                                         (b"[" * 1000 + b"]" * 1000, "nested deeper"),
                                         (b'{"a": NaN}', "not a JSON number")])
def test_every_body_is_read_under_a_cap_and_parsed_strictly(server: Hostile, body: bytes, words: str) -> None:
    server.on(lambda r: True, answer(200, body))
    with pytest.raises(Refused, match=words):
        HttpClient(FAST).request("GET", f"{server.endpoint}/tags/list").json(4096, "tags/list")


def test_a_body_cut_before_its_content_length_is_not_taken_for_whole(server: Hostile) -> None:
    def cut(proxy: Hostile, request: Any, conn: Any) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        conn.shutdown(socket.SHUT_RDWR)
    server.on(lambda r: True, cut)
    with pytest.raises(RemoteUnreachable, match="broke off"):
        HttpClient(FAST).request("GET", f"{server.endpoint}/m").read(1000, "the manifest")


def test_a_stop_ends_a_read_blocked_in_another_thread_within_a_tick(server: Hostile) -> None:
    server.on(lambda r: True, trickled(body_rate=1.0, body=b"x" * 100))
    outcome: list[Any] = []
    slow = Limits(read_timeout=60, retry_timeout=60, min_rate=1)

    def pull() -> None:
        try:
            HttpClient(slow).request("GET", f"{server.endpoint}/blob").read(1000, "blob")
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    worker = threading.Thread(target=pull)
    worker.start()
    time.sleep(1.5)
    asked = time.monotonic()
    stop.request()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - asked < 1.0
    assert isinstance(outcome[0], Terminated), outcome


def test_a_retry_pause_ends_on_a_stop(server: Hostile) -> None:
    server.on(lambda r: True, answer(503, b"", [("Retry-After", "30")]))
    limits = Limits(retry_timeout=60, retries=3)
    threading.Timer(0.5, stop.request).start()
    error, took = timed(lambda: HttpClient(limits).request("GET", f"{server.endpoint}/x"))
    assert isinstance(error, Terminated) and took < 1.5, (error, took)


def test_the_retry_rules() -> None:
    assert may_retry("GET", status=None, sent=True) and may_retry("PUT", status=503, sent=True)
    assert not may_retry("POST", status=None, sent=True) and may_retry("POST", status=None, sent=False)
    assert not may_retry("PATCH", status=503, sent=True) and may_retry("PATCH", status=429, sent=True)
    budget = Budget(Limits(retry_timeout=1, retries=10))
    assert budget.pause() == pytest.approx(0.2) and budget.pause(5.0) is None  # past the window
    assert Budget(Limits(retries=0)).pause() is None
    assert Budget(Limits(retry_timeout=100).capped(0.5)).pause(1.0) is None  # the ceiling wins
    assert retry_after("3600") == 3600 and retry_after("soon") is None and retry_after(None) is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


@given(st.text(max_size=80))
def test_any_retry_after_value_is_a_number_of_seconds_or_none(value: str) -> None:
    got = retry_after(value)
    assert got is None or got >= 0


@given(st.binary(max_size=4000), st.sampled_from(["", "continuation-token=abc", "continuation-token=a%26b"]))
def test_any_listing_page_is_accepted_or_refused_never_a_crash(data: bytes, query: str) -> None:
    try:
        _check_page(f"http://s3/b?list-type=2&{query}", data, "LIST")
    except Refused:
        pass


def test_a_page_that_names_itself_or_holds_too_many_keys_is_refused() -> None:
    with pytest.raises(Refused, match="names the page it answers"):
        _check_page("http://s3/b?list-type=2&continuation-token=t%26", b"<NextContinuationToken>t&amp;"
                    b"</NextContinuationToken>", "LIST")
    with pytest.raises(Refused, match="1001 keys"):
        _check_page("http://s3/b?list-type=2", b"<Key>k</Key>" * 1001, "LIST")
    _check_page("http://s3/b?list-type=2&continuation-token=t1", b"<Key>k</Key>" * 1000 +
                b"<NextContinuationToken>t2</NextContinuationToken>", "LIST")


def _page(token: str) -> bytes:
    return f"<Key>k</Key><NextContinuationToken>{token}</NextContinuationToken>".encode()


def test_continuation_tokens_that_cycle_are_refused_and_listings_side_by_side_are_not() -> None:
    chains = TokenChains()
    for _ in range(2):  # two listings of one prefix ask the same tokens: no loop
        chains.see("http://s3/b?list-type=2&prefix=p", _page("a"), "LIST")
        chains.see("http://s3/b?list-type=2&prefix=p&continuation-token=a", _page("b"), "LIST")
    with pytest.raises(Refused, match="lead back"):
        chains.see("http://s3/b?list-type=2&prefix=p&continuation-token=b", _page("a"), "LIST")
    chains.see("http://s3/b?list-type=2&prefix=other&continuation-token=b", _page("a"), "LIST")  # another prefix


def test_keys_must_move_forward() -> None:
    order = KeyOrder("LIST s3://b/p")
    for key in ("refs/a.json", "refs/b.json", "refs/é.json"):
        order.see(key)
    with pytest.raises(Refused, match="a page sent again"):
        order.see("refs/a.json")
