"""`make bench --namespaces N`: the server with a cluster view of a stand-in API server (the tests'
node table and N namespaces), with and without the access rules that watch namespaces, head to
head and at 1,000 req/s: what the namespace watch and those rules cost a review.
"""

from __future__ import annotations

import http.client
import ssl
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from .load import LOAD_CPU, SERVER_CPU, free_port, h2load, server

# The access rules that read namespaces, as a platform turns them on; every bench review's namespace
# ("ml") is labelled to pass, and every tenth namespace carries the kinds annotation.
ACCESS = {
    "rules": {"gpu-namespace-allowed": "warn", "gpu-max-per-pod": "warn", "gpu-kinds-allowed": "warn"},
    "gpuNamespaceSelector": {"matchLabels": {"gpu.example.com/enabled": "true"}},
}


def view_servers(
    stack: ExitStack,
    tmp: Path,
    namespaces: int,
    policy_cmd: Any,
    env: dict[str, str],
    ca: Path,
    urls: dict[str, str],
    pids: dict[str, int],
) -> None:
    """Two servers with a cluster view of one stand-in API server (tests/kubeapi.py): `view`, and
    `view+ns`, which also watches `namespaces` namespaces for the access rules. Their ratio is what
    the namespace watch and those rules cost a review."""
    from tests.helpers import node_table
    from tests.kubeapi import KubeApi

    kube = KubeApi(tmp / "certs", bookmark_seconds=5).start()
    stack.callback(kube.close)
    items = []
    for i in range(namespaces):
        name = "ml" if i == 0 else f"team-{i:05d}"
        meta: dict[str, Any] = {"name": name, "labels": {"gpu.example.com/enabled": "true", "team": f"t{i % 200}"}}
        if i % 10 == 0:
            meta["annotations"] = {"gpu-policy.io/gpu-kinds": "whole,shared,time-sliced,mig,dra"}
        items.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    kube.put(*node_table(), *items)
    view_env = {**env, "KUBECONFIG": str(kube.kubeconfig(tmp / "kubeconfig")), "KUBERNETES_SERVICE_HOST": ""}
    base = yaml.safe_load((tmp / "config.yaml").read_text())
    for name, extra in (("view", {}), (f"view+{namespaces} ns", ACCESS)):
        config = tmp / f"config-{name.split()[0]}.yaml"
        config.write_text(yaml.safe_dump({**base, **extra}))
        port = free_port()
        proc = stack.enter_context(server(policy_cmd(port, config=config), port, SERVER_CPU, ca, view_env))
        _wait_synced(port, ca)
        urls[f"{name} /validate"] = f"https://127.0.0.1:{port}/validate"
        pids[f"{name} /validate"] = proc.pid


def view_latency(
    urls: dict[str, str], pids: dict[str, int], body: Path, rounds: int, seconds: float
) -> dict[str, dict[str, float]]:
    """p50/p99 at 1,000 req/s of the servers with a cluster view, in alternating rounds (medians):
    the latency a namespace watch and the access rules add to a review, if any."""
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in urls}
    for k in range(rounds):
        for n in list(urls) if k % 2 == 0 else list(urls)[::-1]:
            runs[n].append(h2load(urls[n], body, 1000, seconds, LOAD_CPU, pids[n]))
    return {
        n: {q: statistics.median(r[q] for r in rs) for q in ("p50_ms", "p99_ms", "cpu_ms_per_1000")}
        for n, rs in runs.items()
    }


def _wait_synced(port: int, ca: Path) -> None:
    """Until /readyz says the cluster view synced (namespaces included), at most 60 s."""
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        try:
            conn.request("GET", "/readyz?verbose")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        if "synced (" in text and "not synced" not in text and "pending" not in text:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the cluster view never synced on port {port}: {text}")
