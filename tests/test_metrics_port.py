"""The plain-HTTP metrics port: one scrape sees the whole pod, whatever --workers is."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers import Server, container, pod


def scrape(server: Server) -> dict[str, float]:
    text = server.scrape()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def reviews(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("gpu_policy_reviews_total{"))


def test_one_worker_serves_plain_metrics(start_server: Callable[..., Server], cert_dir: Path) -> None:
    server = start_server({"clusterVersion": "1.30"})
    client = server.client()
    try:
        for _ in range(5):
            client.validate(pod(container(gpu=1)))
    finally:
        client.close()
    m = scrape(server)
    assert reviews(m) == 5
    assert m["gpu_policy_in_flight_reviews"] == 0
    assert m["gpu_policy_config_generation"] == 1
    assert m["gpu_policy_certificate_not_after_seconds"] > time.time() + 3600  # the test CA: 2 days
    info = [k for k in m if k.startswith("gpu_policy_build_info{")]
    assert len(info) == 1 and 'version="' in info[0] and 'python="3.' in info[0]


def test_workers_are_summed_in_one_scrape(start_server: Callable[..., Server]) -> None:
    server = start_server({"clusterVersion": "1.30"}, "--workers", "2")
    sent = 40
    for _ in range(sent):  # a new connection each: the kernel spreads them over both workers
        client = server.client()
        try:
            client.validate(pod(container(gpu=1)))
        finally:
            client.close()
    deadline = time.monotonic() + 5
    while reviews(scrape(server)) < sent and time.monotonic() < deadline:
        time.sleep(0.2)  # snapshots are written every second
    m = scrape(server)
    assert reviews(m) == sent, m
    # A later scrape never goes backwards (no counter "resets" from landing on another worker).
    assert reviews(scrape(server)) == sent
