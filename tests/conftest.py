"""Shared fixtures: certificates from our own `certs` code, and the real server as a process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver import ApiServer
from tests.helpers import Server, stop_all
from tests.rawhttp import HOSTILE
from webhook import certs

# Modules whose tests bound time, latency or memory (another client's latency, a deadline, peak
# RSS): they run on their own after the rest (`make test`: `-m serial`), never beside another
# test's load on this 2-core machine; everything else runs on two xdist workers (`-m "not serial"`).
SERIAL = frozenset(
    {
        "test_cluster_view",
        "test_drain_pool",
        "test_http_bounds",
        "test_http_hostile",
        "test_http_slow_clients",
        "test_logs",
        "test_reliability",
        "test_real_apiserver_limits",
        "test_reload",
        "test_server",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SERIAL:
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    certs.write(certs.generate("gpu-policy", "gpu-policy", days=2, extra_hosts=("127.0.0.1",)), out)
    return out


@pytest.fixture(scope="session")
def start_server(cert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []
    tmp = tmp_path_factory.mktemp("servers")

    def start(
        config: dict[str, Any] | None = None,
        *args: str,
        certs_from: Path | None = None,
        service: tuple[str, str] = ("gpu-policy", "gpu-policy"),
        env: dict[str, str] | None = None,
    ) -> Server:
        server = Server(certs_from or cert_dir, config, tmp, list(args), service, env)
        started.append(server)
        return server

    yield start
    stop_all(started)


@pytest.fixture(scope="session")
def server(start_server: Callable[..., Server]) -> Server:
    """The default policy, cluster version 1.27 (so LD_LIBRARY_PATH is mutated), a default GPU model."""
    return start_server(
        {
            "clusterVersion": "v1.27.3-r0-CCE23.5.1",
            "acceleratorNodeSelector": {"default": "nvidia-t4"},
            "webhookNamespace": "gpu-policy",
        }
    )


@pytest.fixture
def api(server: Server) -> Iterator[ApiServer]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def hostile(start_server: Callable[..., Server]) -> Server:
    """A server with short deadlines for the hostile-client tests (one per test module)."""
    return start_server(HOSTILE)


@pytest.fixture(autouse=True)
def clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: the module's server logged nothing at ERROR and no traceback."""
    if "hostile" not in request.fixturenames:
        yield
        return
    server: Server = request.getfixturevalue("hostile")
    since = server.log.stat().st_size
    yield
    assert not server.log_problems(since)
    assert server.proc.poll() is None, "the server died"
