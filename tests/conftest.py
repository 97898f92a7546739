"""Shared fixtures: certificates from our own `certs` code, and the real server as a process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver import ApiServer
from webhook import certs

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    certs.write(certs.generate("gpu-policy", "gpu-policy", days=2, extra_hosts=("127.0.0.1",)), out)
    return out


class Server:
    """A `gpu-policy serve` process on a free loopback port."""

    def __init__(
        self, cert_dir: Path, config: dict[str, Any] | None, tmp: Path, args: list[str], service: tuple[str, str]
    ) -> None:
        self.cert_dir = cert_dir
        self.service = service
        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--cert-dir",
            str(cert_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *args,
        ]
        if config is not None:
            path = tmp / f"config-{self.port}.yaml"
            path.write_text(yaml.safe_dump(config))
            cmd += ["--config", str(path)]
        self.log = tmp / f"server-{self.port}.log"
        self._log = self.log.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            client = self.client()
            try:
                if client.get("/readyz").status == 200:
                    return
            except OSError:
                time.sleep(0.05)
            finally:
                client.close()
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.log.read_text()}")

    def client(self, **kw: Any) -> ApiServer:
        kw.setdefault("service", self.service[0])
        kw.setdefault("namespace", self.service[1])
        return ApiServer(self.port, str(self.cert_dir / "ca.crt"), **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # SIGTERM would drain for server.drainSeconds first
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def start_server(cert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []
    tmp = tmp_path_factory.mktemp("servers")

    def start(
        config: dict[str, Any] | None = None,
        *args: str,
        certs_from: Path | None = None,
        service: tuple[str, str] = ("gpu-policy", "gpu-policy"),
    ) -> Server:
        server = Server(certs_from or cert_dir, config, tmp, list(args), service)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


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
