"""Isolation never depends on the size of a review the API server can send, nor on a 503.

- server.maxRequestBytes is derived from the API server's own limits (webhook.config.defaults):
  a pod etcd stores is at most 1.5 MiB, each stored byte at most 6 in the review (Go's encoder
  writes `<` as `\\u003c`), and a `kubectl debug` UPDATE carries the pod twice: 2 x 6 x 1.5 MiB +
  1 MiB of envelope = 19 MiB. The largest such review is judged whole: its debug container gets
  isolation's void.
- A large body that does not fit server.maxInflightBytes waits its turn (first come, first
  served, for as long as its caller waits) instead of a 503; the budget always holds one body of
  maxRequestBytes; only a flood past Transport.max_waiting is refused.
- The chart's memory limit holds the server's peak judging the largest reviews: the `<` one, and
  the densest body the server takes (more JSON values per byte than any pod the API server sends).

The real server over TLS; each test states its bound (time, memory, order) and the server's log
stays clean. The in-process tests of the queue (Transport._reserve) bound nothing in time and run
beside the others; the rest are serial.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.helpers import ROOT, VOID, Server, container, pod
from tests.rawhttp import HOST, connect, post, read_until_closed, responses, review
from tests.test_http_slow_clients import rss_kb, timed_reviews
from webhook.config import from_mapping
from webhook.config.defaults import (
    DEFAULTS,
    ETCD_MAX_REQUEST_BYTES,
    JSON_ESCAPE,
    MAX_REQUEST_BYTES,
    REVIEW_ENVELOPE,
)
from webhook.serve.transport import GONE, WAIT_SECONDS, Connection, Transport, wait_seconds

MiB = 1024 * 1024
CONTAINERS = 4  # the big pod's containers, none asking for a GPU: isolation voids each
ENV = 8  # env entries per container, their values all `<`


def go_json(obj: Any) -> bytes:
    """`obj` as the API server's encoder writes it (Go's encoding/json): compact, with `<`, `>`
    and `&` escaped as six bytes (they occur only inside strings, so replacing them is exact)."""
    text = json.dumps(obj, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def stored_size(obj: Any) -> int:
    """An upper bound of what etcd stores for `obj`: its compact JSON, unescaped (the protobuf the
    API server stores carries the same strings byte for byte, and field numbers, not names)."""
    return len(json.dumps(obj, separators=(",", ":")))


def lt_pod(value: int, extra: int = 0) -> dict[str, Any]:
    """A pod whose containers' env values are all `<`, `value` of them each (`extra` more in the last)."""
    containers = []
    for i in range(CONTAINERS):
        env = [{"name": f"V{j}", "value": "<" * value} for j in range(ENV)]
        if i == CONTAINERS - 1:
            env[-1]["value"] += "<" * extra
        containers.append(container(f"c{i}", image="registry.example.com/app:1", env=env))
    p = pod(*containers, name="big")
    p["metadata"]["uid"] = "5c3d8f5e-8f0e-4d8c-9a59-3b8d3c0d6f10"
    return p


def debug_update(old: dict[str, Any]) -> dict[str, Any]:
    """The review of `kubectl debug` on `old`: an UPDATE of the ephemeralcontainers subresource,
    object (with the debug container) and oldObject (the stored pod)."""
    new = json.loads(json.dumps(old))
    new["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox:1.36", "targetContainerName": "c0"}]
    return ApiServer.build(new, operation="UPDATE", old=old, sub_resource="ephemeralcontainers")


def largest_storable_pod() -> dict[str, Any]:
    """The `<` pod at etcd's limit: its stored size (an upper bound) at most ETCD_MAX_REQUEST_BYTES."""
    base, per = stored_size(lt_pod(0)), CONTAINERS * ENV
    value = (ETCD_MAX_REQUEST_BYTES - base) // per
    p = lt_pod(value, ETCD_MAX_REQUEST_BYTES - base - value * per)
    assert stored_size(p) == ETCD_MAX_REQUEST_BYTES
    return p


def largest_review() -> bytes:
    """The largest body the server takes, made of what makes a review largest: the debug UPDATE
    of a `<` pod, its values grown until the escaped review is within 12 bytes of maxRequestBytes
    (each `<` more is 6 bytes in object and 6 in oldObject)."""

    def size(value: int, extra: int = 0) -> int:
        return len(go_json(debug_update(lt_pod(value, extra))))

    zero, per = size(0), size(1) - size(0)
    value = (MAX_REQUEST_BYTES - zero) // per
    extra = (MAX_REQUEST_BYTES - size(value)) // (2 * JSON_ESCAPE)
    body = go_json(debug_update(lt_pod(value, extra)))
    assert MAX_REQUEST_BYTES - 2 * JSON_ESCAPE < len(body) <= MAX_REQUEST_BYTES
    return body


def densest_review() -> bytes:
    """A review of exactly maxRequestBytes whose pod carries a field of `{"":0}` items: the most
    memory per byte JSON costs once parsed (about 36x: a dict and an int per 7 bytes), more values
    per byte than any pod the API server stores (each JSON value is at least 2 of its protobuf
    bytes). Only a client other than the API server sends it; the server still reads it whole."""
    r = ApiServer.build(pod(container("app", image="registry.example.com/app:1")))
    r["request"]["object"]["spec"]["x"] = "@@"
    head, tail = json.dumps(r, separators=(",", ":")).encode().split(b'"@@"')
    unit = b'{"":0},'
    room = MAX_REQUEST_BYTES - len(head) - len(tail) - len(b"[0]")
    body = head + b"[" + unit * (room // len(unit)) + b" " * (room % len(unit)) + b"0]" + tail
    assert len(body) == MAX_REQUEST_BYTES
    return body


def chart_memory_limit() -> int:
    """The chart's default resources.limits.memory, in bytes."""
    values = yaml.safe_load((ROOT / "charts" / "gpu-policy" / "values.yaml").read_text())
    text = str(values["resources"]["limits"]["memory"])
    match = re.fullmatch(r"(\d+)(Mi|Gi)", text)
    assert match, text
    return int(match[1]) * (MiB if match[2] == "Mi" else 1024 * MiB)


# ---------------------------------------------------------------- the bound, derived


def test_max_request_bytes_is_the_largest_review_of_a_storable_pod() -> None:
    """The default is the arithmetic of webhook.config.defaults (2 x 6 x 1.5 MiB + 1 MiB = 19 MiB),
    and the debug UPDATE of the largest storable `<` pod, escaped as the API server escapes it,
    fits it with the envelope's MiB to spare. The in-flight budget holds one such body."""
    assert ETCD_MAX_REQUEST_BYTES == 1536 * 1024
    assert JSON_ESCAPE == 6
    assert REVIEW_ENVELOPE == 1024 * 1024
    assert MAX_REQUEST_BYTES == 2 * 6 * ETCD_MAX_REQUEST_BYTES + MiB == 19 * MiB
    server = DEFAULTS["server"]
    assert server["maxRequestBytes"] == MAX_REQUEST_BYTES
    assert server["maxInflightBytes"] >= MAX_REQUEST_BYTES
    old = largest_storable_pod()
    body = go_json(debug_update(old))
    one = len(go_json(old))
    print(
        f"\nlargest storable `<` pod: stored <= {stored_size(old)} bytes, {one} as the API server writes it "
        f"({one / stored_size(old):.2f}x); its debug UPDATE {len(body)} bytes ({len(body) / MiB:.2f} MiB) of "
        f"maxRequestBytes {MAX_REQUEST_BYTES}"
    )
    assert 5.9 * ETCD_MAX_REQUEST_BYTES < one <= JSON_ESCAPE * ETCD_MAX_REQUEST_BYTES
    assert MAX_REQUEST_BYTES - REVIEW_ENVELOPE - 64 * 1024 < len(body) <= MAX_REQUEST_BYTES - REVIEW_ENVELOPE + 4096


# ---------------------------------------------------------------- the queue, in process


def limits(request_bytes: int, inflight_bytes: int) -> Any:
    """The shipped server settings with these two; the budget need not hold a body (the config
    refuses that, the transport does not rely on it)."""
    server = from_mapping({}).server
    return dataclasses.replace(server, max_request_bytes=request_bytes, max_inflight_bytes=inflight_bytes)


def conn() -> Connection:
    return cast(Connection, SimpleNamespace(waiting=None))


def test_the_queue_is_first_come_first_served_and_always_moves() -> None:
    """In process, no network (Transport._reserve): with 3 of a 4-byte budget taken, a request
    for 4 waits, and one for 1 that came after it waits behind it (no overtaking); freed, they go
    in order. A budget set below maxRequestBytes still admits one body of that size. A request
    whose connection closes leaves the queue (GONE), one past its deadline gets the 503 text,
    and one cancelled (shutdown) after its turn came gives its bytes back: nothing leaks."""

    async def scenario() -> None:
        t = Transport({}, limits(4, 4))
        assert t.budget == 4 and t.max_waiting == 1  # budget / WAIT_HOLD, at least one
        t.max_waiting = 2
        assert await t._reserve(conn(), 3, 1.0) is None and t.inflight == 3
        order: list[str] = []

        async def wait(name: str, need: int) -> None:
            why = await t._reserve(conn(), need, 5.0)
            order.append(name if why is None else f"{name}: {why}")

        big = asyncio.create_task(wait("big", 4))
        await asyncio.sleep(0)
        small = asyncio.create_task(wait("small", 1))  # would fit now, but comes after big
        await asyncio.sleep(0.05)
        assert order == [] and len(t._queue) == 2
        assert await t._reserve(conn(), 1, 1.0) == "2 large requests wait for the in-flight budget (4 bytes)"
        t._release(3)
        await asyncio.sleep(0.01)
        assert order == ["big"] and t.inflight == 4
        t._release(4)
        await small
        assert order == ["big", "small"] and t.inflight == 1
        t._release(1)
        await big

        # The budget holds a body of maxRequestBytes even when set lower.
        t = Transport({}, limits(8, 4))
        assert t.budget == 8 and await t._reserve(conn(), 8, 1.0) is None
        # Gone, timed out, cancelled after its turn: out of the queue, and the budget whole again.
        gone = conn()
        leaving = asyncio.create_task(t._reserve(gone, 8, 5.0))
        await asyncio.sleep(0.01)
        assert gone.waiting is not None
        gone.waiting.set_result(False)  # what Connection.connection_lost does
        assert await leaving == GONE and not t._queue
        assert await t._reserve(conn(), 8, 0.05) == "waited 0.05 s for the in-flight budget (8 bytes)"
        assert not t._queue
        cancelled = asyncio.create_task(t._reserve(conn(), 8, 5.0))
        await asyncio.sleep(0.01)
        t._release(8)  # its turn comes (8 reserved for it) ...
        cancelled.cancel()  # ... and the server stops before it runs
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert t.inflight == 0 and not t._queue

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_wait_seconds_is_the_api_servers_timeout_at_most_30() -> None:
    """The API server sends its timeout for the call as `?timeout=` in Go's duration format."""
    assert WAIT_SECONDS == 30.0
    assert [wait_seconds(t) for t in ("5s", "10s", "1.5s", "500ms", "1m0s", "45s")] == [5, 10, 1.5, 0.5, 30, 30]
    assert [wait_seconds(t) for t in (None, "", "5", "soon", "-1s")] == [30.0] * 5


# ---------------------------------------------------------------- the real server

LIMIT = MiB  # the queue's tests: maxRequestBytes 1 MiB, maxInflightBytes 3 MiB (3 bodies, 2 may wait)
QUEUED = {"clusterVersion": "1.30", "server": {"maxRequestBytes": LIMIT, "maxInflightBytes": 3 * LIMIT}}


@pytest.fixture(scope="module")
def queued(start_server: Callable[..., Server]) -> Server:
    """A server whose budget three 1 MiB bodies fill, and behind which two may wait."""
    return start_server(QUEUED)


def padded(size: int = LIMIT) -> bytes:
    """A valid review, padded with spaces to `size` bytes."""
    body = review()
    return body + b" " * (size - len(body))


class Holders:
    """Three connections that each declare a 1 MiB review and send half of it: the budget is
    taken until `finish(i)` sends the rest (or bodySeconds, 10 s, passes)."""

    def __init__(self, server: Server) -> None:
        self.body = padded()
        self.socks = []
        for _ in range(3):
            s = connect(server, timeout=10)
            s.sendall(post(self.body)[: len(post(b"", length=LIMIT)) + LIMIT // 2])
            self.socks.append(s)
        time.sleep(0.3)  # their handlers hold the budget

    def finish(self, i: int) -> int:
        self.socks[i].sendall(self.body[LIMIT // 2 :])
        [(status, _h, _b)] = responses(read_until_closed(self.socks[i], 5.0)[0])
        return status

    def close(self) -> None:
        for s in self.socks:
            s.close()


@pytest.fixture
def holders(queued: Server) -> Iterator[Holders]:
    held = Holders(queued)
    yield held
    held.close()
    time.sleep(0.3)  # the server sees them go before the next test
    assert queued.log_problems() == []


class Answer(threading.Thread):
    """Reads one connection's answer until the server closes it; `at` is when its first bytes
    came (when the connection closed is no order: two closes a fraction of a millisecond apart
    were seen in either order)."""

    def __init__(self, s: socket.socket, wait: float = 15.0) -> None:
        super().__init__(daemon=True)
        self.s, self.wait, self.at, self.raw = s, wait, 0.0, b""
        self.start()

    def run(self) -> None:
        self.s.settimeout(self.wait)
        try:
            first = self.s.recv(65536)
        except (TimeoutError, ConnectionError, ssl.SSLError):
            first = b""
        self.at = time.monotonic()
        rest, _closed = read_until_closed(self.s, self.wait) if first else (b"", True)
        self.raw = first + rest

    def status(self) -> int:
        self.join(self.wait + 1)
        [(status, _h, _b)] = responses(self.raw)
        return status


def sent(server: Server, data: bytes) -> socket.socket:
    s = connect(server, timeout=10)
    s.sendall(data)
    return s


@pytest.mark.serial
def test_a_large_body_past_the_budget_waits_its_turn_instead_of_503(queued: Server, holders: Holders) -> None:
    """The budget taken by three half-sent 1 MiB bodies: two whole 1 MiB reviews (B, then C)
    wait, never a 503, while small reviews are answered (each < 1 s); a third (D) finds two
    waiting already (max_waiting) and is the one 503. As the holders finish, B is answered
    before C (first come, first served), each within 2 s of the holder that made room for it;
    all 200. A declared length past maxRequestBytes is 413 at once, budget or not."""
    b = sent(queued, post(padded()))
    time.sleep(0.1)
    c = sent(queued, post(padded()))
    answers = {"B": Answer(b), "C": Answer(c)}
    time.sleep(0.3)
    assert max(timed_reviews(queued, 5, 0.0)) < 1.0
    started = time.monotonic()
    d = sent(queued, post(padded()))
    raw, _closed = read_until_closed(d, 2.0)
    d.close()
    [(status, headers, body)] = responses(raw)
    assert status == 503 and headers["retry-after"] == "1" and time.monotonic() - started < 1.0
    budget = f"({3 * LIMIT} bytes)"
    assert json.loads(body) == {"error": f"2 large requests wait for the in-flight budget {budget}: try again"}
    e = sent(queued, post(b"", length=LIMIT + 1))
    raw, _closed = read_until_closed(e, 2.0)
    e.close()
    assert responses(raw)[0][0] == 413
    assert all(a.is_alive() for a in answers.values())  # still waiting: no answer, no 503

    finished = [time.monotonic()]
    assert holders.finish(0) == 200
    assert answers["B"].status() == 200
    assert answers["C"].status() == 200  # after B's: it gives back the room C needs
    for i in (1, 2):
        assert holders.finish(i) == 200
    waited = answers["B"].at - finished[0], answers["C"].at - finished[0]
    print(f"\nqueued behind a full budget: B answered {waited[0]:.2f} s and C {waited[1]:.2f} s after room was made")
    assert answers["B"].at < answers["C"].at
    assert waited[0] < 2.0 and waited[1] < 2.0
    log = queued.log.read_text()
    assert "refusing requests with 503: 2 large requests wait for the in-flight budget" in log


@pytest.mark.serial
def test_a_waiting_request_whose_client_leaves_frees_its_place(queued: Server, holders: Holders) -> None:
    """B and C (headers only) wait behind the full budget; B's client closes its connection, as
    the API server does when its timeout passes: within 0.5 s B is out of the queue, so D waits
    in its place (no 503), and C and D are served in turn as room is made. No ERROR logged."""
    b = sent(queued, post(b"", length=LIMIT))
    time.sleep(0.1)
    c = sent(queued, post(padded()))
    time.sleep(0.2)
    b.close()
    time.sleep(0.5)
    d = sent(queued, post(padded()))
    answers = {"C": Answer(c), "D": Answer(d)}
    time.sleep(1.0)
    assert all(a.is_alive() for a in answers.values())  # D waits: B's place was freed
    # One holder's room at a time, so the order shows: C (first in the queue) gets it and is
    # answered; D gets in only on C's returned room or the next holder's, after C's first bytes.
    assert holders.finish(0) == 200
    assert answers["C"].status() == 200
    for i in (1, 2):
        assert holders.finish(i) == 200
    assert answers["D"].status() == 200
    assert answers["C"].at <= answers["D"].at  # first come, first served


@pytest.mark.serial
def test_a_wait_ends_with_the_api_servers_timeout(queued: Server, holders: Holders) -> None:
    """A review sent with `?timeout=1s` (how the API server passes its timeoutSeconds) waits
    behind the full budget for 1 s, then is answered 503 with Retry-After: bound 0.9 to 2 s."""
    body = padded()
    head = (
        b"POST /validate?timeout=1s HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    started = time.monotonic()
    s = sent(queued, head + body)
    raw, _closed = read_until_closed(s, 5.0)
    took = time.monotonic() - started
    s.close()
    [(status, headers, text)] = responses(raw)
    print(f"\n?timeout=1s behind a full budget: 503 after {took:.2f} s")
    assert status == 503 and headers["retry-after"] == "1"
    assert json.loads(text) == {"error": f"waited 1 s for the in-flight budget ({3 * LIMIT} bytes): try again"}
    assert 0.9 < took < 2.0


@pytest.fixture
def fresh(start_server: Callable[..., Server]) -> Iterator[Server]:
    """A new server with the shipped limits (its peak RSS is this test's alone), warmed up."""
    server = start_server({"clusterVersion": "1.30"})
    api = server.client()
    try:
        for path in ("/mutate", "/validate"):
            assert api.post(path, review()).status == 200
    finally:
        api.close()
    time.sleep(0.3)
    yield server
    assert server.log_problems() == []
    server.stop()


@pytest.mark.serial
def test_the_largest_review_is_judged_whole_and_isolated(fresh: Server) -> None:
    """The largest body the server takes, 19 MiB, as the API server would send it: the debug
    UPDATE (object and oldObject) of a pod whose env values are all `<`, escaped. /mutate gives
    the debug container isolation's void (never a 413, never skipped); /validate answers. Bounds:
    each answered within 5 s (the chart's timeoutSeconds); the server's peak RSS grows by less
    than 5x the body and stays under half the chart's memory limit."""
    body = largest_review()
    before = rss_kb(fresh.proc.pid)
    api = fresh.client(timeout_seconds=30)
    took = []
    try:
        for path in ("/mutate", "/validate"):
            started = time.monotonic()
            raw = api.post(path, body)
            took.append(time.monotonic() - started)
            assert raw.status == 200, raw.body[:300]
            response = raw.json()["response"]
            assert response["allowed"] is True
            if path == "/mutate":
                ops = json.loads(base64.b64decode(response["patch"]))
                debug = [op for op in ops if op["path"].startswith("/spec/ephemeralContainers/0")]
                assert debug and VOID in [e for op in debug for e in _env_of(op)]
    finally:
        api.close()
    peak = rss_kb(fresh.proc.pid, "VmHWM") * 1024
    growth = peak - before * 1024
    limit = chart_memory_limit()
    print(
        f"\nlargest review ({len(body)} bytes, `<` env values, UPDATE with oldObject): mutate {took[0]:.2f} s, "
        f"validate {took[1]:.2f} s; peak RSS {peak / MiB:.0f} MiB (+{growth / MiB:.0f} MiB), "
        f"chart limit {limit / MiB:.0f} MiB"
    )
    assert max(took) < 5.0
    assert growth < 5 * MAX_REQUEST_BYTES
    assert peak < limit / 2


def _env_of(op: dict[str, Any]) -> list[Any]:
    """The env entries a JSONPatch op adds to a container: the op's value, or its value's env."""
    value = op.get("value")
    if isinstance(value, dict) and "env" in value:
        return list(value["env"])
    if isinstance(value, list):
        return value
    return [value]


@pytest.mark.serial
def test_the_densest_bodies_fit_the_chart_memory_limit(fresh: Server) -> None:
    """Three clients at once each send the densest body of maxRequestBytes to /validate and to
    /mutate (six in all, about 36x its size once parsed; the budget lets two in at a time, the
    lane judges one at a time). Bounds: all answered 200 within 30 s; the server's peak RSS stays
    under 85% of the chart's memory limit: a client on the network cannot get it OOM-killed."""
    body = densest_review()
    before = rss_kb(fresh.proc.pid)
    statuses: list[int] = []

    def client() -> None:
        api = fresh.client(timeout_seconds=30)
        try:
            for path in ("/validate", "/mutate"):
                statuses.append(api.post(path, body).status)
        finally:
            api.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    took = time.monotonic() - started
    peak = rss_kb(fresh.proc.pid, "VmHWM") * 1024
    limit = chart_memory_limit()
    print(
        f"\n6 densest bodies ({len(body)} bytes each, 3 clients) in {took:.1f} s: peak RSS {peak / MiB:.0f} MiB "
        f"(+{(peak - before * 1024) / MiB:.0f} MiB), chart limit {limit / MiB:.0f} MiB ({peak / limit:.0%})"
    )
    assert statuses == [200] * 6
    assert took < 30
    assert peak < 0.85 * limit
