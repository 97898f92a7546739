"""HTTP/1.1 by hand, for the tests that must send what no well-behaved client library would:
pipelined, malformed, trickled or never-read requests, over real TLS (verified as the API server
verifies) or plain TCP (the metrics port)."""

from __future__ import annotations

import json
import socket
import ssl
import time
from pathlib import Path

from tests.apiserver import ApiServer
from tests.helpers import Server, container, pod

HOST = b"gpu-policy.gpu-policy.svc"


def connect(server: Server, *, plain: bool = False, timeout: float = 5.0) -> socket.socket:
    """A connection to the admission port over verified TLS, or (plain) to the metrics port."""
    port = server.metrics_port if plain else server.port
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if plain:
        return raw
    return tls_context(server.cert_dir).wrap_socket(raw, server_hostname=HOST.decode())


def tls_context(cert_dir: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))


def read_until_closed(s: socket.socket, wait: float) -> tuple[bytes, bool]:
    """Reads until the server closes or `wait` passes: (bytes read, closed by the server)."""
    out = b""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            return out, False
        except (ConnectionError, ssl.SSLError):
            return out, True
        if not chunk:
            return out, True
        out += chunk
    return out, False


def exchange(server: Server, data: bytes, *, wait: float = 3.0, plain: bool = False) -> tuple[bytes, bool]:
    """Sends `data` on a new connection, reads until the server closes or `wait` passes."""
    s = connect(server, plain=plain)
    try:
        s.sendall(data)
        return read_until_closed(s, wait)
    finally:
        s.close()


def responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Splits a byte stream of HTTP/1.1 responses (Content-Length framed; 1xx have no body)."""
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


def post(body: bytes, *, path: bytes = b"/validate", extra: bytes = b"", length: int | None = None) -> bytes:
    """A review POST as the API server sends it (its query, Host and Content-Type)."""
    size = len(body) if length is None else length
    return (
        b"POST " + path + b"?timeout=10s HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(size).encode() + b"\r\n" + extra + b"\r\n" + body
    )


def chunked(body: bytes, size: int) -> bytes:
    """`body` in chunks of `size` bytes, with the last chunk."""
    parts = (body[i : i + size] for i in range(0, len(body), size))
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def review(gpu: str = "1", **spec: object) -> bytes:
    return json.dumps(ApiServer.build(pod(container("train", gpu=gpu), **spec))).encode()


# Short deadlines, so every bound below is a few seconds: the shipped ones are 10 s each.
DEADLINES = {"headerSeconds": 1.0, "bodySeconds": 1.0, "writeSeconds": 1.0, "idleSeconds": 3.0}

# maxConnections above the thousand test_a_thousand_concurrent_keep_alive_connections holds open.
HOSTILE = {
    "clusterVersion": "1.30",
    "server": {"maxRequestBytes": 65536, "maxConnections": 1100, "drainSeconds": 0, **DEADLINES},
}

SWEEP = 0.25  # webhook.serve.transport checks the header and write deadlines this often at these settings

GET = b"GET /healthz HTTP/1.1\r\nHost: " + HOST + b"\r\n\r\n"


def figure(case: str, seconds: float | None) -> None:
    """The measured figure, for the record (run with -s)."""
    print(f"\nFIGURE {case}: {seconds if seconds is None else round(seconds, 3)} s")


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed `s` (read side), or None if it did not within `seconds`."""
    started = time.monotonic()
    _data, closed = read_until_closed(s, seconds)
    return time.monotonic() - started if closed else None
