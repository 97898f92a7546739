"""clusterVersion: auto, against a stand-in API server that answers /version like a managed cluster.

The real `kubernetes` client reads a kubeconfig that points at a loopback HTTPS server serving
/version with a vendor gitVersion and a "19+" minor; the webhook must parse gitVersion and
apply the below-1.28 mutation.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.helpers import (
    ROOT,
    Server,
    container,
    pod,
)

VERSION = {"major": "1", "minor": "19+", "gitVersion": "v1.19.10-r0-CCE21.11.1.B006", "platform": "linux/amd64"}


@pytest.fixture
def fake_apiserver(cert_dir: Path, tmp_path: Path) -> Iterator[Path]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(VERSION if self.path.startswith("/version") else {}).encode()
            self.send_response(200 if self.path.startswith("/version") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert_dir / "tls.crt"), str(cert_dir / "tls.key"))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [
                    {
                        "name": "fake",
                        "cluster": {
                            "server": f"https://127.0.0.1:{httpd.server_address[1]}",
                            "certificate-authority": str(cert_dir / "ca.crt"),
                        },
                    }
                ],
                "users": [{"name": "fake", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            }
        )
    )
    yield kubeconfig
    httpd.shutdown()


def test_auto_reads_git_version_and_mutates_below_1_28(
    fake_apiserver: Path, cert_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(fake_apiserver))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    server = Server(cert_dir, {"clusterVersion": "auto"}, tmp_path, [], ("gpu-policy", "gpu-policy"))
    try:
        assert "cluster version 1.19 (gitVersion v1.19.10-r0-CCE21.11.1.B006)" in server.log.read_text()
        _, patched = server.client().mutate(pod(container("t", gpu="1")))
        assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in patched["spec"]["containers"][0][
            "env"
        ]
    finally:
        server.stop()


def test_auto_without_a_cluster_is_unknown(tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    code = "from webhook.cluster.version import detect_version; print(detect_version(timeout=2))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert r.stdout.strip() == "None"
    assert "version-gated mutations are skipped" in r.stderr


def test_auto_follows_a_control_plane_upgrade_without_a_restart(
    fake_apiserver: Path, cert_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in API server is upgraded from a CCE 1.19 to an EKS 1.28 gitVersion while the webhook
    runs: LD_LIBRARY_PATH stops being injected within server.clusterVersionSeconds; a /version that
    cannot be read meanwhile keeps the last known version."""
    import time

    monkeypatch.setenv("KUBECONFIG", str(fake_apiserver))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = {"clusterVersion": "auto", "server": {"clusterVersionSeconds": 1}}
    server = Server(cert_dir, config, tmp_path, [], ("gpu-policy", "gpu-policy"))

    def injects() -> bool:
        client = server.client()
        try:
            _, patched = client.mutate(pod(container("t", gpu="1")))
        finally:
            client.close()
        return any(e["name"] == "LD_LIBRARY_PATH" for e in patched["spec"]["containers"][0].get("env", []))

    original = dict(VERSION)
    try:
        assert injects()
        VERSION["gitVersion"] = "garbage"  # unparsable: the last known version stays
        time.sleep(2.5)
        assert injects()
        VERSION.update({"minor": "28+", "gitVersion": "v1.28.15-eks-7f9249a"})
        deadline = time.monotonic() + 10
        while injects() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not injects()
        assert "cluster version changed: 1.19 -> 1.28" in server.log.read_text()
    finally:
        VERSION.clear()
        VERSION.update(original)
        server.stop()
