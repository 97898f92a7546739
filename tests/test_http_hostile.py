"""The admission and metrics ports against an attacker on the cluster network: the real server
process, over real TLS verified as the API server verifies it (plain TCP for the metrics port).

Each test states its bound: time to close, memory growth, or another client's latency. Every
test also reads the server's log: a client's mistake is DEBUG or one WARNING line, never an
ERROR line or a traceback (`clean`, run after each test on every server it used).
"""

from __future__ import annotations

import json
import ssl
import time

import pytest

from tests.helpers import Server
from tests.rawhttp import (
    GET,
    HOST,
    chunked,
    connect,
    exchange,
    figure,
    post,
    read_until_closed,
    responses,
    review,
)


@pytest.mark.parametrize(
    "request_bytes",
    [
        # Content-Length beside Transfer-Encoding: how a second request hides in a first one's body.
        b"POST /validate HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 40\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + GET,
        b"POST /validate HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"POST /validate HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n0\r\n\r\n",
        b"POST /validate HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST /validate HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello",
        # obs-fold: a header continued on the next line (RFC 9112 §5.2: reject or replace).
        b"POST /validate HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n x-folded: 1\r\n"
        b"Content-Length: 2\r\n\r\n{}",
        b"GARBAGE\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: h\r\nBad Header: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\nHost: h\n\n",  # bare LF line endings
        b"GET /healthz HTTP/9.9\r\nHost: h\r\n\r\n",
    ],
    ids=[
        "cl-and-te",
        "two-content-lengths",
        "two-te",
        "te-not-chunked-last",
        "cl-plus-sign",
        "obs-fold",
        "not-http",
        "space-in-name",
        "bare-lf",
        "bad-version",
    ],
)
def test_smuggling_shapes_and_malformed_requests_are_400_and_closed(hostile: Server, request_bytes: bytes) -> None:
    """Bound: one 400 answer, nothing answered from behind it, closed within 2 s."""
    started = time.monotonic()
    raw, closed = exchange(hostile, request_bytes, wait=3.0)
    answers = responses(raw)
    assert [status for status, _h, _b in answers] == [400] and closed
    figure(f"malformed {request_bytes[:40]!r}: 400 and closed after", time.monotonic() - started)
    assert time.monotonic() - started < 2
    assert "malformed HTTP request" in json.loads(answers[0][2])["error"]


@pytest.mark.parametrize(
    "size", [b"zz", b"-1", b"1" * 30, b"5 5", b""], ids=["hex-garbage", "negative", "overflow", "two-numbers", "empty"]
)
def test_bad_chunk_sizes_are_400_and_closed(hostile: Server, size: bytes) -> None:
    """Bound: 400 and closed within 2 s, the review behind it never judged."""
    request = (
        b"POST /validate HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + size
        + b"\r\n{}\r\n0\r\n\r\n"
    )
    started = time.monotonic()
    raw, closed = exchange(hostile, request, wait=3.0)
    assert [status for status, _h, _b in responses(raw)] == [400] and closed
    figure(f"bad chunk size {size!r}: 400 and closed after", time.monotonic() - started)
    assert time.monotonic() - started < 2


def test_oversized_header_line_is_431_and_too_many_headers_400(hostile: Server) -> None:
    """Bound: refused from the headers alone (200 KB of one header, 500 headers), closed within 2 s."""
    raw, closed = exchange(hostile, b"GET /healthz HTTP/1.1\r\nHost: h\r\nX-Filler: " + b"a" * 200_000 + b"\r\n\r\n")
    assert responses(raw)[0][0] == 431 and closed
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(500))
    raw, closed = exchange(hostile, b"GET /healthz HTTP/1.1\r\nHost: h\r\n" + many + b"\r\n")
    assert responses(raw)[0][0] in (400, 431) and closed


def test_pipelined_requests_are_answered_in_order(hostile: Server) -> None:
    """Ten reviews in one write, allowed and denied mixed: ten answers, in order, uid for uid."""
    bodies = [review(gpu="1", hostNetwork=False) if i % 2 else review(gpu="1.5") for i in range(10)]
    raw, closed = exchange(hostile, b"".join(post(b) for b in bodies), wait=1.5)
    answers = responses(raw)
    assert len(answers) == 10 and not closed
    uids = [json.loads(body)["response"]["uid"] for _s, _h, body in answers]
    assert uids == [json.loads(b)["request"]["uid"] for b in bodies]
    assert [json.loads(body)["response"]["allowed"] for _s, _h, body in answers] == [i % 2 == 1 for i in range(10)]


def test_declared_length_past_the_limit_is_413_before_the_body(hostile: Server) -> None:
    """Bound: the answer before any body byte is sent; closed within the 1 s linger (+1 s)."""
    s = connect(hostile)
    try:
        s.sendall(post(b"", length=10_000_000))
        started = time.monotonic()
        raw, closed = read_until_closed(s, 4.0)
        [(status, headers, body)] = responses(raw)
        assert status == 413 and headers["connection"] == "close" and closed
        assert "10000000 bytes declared" in json.loads(body)["error"]
        figure("declared 10 MB body: 413 and closed after", time.monotonic() - started)
        assert time.monotonic() - started < 2.5
    finally:
        s.close()


def test_chunked_body_past_the_limit_is_413_as_it_crosses(hostile: Server) -> None:
    """Bound: 413 once 64 KiB have arrived, though the client goes on sending (2 MiB offered)."""
    s = connect(hostile)
    try:
        s.sendall(
            b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"2000\r\n" + b" " * 8192 + b"\r\n"
        got = b""
        s.settimeout(0.05)
        for _ in range(256):
            try:
                s.sendall(chunk)
            except OSError:
                break  # the server has closed: it must have answered first
            try:
                got += s.recv(65536)
            except (TimeoutError, ssl.SSLWantReadError):
                continue
            except OSError:
                break
            if b"\r\n\r\n" in got:
                break
        raw, _closed = read_until_closed(s, 3.0)
        [(status, headers, body)] = responses(got + raw)
        assert status == 413 and headers["connection"] == "close"
        assert "65536 byte limit" in json.loads(body)["error"]
    finally:
        s.close()


def test_http_1_0_gets_no_keep_alive_unless_asked(hostile: Server) -> None:
    """Bound: closed at once after the answer (HTTP/1.0 default), kept when asked."""
    raw, closed = exchange(hostile, b"GET /healthz HTTP/1.0\r\n\r\n", wait=2.0)
    assert responses(raw)[0][0] == 200 and closed
    raw, closed = exchange(hostile, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", wait=0.5)
    [(status, headers, _b)] = responses(raw)
    assert status == 200 and headers.get("connection", "").lower() == "keep-alive" and not closed


def test_http_1_0_with_expect_gets_no_100(hostile: Server) -> None:
    """RFC 9110 §10.1.1: no 100 (Continue) for an HTTP/1.0 client; its body is simply read."""
    body = review()
    request = post(body, extra=b"Expect: 100-continue\r\n").replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    raw, _closed = exchange(hostile, request, wait=1.0)
    assert [status for status, _h, _b in responses(raw)] == [200]


def test_connection_close_is_honoured_and_later_requests_ignored(hostile: Server) -> None:
    """Bound: one answer, then closed at once."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + GET
    raw, closed = exchange(hostile, request, wait=2.0)
    assert len(responses(raw)) == 1 and closed


def test_expect_100_continue_for_a_body_that_fits(hostile: Server) -> None:
    """100 first, then the body, then the review's answer."""
    body = review()
    s = connect(hostile)
    try:
        s.sendall(post(b"", extra=b"Expect: 100-continue\r\n", length=len(body)))
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        [(status, _h, answer)] = responses(s.recv(65536))
        assert status == 200 and json.loads(answer)["response"]["allowed"] is True
    finally:
        s.close()


def test_expect_100_continue_with_an_oversized_length_gets_413_and_no_100(hostile: Server) -> None:
    """Bound: 413 without a 100 before it, closed within the linger second (+1 s)."""
    raw, closed = exchange(hostile, post(b"", extra=b"Expect: 100-continue\r\n", length=10_000_000), wait=4.0)
    assert not raw.startswith(b"HTTP/1.1 100")
    assert [status for status, _h, _b in responses(raw)] == [413] and closed


def test_unknown_expectation_is_417(hostile: Server) -> None:
    raw, closed = exchange(hostile, post(review(), extra=b"Expect: something-else\r\n"), wait=2.0)
    assert [status for status, _h, _b in responses(raw)] == [417] and closed


@pytest.mark.parametrize(
    "offer",
    [
        b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
        b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: x3JJHMbDL1EzLkh9GBhXDw==\r\n",
    ],
    ids=["h2c", "websocket"],
)
def test_upgrade_offers_get_one_http_1_1_answer(hostile: Server, offer: bytes) -> None:
    """What `curl --http2` sends over cleartext, and a WebSocket handshake: declined by answering
    once, in HTTP/1.1 (no 101); the connection stays usable for the next request. (The client
    waits for that answer before it sends more, as RFC 9110 §7.8 has it.)"""
    s = connect(hostile)
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + offer + b"\r\n")
        raw, closed = read_until_closed(s, 0.5)
        assert [status for status, _h, _b in responses(raw)] == [200] and not closed
        s.sendall(GET)
        raw, closed = read_until_closed(s, 0.5)
        assert [status for status, _h, _b in responses(raw)] == [200] and not closed
    finally:
        s.close()


def test_absolute_form_target_is_accepted(hostile: Server) -> None:
    """RFC 9112 §3.2.2: a server MUST accept the absolute form."""
    request = post(review()).replace(b"POST /validate", b"POST https://gpu-policy.gpu-policy.svc:443/validate", 1)
    [(status, _h, answer)] = responses(exchange(hostile, request, wait=1.0)[0])
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True


def test_missing_or_doubled_host_is_400(hostile: Server) -> None:
    """RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host or with two."""
    request = post(review()).replace(b"Host: " + HOST + b"\r\n", b"")
    raw, closed = exchange(hostile, request, wait=2.0)
    [(status, _h, body)] = responses(raw)
    assert status == 400 and closed and "Host" in json.loads(body)["error"]
    raw, closed = exchange(hostile, post(review(), extra=b"Host: other\r\n"), wait=2.0)
    assert [status for status, _h, _b in responses(raw)] == [400] and closed


def test_trailer_content_type_does_not_override_the_header(hostile: Server) -> None:
    """A chunked body's trailer section is not a second header block."""
    request = (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked(review(), 4096)[: -len(b"\r\n")]
        + b"Content-Type: text/plain\r\n\r\n"
    )
    [(status, _h, answer)] = responses(exchange(hostile, request, wait=1.0)[0])
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True
