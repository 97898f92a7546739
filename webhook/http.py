"""The admission port's HTTP/1.1 transport: bytes in, an answer out, on asyncio and llhttp.

Why not aiohttp's web server here: the API server waits on this port for every pod, and in
`make bench` aiohttp's request machinery (Request and StreamReader objects, a task per request,
router, response writer) cost about half of a bare aiohttp server's CPU per review, more than
the whole policy. This module does only what an admission webhook needs, with llhttp (through
httptools, the parser of Node.js and uvicorn) doing the parsing, strictly:

- POST /validate and /mutate, GET or HEAD /healthz, /readyz and /metrics; 404 and 405 otherwise;
- keep-alive and pipelining (answers are computed synchronously, so they go out in order);
- bodies by Content-Length or chunked, refused with 413 past the configured size (before a byte
  of body is read when the length is declared), and with 408 when not complete in time;
- headers bounded (431); idle connections and half-sent headers closed after idleSeconds;
- draining (every answer says Connection: close) and a stop that finishes requests in flight.

Deadlines are checked by one sweep per server a few times a second instead of a timer per
request: arming and cancelling a timer per review cost more than the check. The metrics port
uses the same transport without TLS.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any, Final, cast

import httptools

from .review import dumps

log = logging.getLogger("gpu-policy.http")

# An answer: status, Content-Type, body, and whether to close the connection after it.
Answer = tuple[int, bytes, bytes, bool]
# A route's handler: (Content-Type media type, lowercased without parameters; body) -> Answer.
Handler = Callable[[str, bytes], Answer]

HEADER_LIMIT: Final = 64 * 1024  # request line and headers together; aiohttp allows 8190 per line
REASONS: Final = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Content Too Large",
    415: b"Unsupported Media Type",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}
TEXT: Final = b"text/plain; charset=utf-8"
JSON: Final = b"application/json"

# Connection states, plain ints: what the sweep checks a deadline against.
IDLE, HEADERS, BODY, LINGER, CLOSED = 0, 1, 2, 3, 4
LINGER_SECONDS: Final = 1.0  # how long a refused request's body is drained (aiohttp's lingering_time)


class Route:
    """The methods a path answers and its handler."""

    __slots__ = ("allow", "handler", "methods")

    def __init__(self, methods: frozenset[bytes], handler: Handler) -> None:
        self.methods = methods
        self.handler = handler
        self.allow = b", ".join(sorted(methods))


class Limits:
    """What the transport enforces (from config's server section)."""

    __slots__ = ("body_seconds", "idle_seconds", "max_body")

    def __init__(self, max_body: int, idle_seconds: float, body_seconds: float) -> None:
        self.max_body = max_body
        self.idle_seconds = idle_seconds
        self.body_seconds = body_seconds


class Server:
    """One listening socket and its connections."""

    def __init__(
        self,
        routes: dict[bytes, Route],
        limits: Limits,
        on_body_wait: Callable[[int], None] | None = None,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.connections: set[Connection] = set()
        self.closing = False  # stop() called: every answer closes its connection
        self.date = b""
        # The monotonic clock as of the last sweep: deadlines are only as fine as the sweep that
        # checks them, so a request reads this instead of asking the clock three times.
        self.now = 0.0
        self._listener: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        # Told +1 / -1 as a request's body starts and stops being awaited (the in-flight gauge).
        self.on_body_wait = on_body_wait or (lambda _n: None)
        self._tick()

    def _tick(self) -> None:
        self.date = formatdate(usegmt=True).encode()
        self.now = time.monotonic()

    async def start(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None, *, reuse_port: bool = False
    ) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            # A Connection is an asyncio protocol by its methods (see the class): cast, not subclassed.
            lambda: cast(asyncio.BaseProtocol, Connection(self)),
            host,
            port,
            ssl=ssl_context,
            reuse_port=reuse_port or None,
            backlog=1024,
            # A client that connects and never finishes the handshake: bounded, like a silent one.
            ssl_handshake_timeout=max(self.limits.idle_seconds, 5.0) if ssl_context is not None else None,
        )
        self._tick()
        self._sweeper = asyncio.create_task(self._sweep())

    @property
    def port(self) -> int:
        assert self._listener is not None and self._listener.sockets
        return int(self._listener.sockets[0].getsockname()[1])

    async def _sweep(self) -> None:
        """Deadlines of every connection, a few times a second (the shortest limit / 4)."""
        interval = min(1.0, max(0.05, min(self.limits.idle_seconds, self.limits.body_seconds) / 4))
        while True:
            await asyncio.sleep(interval)
            self._tick()
            # Deadlines were stamped with a clock up to one interval old: one interval of grace, so
            # no limit ever fires early (and none more than two intervals late).
            now = self.now - interval
            for conn in [c for c in self.connections if c.deadline and c.deadline <= now]:
                try:
                    conn.expire()
                except Exception:  # one broken connection must not end the sweep for all
                    log.exception("closing an expired connection failed")
                    conn.abort()

    async def stop(self, timeout: float) -> None:
        """Stop listening, close idle connections, let requests in flight finish (their own
        deadlines still apply) for up to `timeout` seconds, then close what is left."""
        self.closing = True
        if self._listener is not None:
            self._listener.close()
        for conn in list(self.connections):
            if conn.state == IDLE:
                conn.close()
        deadline = time.monotonic() + timeout
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._listener is not None:
            await self._listener.wait_closed()


class Connection:
    """One client connection: llhttp parses, callbacks collect, the handler answers in order.

    An asyncio protocol by its methods (asyncio and uvloop call them by name), not by subclassing
    asyncio.Protocol: mypyc compiles only classes whose bases it compiles too."""

    __slots__ = (
        "body",
        "content_type",
        "deadline",
        "declared",
        "expect_continue",
        "header_bytes",
        "header_size",
        "parser",
        "paused",
        "server",
        "size",
        "state",
        "transport",
        "url",
        "waiting",
    )

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.state = IDLE
        self.deadline = 0.0
        self.url = b""
        self.content_type = b""
        self.declared = -1  # Content-Length, -1 when not given
        self.expect_continue = False
        self.body: list[bytes] = []
        self.size = 0
        self.header_bytes = 0
        self.header_size = 0
        self.waiting = False  # counted in the in-flight gauge: a body still arriving
        self.paused = False

    # asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.server.connections.add(self)
        self.deadline = self.server.now + self.server.limits.idle_seconds

    def connection_lost(self, exc: Exception | None) -> None:
        self._done_waiting()
        self.state = CLOSED
        self.deadline = 0.0
        self.server.connections.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state == CLOSED:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._early(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            if self.state < LINGER:
                self._early(400, f"malformed HTTP request: {exc}")
            else:  # what a refused request still sends may be anything: it is only drained
                self.close()
        state = self.state
        if state == HEADERS:
            # Headers still incomplete: bounded in bytes (the chunk that began them may also hold
            # earlier requests, so this errs on the side of allowing one chunk more).
            self.header_bytes += len(data)
            if self.header_bytes > HEADER_LIMIT:
                self._early(431, "request headers too large")
        elif state == BODY and not self.waiting:
            # Most bodies arrive with their headers; only one still arriving counts as in flight.
            self.waiting = True
            self.server.on_body_wait(1)

    def pause_writing(self) -> None:  # the client does not read its answers: stop reading requests
        if self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and self.paused:
            self.paused = False
            self.transport.resume_reading()

    # llhttp callbacks

    def on_message_begin(self) -> None:
        if self.state >= LINGER:
            return
        self.state = HEADERS
        self.header_bytes = 0
        self.header_size = 0
        self.url = b""
        self.content_type = b""
        self.declared = -1
        self.expect_continue = False
        self.size = 0
        self.deadline = self.server.now + self.server.limits.idle_seconds

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.header_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state >= LINGER:
            return
        # Counted here too: a header block that arrives whole in one read is parsed to its end
        # (and answered) within that read, before data_received's count of incomplete headers.
        self.header_size += len(name) + len(value) + 4
        if self.header_size > HEADER_LIMIT:
            self._early(431, "request headers too large")
            return
        size = len(name)  # most headers are none of these three: compared by length first
        if size == 12 and name.lower() == b"content-type":
            self.content_type = value
        elif size == 14 and name.lower() == b"content-length":
            self.declared = int(value) if value.isdigit() else -1  # llhttp has checked the digits
        elif size == 6 and name.lower() == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True

    def on_headers_complete(self) -> None:
        if self.state >= LINGER:
            return
        limit = self.server.limits.max_body
        if self.declared > limit:
            self._early(413, f"body larger than the {limit} byte limit: {self.declared} bytes declared", linger=True)
            return
        self.state = BODY
        self.deadline = self.server.now + self.server.limits.body_seconds
        if self.expect_continue and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        if self.state != BODY:
            return
        self.size += len(chunk)
        limit = self.server.limits.max_body
        if self.size > limit:
            self._early(413, f"body larger than the {limit} byte limit", linger=True)
            return
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.state >= LINGER:
            if self.state == LINGER:
                self.close()  # the refused request has been read to its end: the answer is safe
            return
        self._done_waiting()
        self.state = IDLE
        self.deadline = self.server.now + self.server.limits.idle_seconds
        chunks = self.body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if chunks:
            self.body = []
        self._answer(body)

    # answering

    def _answer(self, body: bytes) -> None:
        parser = self.parser
        method = parser.get_method()
        url = self.url
        path = url.split(b"?", 1)[0] if b"?" in url else url
        route = self.server.routes.get(path)
        keep_alive = parser.should_keep_alive()
        if route is None:
            self._write(404, TEXT, b"404: Not Found\n", keep_alive, method)
            return
        if method not in route.methods:
            allow = b"Allow: " + route.allow + b"\r\n"
            self._write(405, TEXT, b"405: Method Not Allowed\n", keep_alive, method, allow)
            return
        try:
            status, content_type, payload, close = route.handler(_media_type(self.content_type), body)
        except Exception:  # the handlers catch their own; this is the transport's last line
            log.exception("internal error answering %s", path.decode("latin-1"))
            status, content_type, payload, close = 500, TEXT, b"internal error\n", True
        self._write(status, content_type, payload, keep_alive and not close, method)

    def _write(
        self,
        status: int,
        content_type: bytes,
        payload: bytes,
        keep_alive: bool,
        method: bytes,
        extra: bytes = b"",
        *,
        linger: bool = False,
    ) -> None:
        transport = self.transport
        if transport is None:
            return
        keep_alive = keep_alive and not self.server.closing
        if keep_alive:
            # HTTP/1.0 clients keep the connection only when told so; 1.1 keeps it by default.
            connection = b"" if self.parser.get_http_version() != "1.0" else b"Connection: keep-alive\r\n"
        else:
            connection = b"Connection: close\r\n"
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nDate: %s\r\n%s%s\r\n" % (
            status,
            REASONS.get(status, b"Unknown"),
            content_type,
            len(payload),
            self.server.date,
            connection,
            extra,
        )
        transport.write(head if method == b"HEAD" else head + payload)
        if linger:
            self.state = LINGER
            self.deadline = self.server.now + LINGER_SECONDS
        elif not keep_alive:
            self.close()

    def _early(self, status: int, message: str, *, linger: bool = False) -> None:
        """An answer before the request is complete, or instead of it; the connection then closes.
        With `linger`, the rest of the request is read (and dropped) for up to a second first, so
        a client still sending its body reads the answer instead of a reset."""
        self._done_waiting()
        self._write(status, JSON, dumps({"error": message}), False, b"", linger=linger)

    def _done_waiting(self) -> None:
        if self.waiting:
            self.waiting = False
            self.server.on_body_wait(-1)

    def expire(self) -> None:
        """The sweep found this connection past its deadline."""
        if self.state == BODY:
            seconds = self.server.limits.body_seconds
            self._early(408, f"request body not complete within {seconds:g} s")
        else:  # idle, headers never finished, or a refused body that keeps coming: nothing to answer
            self.close()

    def close(self) -> None:
        """Close after what was written; requests pipelined behind are not answered."""
        self.deadline = 0.0
        self.state = CLOSED
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _media_type(value: bytes) -> str:
    """`Application/JSON; charset=utf-8` -> "application/json": the media type without parameters,
    lowercased; absent -> "application/octet-stream" (RFC 9110's default, as aiohttp reported it)."""
    if value == b"application/json":
        return "application/json"  # what the API server sends
    if not value:
        return "application/octet-stream"
    end = value.find(b";")
    return (value if end < 0 else value[:end]).strip().lower().decode("latin-1")
