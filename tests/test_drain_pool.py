"""Pooled keep-alive connections held idle across SIGTERM, used the way the API server's client pool
uses them (issue 33): a connection the server has not closed is taken and a review sent on it; every
such review must be answered. A connection the server closed first (its FIN or close_notify is
waiting) is dropped by the pool, as Go's transport does in its read loop. Bound: no review lost,
exit within drainSeconds + 1 s of the drain's end."""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Callable

from tests.helpers import Server
from tests.rawhttp import DEADLINES, connect, figure, post, read_until_closed, responses, review


def _server_closed(s: object) -> bool:
    readable, _, _ = select.select([s], [], [], 0)
    return bool(readable)


def test_pooled_connections_held_idle_across_sigterm_lose_no_review(start_server: Callable[..., Server]) -> None:
    drain = 1.0
    server = start_server({"clusterVersion": "1.30", "server": {"drainSeconds": drain, **DEADLINES, "idleSeconds": 30}})
    pool = [connect(server) for _ in range(24)]
    body = review()
    for s in pool:
        s.sendall(post(body))
        raw = b""
        while b"\r\n\r\n" not in raw or len(responses(raw)) < 1:
            raw += s.recv(65536)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    # One review every 50 ms on the next pooled connection, from the signal to past the drain's end.
    sent = answered = dropped_by_pool = 0
    lost = []
    for i, s in enumerate(pool):
        time.sleep(max(0.0, signalled + i * (drain + 0.4) / len(pool) - time.monotonic()))
        if _server_closed(s):
            dropped_by_pool += 1
            continue
        try:
            s.sendall(post(body))
        except OSError:
            dropped_by_pool += 1
            continue
        sent += 1
        raw, _closed = read_until_closed(s, 3.0)
        if raw and responses(raw)[0][0] == 200:
            answered += 1
        else:
            lost.append(round(time.monotonic() - signalled, 3))
    for s in pool:
        s.close()
    code = server.proc.wait(timeout=drain + 5)
    exited = time.monotonic() - signalled
    figure(
        f"pooled across SIGTERM: {sent} sent, {answered} answered, {dropped_by_pool} dropped by the pool; exit", exited
    )
    assert lost == [], f"reviews sent on live connections and never answered, at {lost} s"
    assert code == 0 and exited < drain + 1 + 1
    assert not server.log_problems()
