"""The HTTP transport of both ports: aiohttp's low-level server, configured for hostile clients.

aiohttp (its `web.Server`, the documented low-level server) does the protocol: HTTP/1.1 parsing
with llhttp in strict mode (Content-Length beside Transfer-Encoding, two Content-Lengths, bad chunk
sizes, obs-fold, an HTTP/1.1 request without Host and other malformed requests are refused with
400), keep-alive and pipelining (answers in order; at most 32 parsed requests queued per
connection before it stops reading), chunked bodies, the idle timeout (`keepalive_timeout`), the
request-line and header limits
(`max_line_size`, `max_field_size`, `max_headers`), lingering close after an early answer,
`close_notify` (its `eof_received`), and the body limit as it is crossed, whatever the chunking
(`BaseRequest.read` with `client_max_size`). asyncio bounds the TLS handshake
(`ssl_handshake_timeout`).

Ours, because neither library has it (each a few lines, marked below):
- the header deadline (server.headerSeconds): aiohttp closes a connection whose headers trickle
  in only when its keep-alive timer fires, 2 minutes later;
- the write deadline (server.writeSeconds): aiohttp waits forever for a client that stops reading
  its answers (its drain has no timeout);
- 413 from a declared Content-Length before the body is read, and no `100 Continue` for a body
  that would be refused (aiohttp's own expect handler, which lives in the router we do not use,
  is mirrored in `_continue`);
- 408 for a body not complete within server.bodySeconds;
- the caps (server.maxConnections, server.maxInflightBytes): a connection past the cap is
  answered 503 before any request is read. A large body (past SMALL_BODY) that does not fit the
  in-flight budget waits for it (`_reserve`) instead of a 503, which with failurePolicy Ignore
  would admit a pod without isolation: first come, first served, for as long as the API server
  waits for the call (its `?timeout=`, at most WAIT_SECONDS), leaving the queue as soon as its
  connection closes. The budget always holds one body of maxRequestBytes (the largest review the
  API server sends for a pod etcd can store, 19 MiB = 2 x 6 x 1.5 MiB + 1 MiB: see
  webhook.config.defaults), so the queue always moves; only a flood past max_waiting (25 at the
  defaults, WAIT_HOLD) is answered 503. Small bodies, what the API server sends nearly always,
  never count against it: their memory is bounded by the connection cap;
- fairness: large reviews are judged one at a time and only after the loop has had its turn, so
  a bystander's small review waits for at most one large one, never for a queue of them;
- the log: a client's mistake is one WARNING line (malformed request) or DEBUG (reset, timeout,
  close_notify), never aiohttp's ERROR traceback; a failure of ours still is one.

Handlers keep the shape webhook.serve.answer compiles: (Content-Type media type, body) -> Answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any, Final, cast

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from ..admission.review import dumps
from ..config import ServerSettings
from .answer import JSON, TEXT, Answer, Handler

log = logging.getLogger("gpu-policy.http")

LINGER_SECONDS: Final = 1.0  # how long a refused request's body is read and dropped (aiohttp: lingering_time)
MAX_LINE: Final = 8190  # request line, and each header line (aiohttp's defaults; the API server's are < 1 KiB)
MAX_HEADERS: Final = 100  # header lines per request (aiohttp's default is 128)
# Bodies up to this size (nearly every review: a pod is a few KiB) skip the in-flight budget and
# the large-review lane; aiohttp buffers at most about this much per connection before a handler reads.
SMALL_BODY: Final = 64 * 1024
# An answer to a body past this closes its connection: the TLS read buffer (256 KiB in asyncio's
# and uvloop's SSL protocol) stays touched while a connection lives, so 20 idle connections that
# had each sent a 4 MiB review held 193 KiB each; reconnecting costs one handshake per large review.
CLOSE_AFTER: Final = 256 * 1024
BUSY_LOG_SECONDS: Final = 10.0  # refusals for load are logged at most this often (a flood is one line)
# How long a large body waits for the in-flight budget at most: the longest timeout the API server
# gives a webhook call (admissionregistration.k8s.io/v1 timeoutSeconds is at most 30). A request
# waits no longer than its own caller does: the API server sends the webhook's configured
# timeoutSeconds (the chart's is 5), or what is left of its request's, as `?timeout=5s`
# (wait_seconds), and closes its connection when it gives up, which takes the request out of the
# queue at once (Connection.connection_lost). A 503 after that answers nobody still waiting.
WAIT_SECONDS: Final = 30.0
# What a large request waiting for the budget holds at most: the part of its body that TLS and
# aiohttp read before they paused its connection (TLS hands aiohttp all it has decrypted at once,
# up to 512 KiB, past aiohttp's 128 KiB high water, and holds 256 KiB more), measured at 1.1 to
# 1.4 MiB a connection. At most budget / WAIT_HOLD requests wait (Transport.max_waiting, 25 at the
# defaults), so waiting costs at most the budget's size again, whatever a flood of them sends.
WAIT_HOLD: Final = 3 * 512 * 1024
# A Go duration as the API server writes `?timeout=` (time.Duration.String: "5s", "1m0s", "1.5s").
_DURATION: Final = re.compile(r"(?:\d+(?:\.\d+)?(?:h|m|s|ms|us|µs|ns))+")
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def wait_seconds(timeout: str | None) -> float:
    """How long a large request may wait for the in-flight budget: the API server's timeout for
    the call, from its `?timeout=` (Go's duration format), at most WAIT_SECONDS, which is also
    what a request without one (or with one that does not parse) gets."""
    if not timeout or not _DURATION.fullmatch(timeout):
        return WAIT_SECONDS
    seconds = sum(float(number) * _UNIT[unit] for number, unit in _PART.findall(timeout))
    return min(seconds, WAIT_SECONDS)


class Route:
    """The methods a path answers, its handler, and whether the handler reads a body."""

    __slots__ = ("allow", "body", "handler", "methods")

    def __init__(self, methods: frozenset[str], handler: Handler, *, body: bool = False) -> None:
        self.methods = methods
        self.handler = handler
        self.body = body
        self.allow = ", ".join(sorted(methods))


class Connection(web.RequestHandler):
    """aiohttp's connection protocol plus the two deadlines it lacks, stamped here and enforced
    by the server's sweep (a stamp per request costs less than a timer per request)."""

    __slots__ = ("busy", "clock", "closing_since", "full", "headers_since", "socket", "stalled_since", "waiting")

    def __init__(self, manager: web.Server, full: Callable[[], bool], **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.full = full  # the server is at maxConnections: this connection is refused
        self.clock: Callable[[], float] = kwargs["loop"].time
        self.busy = False  # our handler is running: bytes that arrive now are its body
        self.headers_since = 0.0  # a request's first bytes (or the connection) arrived then, headers not complete
        self.stalled_since = 0.0  # the client stopped reading our answers then
        self.closing_since = 0.0  # aiohttp closed the connection then, and it has not gone yet
        # aiohttp lets go of the transport when it closes it; a close waits for unsent answers,
        # which a client that reads nothing never takes: kept here to abort it.
        self.socket: asyncio.Transport | None = None
        # Its large request's turn in the in-flight queue (Transport._reserve), while it waits.
        self.waiting: asyncio.Future[bool] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.full():
            # Past maxConnections: one 503 and the connection closes, nothing of it is read (aiohttp
            # never hears of it: force_close makes its data_received drop whatever arrives).
            self.force_close()
            transport.write(BUSY)  # type: ignore[attr-defined]
            transport.close()
            return
        super().connection_made(transport)
        self.socket = transport  # type: ignore[assignment]
        # As Go's ReadHeaderTimeout: a new connection owes its first request's headers from now on.
        self.headers_since = self.clock()

    def data_received(self, data: bytes) -> None:
        if not self.busy and not self.headers_since:
            self.headers_since = self.clock()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        # Gone while its request waited for the in-flight budget: out of the queue at once (the
        # API server closes the connection when its timeout passes), never holding up the rest.
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(False)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.stalled_since = self.clock()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.stalled_since = 0.0

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """aiohttp answers a request its parser refused, or whose handler raised, through here,
        logging an ERROR traceback. A client's mistake gets a WARNING line and a JSON error
        instead; a client gone mid-request (its reset reaches the handler reading the body) a
        DEBUG line. Anything else is ours, and stays an ERROR with its traceback."""
        if isinstance(exc, ConnectionError):
            log.debug("%s went away mid-request: %s", _peer(self), exc)
            return refusal(400, "connection lost")
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # LineTooLong is a request line or a header line past max_line_size/max_field_size.
        status = 431 if isinstance(exc, LineTooLong) else 400
        text = (message or exc.message or type(exc).__name__).splitlines()[0]
        log.warning("malformed HTTP request from %s: %s", _peer(self), text)
        return refusal(status, f"malformed HTTP request: {text}")


def _busy_answer() -> bytes:
    """The 503 a connection past maxConnections gets, whole, written before any request is read."""
    body = dumps({"error": "too many connections (server.maxConnections): try again"})
    head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    return f"{head}Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


BUSY: Final = _busy_answer()
GONE: Final = "gone"  # Transport._reserve: the connection closed while its request waited


class Transport:
    """One listening socket answering `routes` (path -> Route) under `limits`, the config's server
    section (maxRequestBytes and the idle, header, body and write deadlines)."""

    def __init__(
        self, routes: dict[str, Route], limits: ServerSettings, on_body_wait: Callable[[int], None] | None = None
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.closing = False  # stop() called: every answer closes its connection
        # Told +1 / -1 as a request's body starts and stops being awaited (the in-flight gauge).
        self.on_body_wait = on_body_wait or (lambda _n: None)
        self._aiohttp: web.Server | None = None
        self._listener: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.inflight = 0  # bytes of large bodies being received or judged (server.maxInflightBytes)
        # At least one body of the largest size, always (webhook.config also refuses a smaller budget).
        self.budget = max(limits.max_inflight_bytes, limits.max_request_bytes)
        # Large requests waiting for the budget, first come first served: (bytes, turn); a turn's
        # result is True once granted (its bytes already counted in `inflight`), False if its
        # connection closed meanwhile.
        self._queue: deque[tuple[int, asyncio.Future[bool]]] = deque()
        self.max_waiting = max(1, self.budget // WAIT_HOLD)
        self._lane = asyncio.Lock()  # large reviews are judged one at a time (see _judge)
        self.refused = 0  # requests and connections answered 503 for load since the last log line
        self._refused_logged = 0.0

    async def start(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None, *, reuse_port: bool = False
    ) -> None:
        loop = asyncio.get_running_loop()
        limits = self.limits
        max_body = limits.max_request_bytes

        def request(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
            # client_max_size: aiohttp's read() refuses a body as it crosses the limit.
            return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=max_body)

        options: dict[str, Any] = {
            "keepalive_timeout": limits.idle_seconds,
            "access_log": None,  # one line per review is webhook.serve.answer's, at its own level
            "max_line_size": MAX_LINE,
            "max_field_size": MAX_LINE,
            "max_headers": MAX_HEADERS,
            "lingering_time": LINGER_SECONDS,
            # Reviews are never compressed: a Content-Encoding is not decoded (no zlib or brotli
            # on what anyone can send), so such a body is simply not JSON.
            "auto_decompress": False,
        }
        server = self._aiohttp = web.Server(self._handle, request_factory=request)

        cap = limits.max_connections

        def full() -> bool:
            if len(server.connections) < cap:
                return False
            self._busy(f"{len(server.connections)} connections open (server.maxConnections {cap})")
            return True

        def connection() -> Connection:  # aiohttp's own factory, with our Connection
            return Connection(server, full, loop=loop, **options)

        self._listener = await loop.create_server(
            connection,
            host,
            port,
            ssl=ssl_context,
            reuse_port=reuse_port or None,
            backlog=1024,
            # A client that connects and never completes the handshake: closed like a silent one.
            ssl_handshake_timeout=limits.header_seconds if ssl_context is not None else None,
        )
        self._sweeper = asyncio.create_task(self._sweep())

    @property
    def port(self) -> int:
        assert self._listener is not None and self._listener.sockets
        return int(self._listener.sockets[0].getsockname()[1])

    async def _sweep(self) -> None:
        """Ours: the header and write deadlines of every connection, a few times a second."""
        limits = self.limits
        interval = min(1.0, max(0.05, min(limits.header_seconds, limits.write_seconds) / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            if self._aiohttp is None:
                continue
            now = loop.time()
            headers_due, write_due = now - limits.header_seconds, now - limits.write_seconds
            for conn in self._aiohttp.connections:
                if not isinstance(conn, Connection) or conn.socket is None:
                    continue
                if conn.transport is None:  # closed by aiohttp, not gone: its last answers are unread
                    if not conn.closing_since:
                        conn.closing_since = now
                    elif conn.closing_since <= write_due:
                        log.debug("aborting %s: its last answers not read for %g s", _peer(conn), limits.write_seconds)
                        conn.socket.abort()
                elif conn.headers_since and conn.headers_since <= headers_due and not conn.busy:
                    log.debug("closing %s: headers not complete within %g s", _peer(conn), limits.header_seconds)
                    conn.headers_since = 0.0
                    conn.socket.abort()
                elif conn.stalled_since and conn.stalled_since <= write_due:
                    log.debug("closing %s: answers not read for %g s", _peer(conn), limits.write_seconds)
                    conn.stalled_since = 0.0
                    conn.socket.abort()

    async def stop(self, timeout: float) -> None:
        """Stop listening; idle connections close at once; requests in flight, and requests whose
        bytes have begun to arrive, finish (their own deadlines apply) for up to `timeout` seconds,
        each answer closing its connection; then the rest are closed.

        Idle keep-alive connections are closed *first*, with a FIN (and TLS close_notify) the
        client's pool sees before it picks the connection again (Go's transport drops a pooled
        connection its read loop finds closed). Left to aiohttp's shutdown, a review sent on one
        was read into a protocol that discards everything once shutting down, and the API
        server waited out its timeout: with failurePolicy Ignore, a pod admitted unisolated."""
        self.closing = True
        if self._listener is not None:
            self._listener.close()
        if self._aiohttp is not None:
            # aiohttp's shutdown stops reading at once, so a body still arriving could never
            # complete: handlers at work get their time first (each is bounded by bodySeconds,
            # headers still arriving by headerSeconds through the sweep). Each pass closes the
            # connections that are idle by then (answered with Connection: close, or never used).
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                working = False
                for conn in list(self._aiohttp.connections):
                    if not isinstance(conn, Connection) or conn.transport is None:
                        continue
                    if self._idle(conn):
                        conn.force_close()
                    else:
                        working = True
                if not working or loop.time() >= deadline:
                    break
                await asyncio.sleep(0.02)
            await self._aiohttp.shutdown(max(0.0, deadline - loop.time()))
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._listener is not None:
            await self._listener.wait_closed()

    @staticmethod
    def _idle(conn: Connection) -> bool:
        """Between requests: no handler running and no byte of a next request received."""
        return not conn.busy and not conn.headers_since

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = cast(Connection, request.protocol)  # made by our factory, always
        # Headers are complete: the header deadline is met; until we return, bytes are this body.
        conn.busy = True
        conn.headers_since = 0.0
        reserved = 0  # of the in-flight budget, given back when the answer is built
        try:
            route = self.routes.get(request.path)
            if route is None:
                return self._reply((404, TEXT, b"404: Not Found\n", False))
            if request.method not in route.methods:
                response = self._reply((405, TEXT, b"405: Method Not Allowed\n", False))
                response.headers[hdrs.ALLOW] = route.allow
                return response
            body = b""
            if route.body:
                limit = self.limits.max_request_bytes
                declared = request.content_length
                if declared is not None and declared > limit:
                    # Refused as it is, without waiting for the in-flight budget first.
                    return refusal(413, f"body larger than the {limit} byte limit: {declared} bytes declared")
                if declared is None or declared > SMALL_BODY:
                    # A large body (or one of unknown length, counted at the limit) must fit the
                    # in-flight budget before more of it is read: it waits for its turn.
                    need = limit if declared is None else declared
                    why = await self._reserve(conn, need, wait_seconds(request.query.get("timeout")))
                    if why == GONE:
                        # The connection closed while it waited: nobody reads an answer.
                        raise ConnectionResetError("closed while waiting for the in-flight budget")
                    if why is not None:
                        self._busy(why)
                        response = refusal(503, f"{why}: try again")
                        response.headers[hdrs.RETRY_AFTER] = "1"
                        return response
                    reserved = need
                content = request.content
                if content.is_eof() and hdrs.EXPECT not in request.headers:
                    # Most bodies arrive with their headers: taken as they are, no copy, no wait
                    # (a declared length is the body's length; llhttp has counted it).
                    body = content.read_nowait()
                    if len(body) > limit:
                        return refusal(413, f"body larger than the {limit} byte limit: {len(body)} bytes")
                else:
                    refused = await self._before_body(request, limit)
                    if refused is not None:
                        return refused
                    try:
                        self.on_body_wait(1)
                        try:
                            async with asyncio.timeout(self.limits.body_seconds):
                                body = await _read_body(content, limit)
                        finally:
                            self.on_body_wait(-1)
                    except web.HTTPRequestEntityTooLarge:
                        return refusal(413, f"body larger than the {limit} byte limit")
                    except TimeoutError:
                        # A client trickling its body must not hold a handler: 408, and the connection closes.
                        seconds = self.limits.body_seconds
                        return refusal(408, f"request body not complete within {seconds:g} s")
            try:
                if len(body) > SMALL_BODY:
                    answer = await self._judge(route.handler, request.content_type, body)
                else:
                    answer = route.handler(request.content_type, body)
            except Exception:  # the handlers catch their own; this is the transport's last line
                log.exception("internal error answering %s", request.path)
                answer = (500, TEXT, b"internal error\n", True)
            return self._reply(answer, close=len(body) > CLOSE_AFTER)
        finally:
            conn.busy = False
            if reserved:
                self._release(reserved)

    async def _reserve(self, conn: Connection, need: int, seconds: float) -> str | None:
        """Ours: `need` bytes of the in-flight budget for a large request (None once they are
        reserved): at once if nobody waits before it and they fit, else once every request
        queued before it has had its turn and they fit. Else why not: GONE if its connection
        closed meanwhile, or what a 503 says (`seconds` passed; max_waiting already wait).

        Strictly first come, first served, so a large request is never passed over for smaller
        ones forever. `need` is at most maxRequestBytes, which the budget holds: with nothing in
        flight the head of the queue always fits, so the queue always moves. While a request
        waits, the rest of its body stays with the client (see WAIT_HOLD)."""
        if not self._queue and self.inflight + need <= self.budget:
            self.inflight += need
            return None
        if len(self._queue) >= self.max_waiting:
            # Only a flood gets here (25 large requests already waiting on one replica, at the
            # defaults): the memory waiting requests hold stays bounded (WAIT_HOLD).
            return f"{len(self._queue)} large requests wait for the in-flight budget ({self.budget} bytes)"
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (need, turn)
        self._queue.append(entry)
        conn.waiting = turn
        self.on_body_wait(1)  # its body is still to come: counted in the in-flight gauge
        try:
            await asyncio.wait((turn,), timeout=seconds)
        except BaseException:  # cancelled (shutdown): what it was granted goes back
            if self._settle(entry, conn):
                self._release(need)
            raise
        finally:
            self.on_body_wait(-1)
        if self._settle(entry, conn):
            return None
        if turn.done() and not turn.cancelled():
            return GONE
        return f"waited {seconds:g} s for the in-flight budget ({self.budget} bytes)"

    def _settle(self, entry: tuple[int, asyncio.Future[bool]], conn: Connection) -> bool:
        """A wait is over: whether it was granted. Not granted, it leaves the queue (its turn
        cancelled if still pending), which may let the next ones in."""
        conn.waiting = None
        turn = entry[1]
        if turn.done() and not turn.cancelled() and turn.result():
            return True
        if not turn.done():
            turn.cancel()
        with contextlib.suppress(ValueError):  # else already taken off the head by _grant
            self._queue.remove(entry)
        self._grant()
        return False

    def _release(self, size: int) -> None:
        """`size` bytes of the budget given back: the next in the queue may fit now."""
        self.inflight -= size
        if self._queue:
            self._grant()

    def _grant(self) -> None:
        """Turns given in order from the head of the queue, while they fit."""
        queue = self._queue
        while queue:
            need, turn = queue[0]
            if turn.done():  # its connection closed, or it stopped waiting: skipped
                queue.popleft()
                continue
            if self.inflight + need > self.budget:
                return
            queue.popleft()
            self.inflight += need
            turn.set_result(True)

    async def _judge(self, handler: Handler, content_type: str, body: bytes) -> Answer:
        """A large review: judged in the lane, one at a time, after two turns of the loop.

        Judging is synchronous (a 19 MiB review is up to about 1 s of parsing and walking), so while
        one runs nothing else does. Without the lane, three clients sending large reviews back to
        back put a queue of them ahead of a small review that arrived meanwhile; with it, the
        small review's bytes are read and judged in the turns the next large one yields (one turn
        for its data to be parsed into a request, one for its handler), so it waits for at most
        the one large review already running."""
        async with self._lane:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return handler(content_type, body)

    def _busy(self, why: str) -> None:
        """A refusal for load: counted, and logged at most once per BUSY_LOG_SECONDS."""
        self.refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._refused_logged >= BUSY_LOG_SECONDS:
            log.warning("refusing requests with 503: %s; %d refused since the last such line", why, self.refused)
            self.refused = 0
            self._refused_logged = now

    async def _before_body(self, request: web.BaseRequest, limit: int) -> web.StreamResponse | None:
        """Before the body is read: 413 from a declared length past the limit; else what an
        `Expect` asks for (a `100 Continue`, or 417 for an expectation we do not know)."""
        declared = request.content_length
        if declared is not None and declared > limit:
            return refusal(413, f"body larger than the {limit} byte limit: {declared} bytes declared")
        if hdrs.EXPECT in request.headers:
            return await self._continue(request, not request.content.is_eof())
        return None

    async def _continue(self, request: web.BaseRequest, waiting: bool) -> web.StreamResponse | None:
        """aiohttp's default expect handler (web_urldispatcher), which the router runs and the
        low-level server does not: 100 for HTTP/1.1 `100-continue` (when the body is still to
        come), 417 for other expectations. Called only once the declared length is known to fit,
        so no 100 precedes a refusal."""
        if request.version != (1, 1):
            return None  # HTTP/1.0 has no 100 (RFC 9110 §10.1.1): the body simply follows
        expect = request.headers.get(hdrs.EXPECT, "")
        if expect.lower() != "100-continue":
            return refusal(417, f"unknown expectation: {expect[:100]}")
        if not waiting:
            return None
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # as aiohttp: the answer proper has not started
        return None

    def _reply(self, answer: Answer, *, close: bool = False) -> web.Response:
        """The answer; `close` (or the handler's own say, or draining) ends the connection after it."""
        status, content_type, payload, handler_close = answer
        response = web.Response(status=status, body=payload, headers={hdrs.CONTENT_TYPE: content_type})
        if close or handler_close or self.closing:
            # Draining: answer, but close the connection, so the API server's next review opens
            # a new one (to a replica that is staying) instead of reusing ours as we stop.
            response.force_close()
        return response


async def _read_body(content: Any, limit: int) -> bytes:
    """The body, refused as it crosses `limit` whatever the chunking, as aiohttp's
    `BaseRequest.read` does, but not cached on the request: aiohttp's connection loop keeps its
    last request alive while the connection waits for the next one, and an idle keep-alive
    connection held the 4 MiB it was last sent until then (20 of them: +91 MiB)."""
    body = bytearray()
    while chunk := await content.readany():
        body += chunk
        if len(body) > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(body))
    return bytes(body)


def refusal(status: int, message: str) -> web.Response:
    """An answer instead of the request; the connection closes after it (aiohttp first reads
    what is left of the body for up to LINGER_SECONDS, so the client reads the answer)."""
    response = web.Response(status=status, body=dumps({"error": message}), headers={hdrs.CONTENT_TYPE: JSON})
    response.force_close()
    return response


def _peer(conn: web.RequestHandler) -> str:
    peer = conn.peername
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "a client")
