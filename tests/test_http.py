"""The admission port's HTTP/1.1 (webhook.http) against the edges clients really hit, over real TLS
to the server process: pipelining, chunked bodies, limits, bad requests, HTTP/1.0, Expect."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable

import pytest

from tests.apiserver import ApiServer
from tests.helpers import Server, container, pod

HOST = b"gpu-policy.gpu-policy.svc"
LIMITS = {"clusterVersion": "1.30", "server": {"maxRequestBytes": 65536, "idleSeconds": 2.0, "bodySeconds": 1.0}}


@pytest.fixture(scope="module")
def small(start_server: Callable[..., Server]) -> Server:
    return start_server(LIMITS)


def _connect(server: Server) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(server.cert_dir / "ca.crt"))
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return context.wrap_socket(raw, server_hostname=HOST.decode())


def _exchange(server: Server, data: bytes, *, wait: float = 3.0) -> tuple[bytes, bool]:
    """Sends `data`, reads until the server closes or `wait` passes: (bytes read, closed by server)."""
    s = _connect(server)
    s.sendall(data)
    out = b""
    deadline = time.monotonic() + wait
    closed = False
    try:
        while time.monotonic() < deadline:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except (ConnectionError, ssl.SSLError):
                closed = True
                break
            if not chunk:
                closed = True
                break
            out += chunk
    finally:
        s.close()
    return out, closed


def _responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Splits a byte stream of HTTP/1.1 responses (Content-Length framed)."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:length]))
        raw = rest[length:]
    return out


def _post(body: bytes, *, path: bytes = b"/validate", extra: bytes = b"") -> bytes:
    return (
        b"POST " + path + b"?timeout=10s HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
    )


def _review(gpu: str = "1") -> bytes:
    return json.dumps(ApiServer.build(pod(container("train", gpu=gpu)))).encode()


def test_pipelined_requests_are_answered_in_order(small: Server) -> None:
    first = ApiServer.build(pod(container("a", gpu="1")))
    second = ApiServer.build(pod(container("b", gpu="1", privileged=True)))  # denied
    raw, closed = _exchange(small, _post(json.dumps(first).encode()) + _post(json.dumps(second).encode()), wait=1.0)
    answers = _responses(raw)
    assert [status for status, _h, _b in answers] == [200, 200] and not closed
    uids = [json.loads(body)["response"]["uid"] for _s, _h, body in answers]
    assert uids == [first["request"]["uid"], second["request"]["uid"]]
    assert json.loads(answers[1][2])["response"]["allowed"] is False


def test_chunked_body_is_read_and_judged(small: Server) -> None:
    body = _review()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100]) for i in range(0, len(body), 100))
    request = (
        b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    )
    [(status, _h, answer)] = _responses(_exchange(small, request, wait=1.0)[0])
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True


def test_chunked_body_past_the_limit_is_413_and_closed(small: Server) -> None:
    chunk = b"x" * 8192
    request = (
        b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + (b"2000\r\n" + chunk + b"\r\n") * 9
    )
    raw, closed = _exchange(small, request)
    [(status, headers, body)] = _responses(raw)
    assert status == 413 and closed and headers["connection"] == "close"
    assert "65536 byte limit" in json.loads(body)["error"]


def test_declared_length_past_the_limit_is_refused_before_the_body(small: Server) -> None:
    request = (
        b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: 10000000\r\n\r\n{"
    )
    raw, closed = _exchange(small, request)
    [(status, _h, body)] = _responses(raw)
    assert status == 413 and closed  # after at most the linger second, not the whole body
    assert "10000000 bytes declared" in json.loads(body)["error"]


def test_oversized_headers_are_431(small: Server) -> None:
    request = b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\n" + b"X-Filler: " + b"a" * 200_000 + b"\r\n\r\n"
    raw, closed = _exchange(small, request)
    assert _responses(raw)[0][0] == 431 and closed


@pytest.mark.parametrize(
    "request_bytes",
    [b"GARBAGE\r\n\r\n", b"POST /validate HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"],
    ids=["not-http", "two-content-lengths"],
)
def test_malformed_http_is_400_and_closed(small: Server, request_bytes: bytes) -> None:
    raw, closed = _exchange(small, request_bytes)
    [(status, _h, body)] = _responses(raw)
    assert status == 400 and closed
    assert "malformed HTTP request" in json.loads(body)["error"]


def test_smuggling_shapes_are_refused(small: Server) -> None:
    """Content-Length beside Transfer-Encoding is how requests are smuggled past proxies: llhttp
    refuses it (strict mode), so a second request can never hide in a first one's body."""
    smuggled = _post(b"{}")
    request = (
        b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(smuggled) + 5).encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n" + smuggled
    )
    raw, closed = _exchange(small, request)
    statuses = [status for status, _h, _b in _responses(raw)]
    assert statuses == [400] and closed


def test_unknown_path_and_wrong_method(small: Server) -> None:
    raw, _ = _exchange(
        small, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /validate HTTP/1.1\r\nHost: x\r\n\r\n", wait=1.0
    )
    (missing, _h, _b), (wrong, headers, _b2) = _responses(raw)
    assert missing == 404 and wrong == 405 and headers["allow"] == "POST"


def test_head_has_headers_and_no_body(small: Server) -> None:
    raw, _ = _exchange(small, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", wait=0.5)
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 2" in head and rest == b""


def test_http_1_0_closes_unless_asked_to_keep_alive(small: Server) -> None:
    raw, closed = _exchange(small, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert _responses(raw)[0][0] == 200 and closed
    raw, closed = _exchange(small, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", wait=0.5)
    [(status, headers, _b)] = _responses(raw)
    assert status == 200 and headers["connection"] == "keep-alive" and not closed


def test_connection_close_is_honoured_and_later_requests_ignored(small: Server) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    raw, closed = _exchange(small, request)
    assert len(_responses(raw)) == 1 and closed


def test_expect_100_continue(small: Server) -> None:
    body = _review()
    s = _connect(small)
    try:
        s.sendall(
            _post(b"", extra=b"Expect: 100-continue\r\n").replace(
                b"Content-Length: 0", b"Content-Length: %d" % len(body)
            )
        )
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        [(status, _h, answer)] = _responses(s.recv(65536))
        assert status == 200 and json.loads(answer)["response"]["allowed"] is True
    finally:
        s.close()


def test_missing_content_type_is_415(small: Server) -> None:
    body = _review()
    request = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    [(status, _h, answer)] = _responses(_exchange(small, request, wait=0.5)[0])
    assert status == 415 and "got 'application/octet-stream'" in json.loads(answer)["error"]


def test_content_type_parameters_and_case_are_accepted(small: Server) -> None:
    request = _post(_review()).replace(
        b"Content-Type: application/json", b"content-type: Application/JSON; charset=utf-8"
    )
    [(status, _h, answer)] = _responses(_exchange(small, request, wait=0.5)[0])
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True


def test_trickled_body_gets_408_then_close(small: Server) -> None:
    s = _connect(small)
    try:
        s.sendall(_post(b"").replace(b"Content-Length: 0", b"Content-Length: 500") + b'{"apiVersion"')
        started = time.monotonic()
        s.settimeout(5)
        raw = b""
        while chunk := s.recv(4096):
            raw += chunk
        [(status, headers, body)] = _responses(raw)
        assert status == 408 and headers["connection"] == "close" and "within 1 s" in json.loads(body)["error"]
        assert time.monotonic() - started < 3
    finally:
        s.close()
