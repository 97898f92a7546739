"""Issue 33: the work, memory and connections a hostile client can cause are bounded by what it sends.

Each test runs the real server process over real TLS and prints its figure: peak RSS growth from
/proc/PID/status, a bystander's latency while attackers send the largest reviews the server takes,
and what the caps answer. The shipped limits (maxRequestBytes 19 MiB, the budgets of
webhook.policy.objects) are what is tested unless a test says otherwise. The in-flight budget's
queue (a large body waits its turn, never a 503) is tests/test_review_size.py's.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.apiserver import ApiServer
from tests.helpers import Server, container, pod
from tests.rawhttp import connect, read_until_closed, responses
from tests.test_http_slow_clients import rss_kb, timed_reviews
from tests.test_review_size import chart_memory_limit
from webhook.config.defaults import MAX_REQUEST_BYTES
from webhook.policy.objects import MAX_CONTAINERS


def largest(make: Callable[[int], dict[str, Any]], limit: int = MAX_REQUEST_BYTES) -> bytes:
    """The review of make(n) for the largest n whose body fits `limit` (what the server still reads).
    A body grows almost linearly in n (an item's bytes grow with the digits of its index): steps by
    the measured bytes per item, then interpolation within the bracket, about 7 bodies built of
    19 MiB instead of bisection's 25."""

    def body(n: int) -> bytes:
        return json.dumps(ApiServer.build(make(n))).encode()

    low, s_low = 1, len(body(1))
    high, s_high = 1001, len(body(1001))
    while s_high <= limit:
        per = (s_high - s_low) / (high - low)
        low, s_low = high, s_high
        high = low + max(1, int((limit - s_low) / per) + 1)
        s_high = len(body(high))
    while high - low > 1:  # size(low) <= limit < size(high)
        per = (s_high - s_low) / (high - low)
        mid = min(high - 1, max(low + 1, low + int((limit - s_low) / per)))
        s_mid = len(body(mid))
        low, s_low, high, s_high = (mid, s_mid, high, s_high) if s_mid <= limit else (low, s_low, mid, s_mid)
    return body(low)


def many_host_paths(n: int) -> dict[str, Any]:
    """Past MAX_VOLUMES (tens of thousands of hostPaths cost 230 ms of three hostPath rules
    before that budget): parsed whole, then refused as too large to judge."""
    p = pod(container("app", image="registry.example.com/app:1"))
    p["spec"]["volumes"] = [{"name": f"v{i}", "hostPath": {"path": f"/data/d{i}"}} for i in range(n)]
    return p


def many_env_from(n: int) -> dict[str, Any]:
    """The costliest shape per byte that the budgets still judge whole: one CPU container with
    tens of thousands of envFrom items (each prefix read for NVIDIA_IMEX_CHANNELS by isolation)."""
    c = container("app", image="registry.example.com/app:1")
    c["envFrom"] = [{"prefix": "A_", "configMapRef": {"name": f"cm{i}"}} for i in range(n)]
    return pod(c)


def privileged_gpu_containers(n: int) -> dict[str, Any]:
    """Past the container budget: parsed whole, then refused as too large to judge."""
    return pod(*(container(f"c{i}", gpu="1", privileged=True) for i in range(n)))


@pytest.fixture(scope="module")
def shipped(start_server: Callable[..., Server]) -> Server:
    """The shipped server limits."""
    return start_server({"clusterVersion": "1.30"})


def test_too_large_to_judge_is_denied_and_never_partly_patched(shipped: Server) -> None:
    """Past MAX_CONTAINERS: /validate denies naming the field and the budget; /mutate answers the
    same error and no patch (its failurePolicy Ignore then leaves the pod to /validate's denial)."""
    api = shipped.client()
    try:
        huge = ApiServer.build(pod(*(container(f"c{i}") for i in range(MAX_CONTAINERS + 1))))
        for path in ("/validate", "/mutate"):
            answer = api.review(path, huge)
            assert answer["allowed"] is False and "patch" not in answer
            assert answer["status"]["message"] == (
                f"gpu-policy cannot judge this Pod: spec.containers holds {MAX_CONTAINERS + 1} containers: "
                f"too large to judge (at most {MAX_CONTAINERS})"
            )
    finally:
        api.close()
    assert shipped.log_problems() == []


def test_a_bystander_is_answered_while_three_clients_send_the_largest_reviews(shipped: Server) -> None:
    """Three connections send the largest reviews the server reads (19 MiB each: hundreds of
    thousands of envFrom items, judged whole; privileged GPU containers and hostPaths past the
    budgets) back to back; a fourth sends small reviews. Bounds: the bystander's p99 < 2.5 s
    (it waits for the large review being judged, and at most one more: about 1 s each at 19 MiB,
    within the chart's 5 s timeoutSeconds); the server's peak RSS stays under 90% of the chart's
    memory limit; every large review answered 200 (the one in-flight budget's queue: no 503)."""
    bodies = [largest(many_env_from), largest(privileged_gpu_containers), largest(many_host_paths)]
    assert all(MAX_REQUEST_BYTES - 2048 < len(b) <= MAX_REQUEST_BYTES for b in bodies)
    before = rss_kb(shipped.proc.pid)
    stop = threading.Event()
    answered: list[int] = []
    costs: list[float] = []

    def attacker(index: int) -> None:
        api = shipped.client(timeout_seconds=30)
        try:
            sent = 0
            while not stop.is_set() and sent < 60:  # bounded: 60 reviews each at most
                started = time.monotonic()
                raw = api.post("/validate" if sent % 2 else "/mutate", bodies[(index + sent) % len(bodies)])
                costs.append(time.monotonic() - started)
                answered.append(raw.status)
                sent += 1
        finally:
            api.close()

    threads = [threading.Thread(target=attacker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the attackers are at it
    try:
        took = timed_reviews(shipped, 16, 0.05)  # each waits for about one large judge: 16 keep this near 20 s
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    peak = rss_kb(shipped.proc.pid, "VmHWM") * 1024
    growth = peak / 1024 - before
    took.sort()
    p50, p99 = statistics.median(took), took[int(len(took) * 0.99) - 1]
    print(
        f"\nbystander beside 3 clients sending 19 MiB reviews ({len(answered)} sent, each "
        f"{statistics.median(costs) * 1000:.0f} ms median): p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {took[-1] * 1000:.0f} ms; peak RSS {peak / 2**20:.0f} MiB (+{growth / 1024:.0f} MiB), "
        f"chart limit {chart_memory_limit() / 2**20:.0f} MiB"
    )
    assert set(answered) == {200} and len(answered) >= 6
    assert p99 < 2.5
    assert peak < 0.9 * chart_memory_limit()
    assert shipped.log_problems() == []


def test_connections_past_the_cap_get_503_before_anything_is_read(start_server: Callable[..., Server]) -> None:
    """maxConnections 40: forty open connections are served; the 41st is answered 503 with
    Retry-After at once and closed; once some close, new ones are served. The log: one WARNING
    for the flood, no ERROR."""
    server = start_server({"clusterVersion": "1.30", "server": {"maxConnections": 40}})
    held = [server.client() for _ in range(40)]
    try:
        for api in held:
            assert api.post("/validate", json.dumps(ApiServer.build(pod(container("a")))).encode()).status == 200
        refused = []
        for _ in range(20):
            started = time.monotonic()
            s = connect(server)
            raw, closed = read_until_closed(s, 2.0)
            refused.append(time.monotonic() - started)
            s.close()
            [(status, headers, body)] = responses(raw)
            assert status == 503 and headers["retry-after"] == "1" and closed
            assert json.loads(body) == {"error": "too many connections (server.maxConnections): try again"}
        for api in held[:5]:
            api.close()
        time.sleep(0.2)
        assert timed_reviews(server, 3, 0.0)
    finally:
        for api in held:
            api.close()
    print(f"\npast maxConnections: 503 and closed within {max(refused) * 1000:.0f} ms")
    log = server.log.read_text()
    assert log.count("refusing requests with 503: 40 connections open (server.maxConnections 40)") == 1
    assert server.log_problems() == []


def settled_rss(pid: int, seconds: float = 3.0) -> int:
    """RSS once it stops moving (five samples 0.1 s apart within 64 KiB, for at most `seconds`):
    the allocator hands freed 4 MiB bodies back to the OS on its own schedule, and one sample taken
    while it did measured that, not what the connections hold (51 KiB each, once, on a CI run)."""
    samples = [rss_kb(pid)]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
        samples.append(rss_kb(pid))
        last = samples[-5:]
        if len(last) == 5 and max(last) - min(last) < 64:
            break
    return min(samples[-5:])


def test_idle_connections_after_large_reviews_hold_little(shipped: Server) -> None:
    """Twenty connections each send one 4 MiB review (any body past CLOSE_AFTER does; 4 MiB of
    the 19 MiB limit keeps this quick), then would sit idle (the API server's pool). Each answer
    closes its connection, so nothing is held for them: RSS once they are answered, less RSS once
    the client side is closed too, is under 32 KiB each, where each held its last 4 MiB (aiohttp
    kept the request), then 193 KiB (the TLS read buffer). Small reviews keep their connection."""
    body = largest(many_host_paths, 4 * 1024 * 1024)

    def held_by_each() -> float:
        clients = [shipped.client(timeout_seconds=30) for _ in range(20)]
        try:
            for api in clients:
                raw = api.post("/validate", body)
                assert raw.status == 200 and raw.headers["connection"].lower() == "close"
            idle = settled_rss(shipped.proc.pid)
        finally:
            for api in clients:
                api.close()
        return (idle - settled_rss(shipped.proc.pid)) / 20

    # The least of two tries: the allocator trimming freed bodies between the two readings only
    # ever adds to the difference (seen once at 50 KiB on a machine busy with other tests).
    held = held_by_each()
    if held >= 32:
        held = min(held, held_by_each())
    small = shipped.client()
    try:
        raw = small.post("/validate", json.dumps(ApiServer.build(pod(container("a")))).encode())
        assert raw.status == 200 and raw.headers.get("connection", "keep-alive").lower() != "close"
    finally:
        small.close()
    print(f"\n20 connections after a 4 MiB review each: closed by the server, {held:.0f} KiB held by each")
    assert held < 32
    assert shipped.log_problems() == []


def test_a_listener_flood_of_silent_sockets_is_bounded(start_server: Callable[..., Server]) -> None:
    """500 TCP connections that never start TLS, against maxConnections 100: a review on a new
    connection is answered within 1 s meanwhile, and all are closed after headerSeconds."""
    server = start_server({"clusterVersion": "1.30", "server": {"maxConnections": 100, "headerSeconds": 1.0}})
    silent = []
    try:
        for _ in range(500):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            silent.append(s)
        took = timed_reviews(server, 3, 0.0)
        assert max(took) < 1.0
        time.sleep(2.5)
        closed = 0
        for s in silent:
            s.settimeout(0.01)
            try:
                closed += s.recv(1) == b""
            except ConnectionError:  # aborted: a reset is closed too
                closed += 1
            except TimeoutError:
                pass
    finally:
        for s in silent:
            s.close()
    print(f"\n500 silent sockets: a review meanwhile in {max(took) * 1000:.0f} ms; {closed} closed after headerSeconds")
    assert closed == 500
    assert server.log_problems() == []
