"""Shared test helpers: builders for pods and workloads, the shipped policy, and the real server.

Every test module imports from here (never from another test module). Builders state only
what a test is about; `POLICY` is the policy that ships, so tests test what users run.
"""

from __future__ import annotations

import copy
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from tests.apiserver import ApiServer
from webhook.config import default_policy
from webhook.policy import PodView, Policy, Violation, engine, group_of

POLICY = default_policy()
CORPUS = Path(__file__).resolve().parent / "corpus"
GPU = "nvidia.com/gpu"
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
AMD_NONE = {"name": "AMD_VISIBLE_DEVICES", "value": "none"}


def container(
    name: str = "main",
    *,
    gpu: Any = None,
    request: Any = None,
    env: list[dict[str, Any]] | None = None,
    privileged: bool | None = None,
    caps: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", **extra}
    resources: dict[str, Any] = {}
    if gpu is not None:
        resources["limits"] = {GPU: gpu}
    if request is not None:
        resources["requests"] = {GPU: request}
    if resources:
        c["resources"] = resources
    if env is not None:
        c["env"] = env
    sc: dict[str, Any] = {}
    if privileged is not None:
        sc["privileged"] = privileged
    if caps is not None:
        sc["capabilities"] = {"add": caps}
    if sc:
        c["securityContext"] = sc
    return c


def pod(*containers: dict[str, Any], name: str = "p", namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": list(containers) or [container()], **spec},
    }


def wrap(p: dict[str, Any], kind: str) -> dict[str, Any]:
    """The pod's metadata and spec as the template of a workload of `kind`."""
    template = {"metadata": {"labels": {"app": "x"}}, "spec": copy.deepcopy(p["spec"])}
    meta = {"name": "w", "namespace": p["metadata"].get("namespace", "ml")}
    selector = {"matchLabels": {"app": "x"}}
    if kind == "Pod":
        return copy.deepcopy(p)
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "template": template}
    if kind == "ReplicationController":
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": {"app": "x"}, "template": template},
        }
    if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        spec: dict[str, Any] = {"selector": selector, "template": template}
        if kind == "StatefulSet":
            spec["serviceName"] = "w"
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "Job":
        template["spec"].setdefault("restartPolicy", "Never")
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {"template": template}}
    if kind == "CronJob":
        template["spec"].setdefault("restartPolicy", "Never")
        return {
            "apiVersion": "batch/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
        }
    raise ValueError(kind)


SPEC_PATH = {
    "Pod": "spec",
    "PodTemplate": "template.spec",
    "ReplicationController": "spec.template.spec",
    "Deployment": "spec.template.spec",
    "ReplicaSet": "spec.template.spec",
    "StatefulSet": "spec.template.spec",
    "DaemonSet": "spec.template.spec",
    "Job": "spec.template.spec",
    "CronJob": "spec.jobTemplate.spec.template.spec",
}


# ---------------------------------------------------------------- node tables (the cluster view)


def node(
    name: str,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node as the API server returns it (only what the view reads, plus the usual status)."""
    alloc = {"cpu": "47", "memory": "183Gi", "pods": "110", **(allocatable or {})}
    spec: dict[str, Any] = {"providerID": f"gce://project/zone/{name}"}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(alloc), "allocatable": alloc},
    }


# The table: 4-GPU T4 nodes, and A30 nodes the GPU operator partitioned with the MIG
# "mixed" strategy (nvidia.com/gpu: 0 plus one resource per MIG profile), as nvidia-smi and
# GPU feature discovery label them; plus a CPU pool.
T4_LABELS = {
    "accelerator": "nvidia-t4",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "Tesla-T4",
    "nvidia.com/gpu.count": "4",
    "node.kubernetes.io/instance-type": "n1-standard-48",
}
A30_LABELS = {
    "accelerator": "nvidia-a30",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A30-MIG-1g.6gb",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-balanced",
}
A30_MIG = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.6gb": "2", "nvidia.com/mig-2g.12gb": "1"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node_table() -> list[dict[str, Any]]:
    return [
        *(node(f"gke-t4-pool-{i}", T4_LABELS, {GPU: "4"}, [GPU_TAINT]) for i in range(3)),
        *(node(f"a30-mig-{i}", A30_LABELS, A30_MIG, [GPU_TAINT]) for i in range(2)),
        *(node(f"cpu-{i}", {"pool": "cpu"}) for i in range(4)),
    ]


def with_nodes(nodes: list[dict[str, Any]], policy: Policy | None = None, **dra: Any) -> Policy:
    """`policy` (default: the shipped one) judging against a cluster of `nodes`. `namespaces`
    maps a name to its labels (pairs) or to NamespaceFacts (labels and the gpu-kinds annotation)."""
    from dataclasses import replace as replace_field

    from webhook.policy.nodes import view_of_nodes
    from webhook.policy.types import NamespaceFacts

    if dra.get("namespaces") is not None:
        dra["namespaces"] = {
            name: known if isinstance(known, NamespaceFacts) else NamespaceFacts(tuple(known), "")
            for name, known in dra["namespaces"].items()
        }
    return replace_field(policy or POLICY, cluster=view_of_nodes(nodes, **dra))


# ---------------------------------------------------------------- the policy core


def run(obj: dict[str, Any], policy: Policy | None = None, rule: str | None = None) -> list[Violation]:
    """Violations of `obj` (optionally of one rule only) under `policy` (default: the shipped one)."""
    policy = policy or POLICY
    found = engine.find_violations(obj, group_of(obj["apiVersion"]), obj["kind"], policy)
    assert found is not None
    return [v for v in found if rule is None or v.rule == rule]


def view(obj: dict[str, Any], policy: Policy | None = None) -> PodView:
    """The one pod view of a Pod or a built-in controller."""
    found = engine.pod_views(obj, group_of(obj["apiVersion"]), obj["kind"], policy or POLICY)
    assert found is not None and len(found) == 1
    return found[0]


def mutate(obj: dict[str, Any], policy: Policy) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """(patch, warnings, the Pod it makes) for a Pod, checking that mutating again changes nothing
    (reinvocationPolicy: IfNeeded sends our own output back to us)."""
    result = engine.mutate(view(obj, policy), policy)
    out = jsonpatch.apply_patch(copy.deepcopy(obj), result.ops) if result.ops else obj
    assert engine.mutate(view(out, policy), policy).ops == []  # idempotent
    return result.ops, result.warnings, out


def mutated(obj: dict[str, Any], policy: Policy | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The patch for a Pod and the Pod it makes (see `mutate`)."""
    ops, _warnings, out = mutate(obj, policy or POLICY)
    return ops, out


# ---------------------------------------------------------------- fuzzing: seeded, bounded random damage


def corpus() -> dict[str, dict[str, Any]]:
    """tests/corpus/*.yaml by file name: one manifest each, shaped after the projects' own examples."""
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(CORPUS.glob("*.yaml"))}


def base_objects() -> list[dict[str, Any]]:
    """What the fuzzer starts from: the corpus and the benchmark's pods."""
    from bench.reviews import pods

    return list(corpus().values()) + list(pods().values())


def junk(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 2 else 7)
    if choice == 7:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(3))]
    if choice == 8:
        return {rng.choice(["name", "value", "env", "limits", "nvidia.com/gpu", "x"]): junk(rng, depth + 1)}
    return [None, True, rng.randint(-5, 5), rng.random() * 3, "", "all", "nvidia.com/gpu"][choice]


def nodes(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += nodes(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += nodes(v, (*path, i))
    return out


def replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


# ---------------------------------------------------------------- the real server

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A `gpu-policy serve` process on a free loopback port."""

    def __init__(
        self,
        cert_dir: Path,
        config: dict[str, Any] | None,
        tmp: Path,
        args: list[str],
        service: tuple[str, str],
        env: dict[str, str] | None = None,
    ) -> None:
        self.cert_dir = cert_dir
        self.service = service
        self.port = free_port()
        self.metrics_port = free_port()
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
            "--metrics-port",
            str(self.metrics_port),
            *args,
        ]
        if config is not None:
            path = tmp / f"config-{self.port}.yaml"
            path.write_text(yaml.safe_dump(config))
            cmd += ["--config", str(path)]
        self._scraped = 0.0
        self.log = tmp / f"server-{self.port}.log"
        self._log = self.log.open("wb")
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=environ)
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

    def scrape(self) -> str:
        """The metrics port's /metrics as of now: the server renders it at most once a second
        (webhook.serve.server.Exposition), so this waits out what an earlier scrape may have cached."""
        wait = self._scraped + 1.05 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text: str = resp.read().decode()
        self._scraped = time.monotonic()
        return text

    def log_problems(self, since: int = 0) -> list[str]:
        """ERROR (or worse) lines and tracebacks the server logged after byte `since` of its log:
        a client's mistake must never be one."""
        time.sleep(0.2)  # the server's last lines reach the file
        text = self.log.read_bytes()[since:].decode(errors="replace")
        bad = (" ERROR ", " CRITICAL ", "Traceback", '"level": "ERROR"', '"level": "CRITICAL"')
        return [line for line in text.splitlines() if any(b in line for b in bad)]

    def client(self, **kw: Any) -> ApiServer:
        kw.setdefault("service", self.service[0])
        kw.setdefault("namespace", self.service[1])
        return ApiServer(self.port, str(self.cert_dir / "ca.crt"), **kw)

    def stop(self) -> int:
        stop_all([self])
        return self.proc.returncode


STOP_SECONDS = 10.0  # a server still running this long after SIGINT is killed


def stop_all(servers: list[Server]) -> None:
    """Stop every server at once: SIGINT to all (SIGTERM would drain for server.drainSeconds
    first), then one shared deadline. A server takes about 0.5 s to shut down; the session's 26
    serial-pass servers stopped one by one added 13 s to the last test's teardown."""
    running = [s for s in servers if s.proc.poll() is None]
    for s in running:
        s.proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_SECONDS
    for s in running:
        try:
            s.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
    for s in servers:
        s._log.close()
