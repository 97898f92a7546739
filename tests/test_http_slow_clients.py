"""The admission and metrics ports against slow, flooding and vanishing clients: trickled headers
and bodies, tiny chunks, connections that never handshake, never send or never read, pipelined
floods, a thousand idle keep-alive connections, resets, close_notify and SIGTERM mid-request. The
real server process over verified TLS (tests/test_http_hostile.py has the malformed requests).

Each test states its bound: time to close, memory growth, or another client's latency, and the
server's log stays clean (the `clean` fixture of tests/conftest.py: no ERROR line, no traceback).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.apiserver import ApiServer
from tests.helpers import Server, container, pod
from tests.rawhttp import (
    DEADLINES,
    GET,
    HOST,
    SWEEP,
    closed_within,
    connect,
    exchange,
    figure,
    post,
    read_until_closed,
    responses,
    review,
    tls_context,
)


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def test_tiny_chunks_of_the_maximum_size_keep_memory_bounded(start_server: Callable[..., Server]) -> None:
    """A valid review padded to exactly the limit (8 MiB here), sent as 1-byte chunks: 48 MB on
    the wire, 8.4 million chunks. Bound: the server's peak RSS grows by less than 3x the limit,
    and the review is judged (200)."""
    limit = 8 * 1024 * 1024
    server = start_server({"clusterVersion": "1.30", "server": {"maxRequestBytes": limit, "bodySeconds": 60.0}})
    warm = exchange(server, post(review()), wait=0.5)[0]  # first review: imports, caches
    assert responses(warm)[0][0] == 200
    before = rss_kb(server.proc.pid)
    body = review()
    body = body + b" " * (limit - len(body))
    s = connect(server, timeout=60)
    try:
        s.sendall(
            b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        step = 1 << 16
        for i in range(0, limit, step):
            s.sendall(b"".join(b"1\r\n%c\r\n" % c for c in body[i : i + step]))
        s.sendall(b"0\r\n\r\n")
        s.settimeout(60)
        raw = b""
        while b"}}" not in raw:
            part = s.recv(65536)
            if not part:
                break
            raw += part
    finally:
        s.close()
    [(status, _h, answer)] = responses(raw)
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True
    growth = rss_kb(server.proc.pid, "VmHWM") - before
    print(f"\ntiny chunks: 8 MiB in 1-byte chunks, peak RSS +{growth / 1024:.1f} MiB")
    assert growth < 3 * limit / 1024
    assert not server.log_problems()


def test_stalled_body_is_408_after_body_seconds(hostile: Server) -> None:
    """Bounds: 408 within bodySeconds (1 s) + 0.5 s of the headers; closed within the linger
    second after it (aiohttp reads what is left of a refused body for that long)."""
    s = connect(hostile)
    try:
        s.sendall(post(b"", length=500) + b'{"apiVersion"')
        started = time.monotonic()
        s.settimeout(3)
        first = s.recv(65536)
        answered = time.monotonic() - started
        raw, closed = read_until_closed(s, 3.0)
        [(status, headers, body)] = responses(first + raw)
        assert status == 408 and headers["connection"] == "close" and closed
        assert "within 1 s" in json.loads(body)["error"]
        figure("stalled body: 408 after", answered)
        assert answered < 1.5 and time.monotonic() - started < 2.5
    finally:
        s.close()


def test_trickled_headers_are_released_after_header_seconds(hostile: Server) -> None:
    """A byte of headers every 0.2 s never completes them. Bound: closed within headerSeconds
    (1 s) + one sweep + 0.5 s, long before the idle timeout (3 s)."""
    s = connect(hostile)
    started = time.monotonic()
    closed_at = None
    try:
        for byte in b"POST /validate HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed_at = time.monotonic() - started
                break
            s.settimeout(0.2)
            try:
                if s.recv(1024) == b"":
                    closed_at = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_at = time.monotonic() - started
                break
    finally:
        s.close()
    figure("trickled headers: closed after", closed_at)
    assert closed_at is not None and closed_at < 1.0 + SWEEP + 0.5, closed_at


def test_new_connection_that_sends_nothing_is_released_after_header_seconds(hostile: Server) -> None:
    """TLS done, then silence. Bound: closed within headerSeconds + one sweep + 0.5 s."""
    s = connect(hostile)
    try:
        took = closed_within(s, 4.0)
    finally:
        s.close()
    figure("silent new connection: closed after", took)
    assert took is not None and took < 1.0 + SWEEP + 0.5, took


@pytest.mark.parametrize(
    ("sent", "bound"),
    [(b"", 2.0), (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 2.0), (GET, 1.0)],
    ids=["no-client-hello", "half-a-client-hello", "plain-http-on-the-tls-port"],
)
def test_tcp_without_a_tls_handshake_is_closed(hostile: Server, sent: bytes, bound: float) -> None:
    """TCP only: nothing, the first bytes of a ClientHello, or plain HTTP. Bound: closed within
    headerSeconds (asyncio's ssl_handshake_timeout) + 1 s, not asyncio's default 60 s; plain
    HTTP at once (not TLS: the handshake fails); the log has no error (the fixture checks)."""
    s = socket.create_connection(("127.0.0.1", hostile.port), timeout=5)
    try:
        s.sendall(sent)
        took = closed_within(s, 5.0)
    finally:
        s.close()
    figure(f"TCP without TLS ({sent[:8]!r}...): closed after", took)
    assert took is not None and took < bound, took


def test_tls_close_notify_after_a_request_leaves_a_clean_log(hostile: Server) -> None:
    """What Go's tls.Conn.Close does every time the API server drops an idle connection: a
    close_notify alert. Bound: the server closes its side within 1 s, with no error line."""
    for _ in range(5):
        s = connect(hostile)
        s.sendall(GET)
        [(status, _h, _b)] = responses(s.recv(65536))
        assert status == 200
        s.settimeout(1.0)
        s.unwrap()  # sends close_notify and waits for the server's
        s.close()


def test_connection_reset_mid_request_leaves_a_clean_log(hostile: Server) -> None:
    """RST after half a body. Bound: the server keeps serving; no error line."""
    s = connect(hostile)
    s.sendall(post(b"", length=400) + b'{"apiVersion": "admi')
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
    s.close()
    raw, _ = exchange(hostile, GET, wait=0.5)
    assert responses(raw)[0][0] == 200


def server_holds(server: Server, client_port: int) -> bool:
    """Whether the server process still has a socket open to our `client_port` (its fds and
    /proc/net/tcp: a released connection may linger in the kernel, owned by no process)."""
    inodes = set()
    for fd in Path(f"/proc/{server.proc.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].rsplit(":", 1)[1], 16) == client_port and fields[9] in inodes:
            return True
    return False


class Flood(threading.Thread):
    """Pipelines `count` copies of `request` on one connection and never reads an answer; its
    receive buffer is small, so the server's answers back up. `released_after`: seconds from
    the start until the server process let go of the connection (None while it holds it)."""

    def __init__(self, server: Server, request: bytes, count: int, *, plain: bool = False) -> None:
        super().__init__(daemon=True)
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.settimeout(5)
        raw.connect(("127.0.0.1", server.metrics_port if plain else server.port))
        self.server = server
        self.port = raw.getsockname()[1]
        self.sock = raw if plain else tls_context(server.cert_dir).wrap_socket(raw, server_hostname=HOST.decode())
        self.payload = request * count
        self.released_after: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        sent = 0
        self.sock.settimeout(0.05)
        try:
            while not self.stop.is_set():
                if not server_holds(self.server, self.port):
                    self.released_after = time.monotonic() - started
                    return
                if sent == len(self.payload):
                    time.sleep(0.05)
                    continue
                try:
                    sent += self.sock.send(self.payload[sent : sent + 16384])
                except (TimeoutError, ssl.SSLWantWriteError):
                    continue
                except OSError:  # reset by the server
                    self.released_after = time.monotonic() - started
                    return
        finally:
            self.sock.close()


def timed_reviews(server: Server, count: int = 40, gap: float = 0.05) -> list[float]:
    client = server.client()
    took = []
    try:
        body = json.loads(review())
        for _ in range(count):
            started = time.monotonic()
            assert client.review("/validate", {**body, "request": {**body["request"]}})["allowed"] is True
            took.append(time.monotonic() - started)
            time.sleep(gap)
    finally:
        client.close()
    return took


@pytest.mark.parametrize(
    ("port", "request_bytes"),
    [("admission", GET), ("metrics", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")],
    ids=["admission-port", "metrics-port"],
)
def test_pipelined_floods_that_never_read_stall_no_review(hostile: Server, port: str, request_bytes: bytes) -> None:
    """Two clients pipeline 20,000 requests each and read nothing, while a review is timed on
    another connection. Bounds: every review's latency (p99 of 40) under 1 s; each flooder's
    connection released by the server within 10 s (writeSeconds, 1 s, once its answers back up)."""
    floods = [Flood(hostile, request_bytes, 20_000, plain=port == "metrics") for _ in range(2)]
    for f in floods:
        f.start()
    try:
        time.sleep(0.3)
        took = timed_reviews(hostile)
        deadline = time.monotonic() + 10
        while any(f.released_after is None for f in floods) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for f in floods:
            f.stop.set()
        for f in floods:
            f.join(5)
    worst = sorted(took)[-1]
    released = [f.released_after for f in floods]
    print(f"\n{port} flood: review p99 {worst * 1000:.1f} ms; flooders released after {released} s")
    assert worst < 1.0
    assert all(f.released_after is not None and f.released_after < 10 for f in floods)


def test_client_that_never_reads_is_cut_off(hostile: Server) -> None:
    """Pipelined reviews whose answers (5 KB patches each, 10 MB in all: more than the kernel's
    socket buffers hold) are never read. Bound: the server drops the connection within 10 s of
    the first request, writeSeconds (1 s) after its answers back up (the kernel may keep the
    unread bytes a while longer, owned by no process)."""
    many = pod(*(container(f"c{i}", image="registry.example.com/tools:1") for i in range(40)))
    request = post(json.dumps(ApiServer.build(many)).encode(), path=b"/mutate")
    answer = exchange(hostile, request, wait=1.0)[0]
    assert len(answer) > 4000  # every container gets NVIDIA_VISIBLE_DEVICES=void
    flood = Flood(hostile, request, 2000)
    flood.start()
    flood.join(15)
    print(f"\nnever reads: released after {flood.released_after} s")
    assert flood.released_after is not None and flood.released_after < 10


def test_a_thousand_concurrent_keep_alive_connections(hostile: Server) -> None:
    """1,000 TLS connections at once, a review on each, all kept open. Bounds: every review
    answered 200 within 60 s in all; a review on a new connection meanwhile within 1 s; the
    server's RSS grows by less than 150 MB."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    before = rss_kb(hostile.proc.pid)
    context = tls_context(hostile.cert_dir)
    body = review()

    async def one(gate: asyncio.Semaphore) -> tuple[int, asyncio.StreamWriter]:
        async with gate:  # connects at most 100 at a time, as a connection pool ramps up
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", hostile.port, ssl=context, server_hostname=HOST.decode()
            )
        writer.write(post(body))
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        return int(head.split()[1]), writer

    async def scenario() -> tuple[list[int], float]:
        gate = asyncio.Semaphore(100)
        results = await asyncio.wait_for(asyncio.gather(*(one(gate) for _ in range(1000))), 60)
        started = time.monotonic()
        fresh = await asyncio.to_thread(timed_reviews, hostile, 1, 0.0)
        took = time.monotonic() - started
        for _status, writer in results:
            writer.close()
        return [status for status, _w in results], max(fresh[0], took - 0.0)

    started = time.monotonic()
    statuses, fresh = asyncio.run(scenario())
    growth = (rss_kb(hostile.proc.pid, "VmHWM") - before) / 1024
    print(
        f"\n1,000 connections: all answered in {time.monotonic() - started:.1f} s; a new review {fresh * 1000:.0f} ms "
        f"with them open; peak RSS +{growth:.1f} MB"
    )
    assert statuses == [200] * 1000
    assert fresh < 1.0
    assert growth < 150


def test_sigterm_with_a_request_half_sent(start_server: Callable[..., Server]) -> None:
    """SIGTERM while a review is half sent: the rest arrives during the drain and is answered
    (with Connection: close); a new connection during the drain is served too; then the server
    exits 0. Bound: exit within drainSeconds (1.5 s) + 3 s of the signal."""
    drain = 1.5
    server = start_server(
        {"clusterVersion": "1.30", "server": {"drainSeconds": drain, **DEADLINES, "bodySeconds": 5.0}}
    )
    request = post(review())
    half = len(request) - 600  # the headers and part of the body
    s = connect(server)
    try:
        s.sendall(request[:half])
        time.sleep(0.1)
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        s.sendall(request[half:])
        raw, closed = read_until_closed(s, 3.0)
    finally:
        s.close()
    [(status, headers, answer)] = responses(raw)
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True
    assert headers["connection"] == "close" and closed
    during = exchange(server, post(review()), wait=1.0)[0]
    assert responses(during)[0][0] == 200
    assert server.proc.wait(timeout=drain + 5) == 0
    figure("SIGTERM with a request half sent: exit after the signal", time.monotonic() - sent)
    assert time.monotonic() - sent < drain + 3
    assert not server.log_problems()
