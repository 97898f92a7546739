"""Under load and faults, bounded in count and time, loopback only. `make soak` runs the long versions
(SOAK_SECONDS); these are the fast ones `make test` runs.

- steady load at a fixed rate: zero errors, p99 stated, memory growth bounded;
- slow and hostile clients (idle, half-sent headers, trickled bodies): timed out by the server while
  other clients' latency stays bounded;
- a burst far beyond capacity: no 5xx, no crash, memory bounded;
- SIGTERM under load: every request accepted before the signal is answered, exit 0 in time;
- certificate rotation under load: no failed handshake across the swap.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.apiserver import ApiServer
from tests.helpers import Server, container, pod
from webhook import certs

SOAK = float(os.environ.get("SOAK_SECONDS", "0"))  # make soak: minutes instead of seconds
GPU_POD = pod(container("train", gpu=1))
FAST = {"clusterVersion": "1.30", "server": {"idleSeconds": 1.0, "bodySeconds": 1.0, "drainSeconds": 0.5}}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def p99(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(len(samples) * 0.99) - 1)]


def timed_reviews(server: Server, count: int, interval: float = 0.0) -> list[float]:
    client = server.client()
    out = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            assert client.validate(GPU_POD)["allowed"] is True
            out.append(time.perf_counter() - started)
            if interval:
                time.sleep(interval)
    finally:
        client.close()
    return out


def test_steady_load_no_errors_bounded_memory(start_server: Callable[..., Server]) -> None:
    server = start_server(FAST)
    timed_reviews(server, 200)  # warm up: imports, caches, allocator
    before = rss_kb(server.proc.pid)
    seconds = SOAK or 5.0
    rate = 200.0
    latencies = timed_reviews(server, int(seconds * rate), interval=1 / rate)
    growth = rss_kb(server.proc.pid) - before
    print(
        f"\nsteady {rate:.0f}/s for {seconds:.0f} s: p50 {statistics.median(latencies) * 1e3:.2f} ms, "
        f"p99 {p99(latencies) * 1e3:.2f} ms, RSS +{growth} KB"
    )
    assert growth < 8 * 1024, f"RSS grew {growth} KB"
    # Generous bounds: CI machines are shared; the figures above are what the closing note reports.
    assert p99(latencies) < 1.0


class Hostile:
    """Connections that misbehave: never send a request, stop half-way through the headers, or
    send headers and then a trickle of body."""

    def __init__(self, port: int, ca: str, count: int) -> None:
        self.socks: list[ssl.SSLSocket] = []
        context = ssl.create_default_context(cafile=ca)
        for i in range(count):
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s = context.wrap_socket(raw, server_hostname="gpu-policy.gpu-policy.svc")
            kind = i % 3
            if kind == 1:
                s.sendall(b"POST /validate HTTP/1.1\r\nHost: gpu-policy.gpu-policy.svc\r\nContent-Ty")
            elif kind == 2:
                s.sendall(
                    b"POST /validate HTTP/1.1\r\nHost: gpu-policy.gpu-policy.svc\r\n"
                    b'Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"apiVersion"'
                )
            self.socks.append(s)

    def closed_by_server(self, timeout: float) -> int:
        """How many of them the server closed (EOF, a reset, or a 408 then EOF) within `timeout`."""
        deadline = time.monotonic() + timeout
        closed = 0
        self.open_kinds: list[int] = []
        for i, s in enumerate(self.socks):
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                while s.recv(4096):
                    pass
                closed += 1
            except (ConnectionError, ssl.SSLError):
                closed += 1
            except TimeoutError:
                self.open_kinds.append(i % 3)
            finally:
                s.close()
        return closed


def test_slow_and_hostile_clients_are_timed_out_and_do_not_slow_others(
    start_server: Callable[..., Server], cert_dir: Path
) -> None:
    server = start_server(FAST)
    baseline = timed_reviews(server, 100)
    hostile = Hostile(server.port, str(cert_dir / "ca.crt"), 500)
    during = timed_reviews(server, 100)
    closed = hostile.closed_by_server(timeout=5.0)
    print(
        f"\n500 hostile connections: p99 {p99(baseline) * 1e3:.2f} ms before, {p99(during) * 1e3:.2f} ms during; "
        f"{closed}/500 closed by the server within idleSeconds/bodySeconds (1 s) + 4 s"
    )
    assert closed == 500, {k: hostile.open_kinds.count(k) for k in (0, 1, 2)}
    # The median is the stable figure on a shared machine; one scheduling hiccup must not fail CI.
    assert statistics.median(during) < max(0.05, 5 * statistics.median(baseline)), (baseline, during)
    assert server.proc.poll() is None
    assert timed_reviews(server, 10)


def test_burst_beyond_capacity(start_server: Callable[..., Server]) -> None:
    """64 threads with their own connections, as fast as they can: answers get slower, never wrong."""
    server = start_server(FAST)
    before = rss_kb(server.proc.pid)
    statuses: list[Any] = []
    errors: list[BaseException] = []

    def hammer() -> None:
        client = server.client()
        try:
            for _ in range(30 if not SOAK else 300):
                statuses.append(client.validate(GPU_POD)["allowed"])
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=hammer) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert len(statuses) == 64 * (30 if not SOAK else 300) and all(statuses)
    assert server.proc.poll() is None
    growth = rss_kb(server.proc.pid) - before
    print(f"\nburst: {len(statuses)} reviews from 64 connections, RSS +{growth} KB")
    assert growth < 32 * 1024


def test_sigterm_under_load_answers_everything_accepted(start_server: Callable[..., Server]) -> None:
    """Every review sent before SIGTERM, and during the drain that follows, is answered; later ones
    may be refused (the listener is closed), never cut off half-way while the server serves."""
    drain = 1.0
    server = start_server({**FAST, "server": {**FAST["server"], "drainSeconds": drain}})
    results: list[tuple[float, BaseException | None]] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            client = server.client()
            started = time.monotonic()
            try:
                assert client.validate(GPU_POD)["allowed"] is True
                results.append((started, None))
            except (OSError, ssl.SSLError) as exc:  # after the listener closed
                results.append((started, exc))
                return
            finally:
                client.close()

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    sent_at = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)  # not ready, still serving for `drain`, then stops
    code = server.proc.wait(timeout=30)
    took = time.monotonic() - sent_at
    stop.set()
    for t in threads:
        t.join(timeout=15)
    served_until = sent_at + drain - 0.2  # margin for the signal's delivery
    early = [exc for started, exc in results if started < served_until]
    late = [exc for started, exc in results if started >= served_until]
    print(
        f"\nSIGTERM under load: {len(early)} reviews sent before the end of the drain, all answered; "
        f"{len(late)} after it ({sum(e is not None for e in late)} refused); exit {code} after {took:.1f} s"
    )
    assert all(exc is None for exc in early), [e for e in early if e is not None][:3]
    assert len(early) > 100
    # The chart's grace period is drainSeconds + the runner's 15 s shutdown_timeout + a margin.
    assert code == 0 and took < drain + 15 + 2


def test_certificate_rotation_under_load(start_server: Callable[..., Server], tmp_path: Path) -> None:
    """The pair is swapped like a Secret volume (files replaced) while clients connect anew each
    time; no handshake fails, and clients trusting only the new CA get through after the swap."""
    old = tmp_path / "old"
    certs.write(certs.generate("gpu-policy", "gpu-policy", days=2, extra_hosts=("127.0.0.1",)), old)
    live = tmp_path / "live"
    shutil.copytree(old, live)
    server = start_server({**FAST, "server": {**FAST["server"], "certReloadSeconds": 0.2}}, certs_from=live)
    new = tmp_path / "new"
    certs.write(certs.generate("gpu-policy", "gpu-policy", days=2, extra_hosts=("127.0.0.1",)), new)
    bundle = tmp_path / "bundle.crt"  # the API server's caBundle holds both CAs during a rotation
    bundle.write_bytes((old / "ca.crt").read_bytes() + (new / "ca.crt").read_bytes())
    failures: list[BaseException] = []
    done = 0
    stop = threading.Event()

    def connect_anew() -> None:
        nonlocal done
        while not stop.is_set():
            api = ApiServer(server.port, str(bundle))
            try:
                assert api.validate(GPU_POD)["allowed"] is True
                done += 1
            except BaseException as exc:
                failures.append(exc)
            finally:
                api.close()

    threads = [threading.Thread(target=connect_anew) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    for name in ("tls.key", "tls.crt"):  # file by file, as a Secret update lands
        shutil.copy(new / name, live / name)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        only_new = ApiServer(server.port, str(new / "ca.crt"))
        try:
            only_new.validate(GPU_POD)
            break
        except ssl.SSLError:
            time.sleep(0.1)
        finally:
            only_new.close()
    else:
        raise AssertionError("the new certificate was never served")
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    print(f"\ncertificate rotation: {done} fresh handshakes across the swap, {len(failures)} failed")
    assert not failures, failures[:3]
    assert done > 20
