"""The cluster view against a stand-in API server (tests/kubeapi.py), through the official client.

In-process: the watcher's protocol (pages, bookmarks, resume, 410, drops, a restart) and what
it keeps. Through the real server process: the issue's node table judged at admission time,
DRA claims resolved, a hung watch that must not slow admission, and a killed API server.
"""

from __future__ import annotations

import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chart import find, render
from tests.helpers import (
    GPU,
    GPU_TAINT,
    T4_LABELS,
    Server,
    container,
    node,
    node_table,
    pod,
)
from tests.kubeapi import KubeApi
from webhook.cluster.client import load_client
from webhook.cluster.reflector import Timing
from webhook.cluster.view import ClusterWatcher
from webhook.policy.types import ClusterView

FAST = Timing(page=2, watch_seconds=(30, 30), read_seconds=10, connect_seconds=2, backoff=(0.1, 0.5), min_interval=0.01)
TOLERATE = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture
def kube(cert_dir: Path) -> Iterator[KubeApi]:
    api = KubeApi(cert_dir, bookmark_seconds=0.2).start()
    yield api
    api.close()


def wait_for(what: Callable[[], Any], timeout: float = 10.0, why: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out: {why}")


class Views:
    """Collects what a ClusterWatcher publishes."""

    def __init__(self) -> None:
        self.seen: list[ClusterView | None] = []
        self.lock = threading.Lock()

    def __call__(self, view: ClusterView | None) -> None:
        with self.lock:
            self.seen.append(view)

    @property
    def last(self) -> ClusterView | None:
        with self.lock:
            return self.seen[-1] if self.seen else None

    def names(self) -> set[str]:
        view = self.last
        return set() if view is None else {n for g in view.groups for n in g.names}


def watcher(kube: KubeApi, tmp_path: Path) -> tuple[ClusterWatcher, Views]:
    import os

    os.environ.pop("KUBERNETES_SERVICE_HOST", None)
    os.environ["KUBECONFIG"] = str(kube.kubeconfig(tmp_path / "kubeconfig"))
    loaded = load_client()
    assert loaded is not None and loaded[1] == "kubeconfig"
    views = Views()
    w = ClusterWatcher(loaded[0], views, FAST)
    w.start()
    return w, views


def test_lists_in_pages_then_watches_with_bookmarks_and_keeps_only_what_is_read(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table())
    w, views = watcher(kube, tmp_path)
    try:
        wait_for(lambda: len(views.names()) == 9, why="the first list")
        lists = [q for m, p, q in kube.requests if p == "/api/v1/nodes" and "watch" not in q]
        assert [q.get("limit") for q in lists] == ["2"] * 5 and sum("continue" in q for q in lists) == 4
        view = views.last
        assert view is not None and view.nodes == 9 and len(view.groups) == 3  # T4, A30, CPU pools
        t4 = next(g for g in view.groups if g.labels.get("accelerator") == "nvidia-t4")
        assert t4.resources == {GPU: 4} and "kubernetes.io/hostname" not in t4.labels  # equal to the name
        assert t4.taints[0].key == GPU
        # DRA is served (resource.k8s.io/v1): its three resources are watched too.
        wait_for(lambda: len(w.dra) == 3, why="DRA reflectors")
        wait_for(lambda: views.last is not None and views.last.claims == {}, why="claims synced")
        wait_for(lambda: views.last is not None and views.last.claim_templates == {}, why="templates synced")
        assert views.last is not None and views.last.dra_extended == frozenset()
        # An update arrives through the watch; a heartbeat-like change of unread fields publishes nothing.
        time.sleep(0.3)
        published = len(views.seen)
        kube.put(node("gke-t4-pool-0", T4_LABELS, {GPU: "4"}, [GPU_TAINT]) | {"status": {"allocatable": {GPU: "4"}}})
        time.sleep(0.3)
        assert len(views.seen) == published
        kube.put(node("gke-t4-pool-9", T4_LABELS, {GPU: "8"}))
        wait_for(lambda: "gke-t4-pool-9" in views.names(), why="an added node")
        kube.delete("nodes", "cpu-0")
        wait_for(lambda: "cpu-0" not in views.names(), why="a deleted node")
        watches = [q for m, p, q in kube.requests if p == "/api/v1/nodes" and q.get("watch") == "True"]
        assert watches[0]["allowWatchBookmarks"] == "True" and watches[0]["resourceVersion"]
    finally:
        w.close()


def test_a_dropped_watch_resumes_from_the_last_version_and_410_lists_again(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table())
    w, views = watcher(kube, tmp_path)
    try:
        wait_for(lambda: len(views.names()) == 9, why="the first list")
        wait_for(lambda: kube.watches("nodes") == 1, why="a watch")
        time.sleep(0.5)  # bookmarks advance the version the watch would resume from
        lists_before = sum(1 for m, p, q in kube.requests if p == "/api/v1/nodes" and "watch" not in q)
        last_rv = kube.rv
        kube.drop_watches()
        kube.put(node("late-1", T4_LABELS, {GPU: "4"}))  # while no watch is open
        wait_for(lambda: "late-1" in views.names(), why="an update made while the watch was down")
        lists_after = sum(1 for m, p, q in kube.requests if p == "/api/v1/nodes" and "watch" not in q)
        assert lists_after == lists_before, "a dropped watch resumes; it does not list again"
        resumed = [q for m, p, q in kube.requests if p == "/api/v1/nodes" and q.get("watch") == "True"][-1]
        assert int(resumed["resourceVersion"]) >= last_rv  # from a bookmark or the last event, not 0
        # History compacted while the watch is down: the resume gets 410 and a fresh list follows.
        kube.compact()
        kube.drop_watches()
        kube.put(node("late-2", T4_LABELS, {GPU: "4"}))
        wait_for(lambda: "late-2" in views.names(), why="a re-list after 410 Gone")
        assert sum(1 for m, p, q in kube.requests if p == "/api/v1/nodes" and "watch" not in q) > lists_after
    finally:
        w.close()


def test_a_killed_api_server_loses_no_update_and_the_view_is_withdrawn_meanwhile(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table())
    w, views = watcher(kube, tmp_path)
    try:
        wait_for(lambda: len(views.names()) == 9, why="the first list")
        kube.stop()
        wait_for(lambda: views.last is None, why="the view withdrawn while the API server is down")
        kube.put(node("while-down", T4_LABELS, {GPU: "8"}))
        kube.delete("nodes", "cpu-3")
        kube.start()
        wait_for(lambda: "while-down" in views.names() and "cpu-3" not in views.names(), why="catch-up")
    finally:
        w.close()


def test_dra_objects_of_every_served_shape(cert_dir: Path, tmp_path: Path) -> None:
    """v1beta1 (1.32) puts deviceClassName on the request; v1 under `exactly` and firstAvailable."""
    kube = KubeApi(cert_dir, served={"": ("v1",), "resource.k8s.io": ("v1beta1",)}).start()
    try:
        kube.put(
            {
                "apiVersion": "resource.k8s.io/v1beta1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
            },
            {
                "apiVersion": "resource.k8s.io/v1beta1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "single-gpu", "namespace": "ml"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}}},
            },
            *node_table(),
        )
        w, views = watcher(kube, tmp_path)
        try:
            wait_for(lambda: views.last is not None and views.last.claim_templates, why="claim templates (v1beta1)")
            assert views.last is not None and views.last.claim_templates == {("ml", "single-gpu"): ("gpu.nvidia.com",)}
            assert [q for m, p, q in kube.requests if p.startswith("/apis/resource.k8s.io/v1/")]  # tried v1 first
        finally:
            w.close()
    finally:
        kube.close()


def test_no_cluster_means_no_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert load_client() is None


def test_memory_of_a_5000_node_view() -> None:
    """The footprint the issue asks for: 5,000 GPU operator nodes with their full label sets
    (about 45 labels each, as GPU feature discovery and NFD write them), in 25 pools."""
    from webhook.cluster.reflector import Reflector

    def gpu_operator_node(i: int) -> dict[str, Any]:
        pool = i % 25
        labels = {
            **T4_LABELS,
            "cloud.google.com/gke-nodepool": f"pool-{pool}",
            "topology.kubernetes.io/zone": f"us-central1-{'abc'[i % 3]}",
            **{f"feature.node.kubernetes.io/cpu-cpuid.AVX{n}": "true" for n in range(30)},
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/gfd.timestamp": "1733000000",
        }
        return node(f"gke-gpu-{pool}-{i:05d}", labels, {GPU: "4"}, [GPU_TAINT])

    raw = [gpu_operator_node(i) for i in range(5000)]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    reflector = Reflector(
        "nodes",
        lambda **_: None,
        __import__("webhook.policy.nodes").policy.nodes.node_key,
        lambda: None,
        threading.Event(),
        FAST,
    )
    for obj in raw:
        reduced = reflector.reduce(obj)
        assert reduced is not None
        reflector.store[reduced[0]] = reflector._value(reduced[1])
    from webhook.policy.nodes import group_nodes

    view = ClusterView(groups=group_nodes(reflector.store.items()), nodes=len(reflector.store))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(f"\n5,000 nodes: {held / 1e6:.2f} MB held by the store and the view ({len(view.groups)} groups)")
    assert len(view.groups) == 75  # 25 pools x 3 zones
    assert held < 8_000_000


# ---------------------------------------------------------------- through the real server


def serve(kube: KubeApi, tmp_path: Path, config: dict[str, Any] | None = None) -> Server:
    env = {"KUBECONFIG": str(kube.kubeconfig(tmp_path / "kubeconfig")), "KUBERNETES_SERVICE_HOST": ""}
    return Server(
        kube.cert_dir,
        {"webhookNamespace": "gpu-policy", **(config or {})},
        tmp_path,
        [],
        ("gpu-policy", "gpu-policy"),
        env,
    )


def synced(server: Server) -> str:
    client = server.client()
    try:
        text = client.get("/readyz").body.decode()
    finally:
        client.close()
    return text if "synced (" in text and "not synced" not in text and "pending" not in text else ""


def warnings(server: Server, obj: dict[str, Any]) -> list[str]:
    client = server.client()
    try:
        return list(client.validate(obj).get("warnings") or [])
    finally:
        client.close()


def gpus(n: Any, resource: str = GPU) -> dict[str, Any]:
    return {**container("train"), "resources": {"limits": {resource: n}}}


def test_the_issue_table_through_the_server(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table())
    server = serve(kube, tmp_path)
    try:
        assert wait_for(lambda: synced(server), why="the view synced").startswith("ok\ncluster view: synced (9 nodes")
        eight = pod(gpus(8), name="eight", tolerations=TOLERATE)
        a100 = pod(gpus(1), name="a100", nodeSelector={"accelerator": "nvidia-a100"}, tolerations=TOLERATE)
        pinned = pod(gpus(1), name="pinned", nodeSelector={"accelerator": "nvidia-a30"}, tolerations=TOLERATE)
        fine = pod(gpus(2), name="fine", nodeSelector={"accelerator": "nvidia-t4"}, tolerations=TOLERATE)
        mig = pod(
            gpus(1, "nvidia.com/mig-1g.6gb"),
            name="mig",
            nodeSelector={"accelerator": "nvidia-a30"},
            tolerations=TOLERATE,
        )
        (w,) = warnings(server, eight)
        assert "gpu-fits-some-node" in w and "but the largest matching node has 4 (gke-t4-pool-0" in w
        (w,) = warnings(server, a100)
        assert "known-accelerator" in w and "nodes have accelerator=nvidia-a30, nvidia-t4" in w
        (w,) = warnings(server, pinned)
        assert "gpu-resource-advertised" in w and "they offer nvidia.com/mig-1g.6gb, nvidia.com/mig-2g.12gb" in w
        assert warnings(server, fine) == []
        assert warnings(server, mig) == []
        # The cluster changes: an 8-GPU node joins, and the 8-GPU pod fits without a restart.
        kube.put(node("gke-a100-0", {"accelerator": "nvidia-a100"}, {GPU: "8"}, [GPU_TAINT]))
        wait_for(lambda: warnings(server, eight) == [], why="the new node seen")
        assert warnings(server, a100) == []
        metrics = server.scrape()
        assert "gpu_policy_cluster_view_synced 1.0" in metrics and "gpu_policy_cluster_view_nodes 10.0" in metrics
    finally:
        server.stop()
    # The chart's ClusterRole grants exactly what the server asked of the API server.
    used = set()
    for _method, path, query in kube.requests:
        if path.startswith("/version"):
            used.add(("nonResource", path, "get"))
            continue
        parts = path.strip("/").split("/")
        group, resource = ("", parts[2]) if parts[0] == "api" else (parts[1], parts[3])
        used.add((group, resource, "watch" if query.get("watch") == "True" else "list"))
    granted = set()
    for rule in find(render(tmp=tmp_path), "ClusterRole")["rules"]:
        for verb in rule["verbs"]:
            granted |= {("nonResource", url, verb) for url in rule.get("nonResourceURLs", ())}
            granted |= {(g, r, verb) for g in rule.get("apiGroups", ()) for r in rule.get("resources", ())}
    assert used - granted == set()
    assert {(g, r, v) for g, r, v in granted if g != "nonResource"} == {
        (g, r, v) for g, r, v in used if g != "nonResource"
    }


def test_dra_claims_resolved_to_classes_decide_isolation(kube: KubeApi, tmp_path: Path) -> None:
    """Every claim holder is voided, whatever its class and whether the view has seen it (issue 32
    #5: DRA delivers devices through CDI, whose edits replace the variable). The view still decides
    which pods are GPU pods: privilege next to a NIC claim is not judged as privilege in a GPU pod,
    next to a GPU claim (or one not seen yet) it is."""
    kube.put(
        *node_table(),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "single-gpu", "namespace": "ml"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "rdma-nic", "namespace": "ml"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "rdma.example.com"}}]}}
            },
        },
    )
    server = serve(kube, tmp_path)

    def claim_pod(template: str) -> dict[str, Any]:
        c = {**container("ctr"), "resources": {"claims": [{"name": "dev"}]}}
        return pod(c, name=f"with-{template}", resourceClaims=[{"name": "dev", "resourceClaimTemplateName": template}])

    def voided(obj: dict[str, Any]) -> bool:
        client = server.client()
        try:
            _, patched = client.mutate(obj)
        finally:
            client.close()
        return {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in patched["spec"]["containers"][0].get("env", [])

    try:
        wait_for(lambda: synced(server), why="the view synced")
        for template in ("rdma-nic", "single-gpu", "not-created-yet"):
            assert voided(claim_pod(template)), template

        def privileged_denied(template: str) -> bool:
            obj = claim_pod(template)
            obj["spec"]["containers"].append({**container("side"), "securityContext": {"privileged": True}})
            client = server.client()
            try:
                answer = client.validate(obj)
            finally:
                client.close()
            return "no-privileged-gpu" in answer.get("status", {}).get("message", "")

        wait_for(lambda: not privileged_denied("rdma-nic"), why="claim templates seen")
        assert privileged_denied("single-gpu")
        assert privileged_denied("not-created-yet")  # unknown: conservative
    finally:
        server.stop()


def _latencies(server: Server, n: int) -> list[float]:
    client = server.client()
    out = []
    try:
        for i in range(n):
            start = time.perf_counter()
            client.validate(pod(gpus(1), name=f"p{i}", tolerations=TOLERATE))
            out.append(time.perf_counter() - start)
    finally:
        client.close()
    return out


def test_a_hung_or_killed_api_server_never_delays_admission(kube: KubeApi, tmp_path: Path) -> None:
    """Also: the API server comes back upgraded (1.27 -> 1.28) and the version-gated mutation
    follows at the reconnect, long before clusterVersionSeconds (300 s) would have."""
    kube.git_version = "v1.27.16-gke.1287000"
    kube.put(*node_table())
    server = serve(kube, tmp_path)
    try:
        wait_for(lambda: synced(server), why="the view synced")
        base = _latencies(server, 300)
        kube.stall(True)  # every watch stream is open and silent
        kube.put(node("during-stall", T4_LABELS, {GPU: "4"}))
        stalled = _latencies(server, 300)
        kube.stall(False)
        kube.stop()  # killed: connections cut, nothing answers
        killed = _latencies(server, 300)
        kube.put(node("while-killed", {"accelerator": "nvidia-a100"}, {GPU: "8"}))
        kube.git_version = "v1.28.15-gke.1344000"
        kube.start()
        wait_for(lambda: synced(server), timeout=20, why="re-synced after the restart")
        eight = pod(gpus(8), name="eight", tolerations=TOLERATE)
        wait_for(lambda: warnings(server, eight) == [], why="the node added while killed")
        figures = {
            name: (statistics.median(v) * 1000, sorted(v)[int(len(v) * 0.99)] * 1000)
            for name, v in (("watching", base), ("stalled", stalled), ("killed", killed))
        }
        print("\nadmission p50/p99 ms: " + ", ".join(f"{k} {a:.2f}/{b:.2f}" for k, (a, b) in figures.items()))
        for name in ("stalled", "killed"):
            assert figures[name][1] < max(5 * figures["watching"][1], 20), figures
        assert "cluster view lost" in server.log.read_text()
        wait_for(lambda: "cluster version changed: 1.27 -> 1.28" in server.log.read_text(), why="version re-read")
    finally:
        server.stop()


def test_slow_lists_are_waited_for_and_a_list_slower_than_the_read_timeout_is_retried(
    kube: KubeApi, tmp_path: Path
) -> None:
    import dataclasses

    kube.put(*node_table())
    kube.delay = 0.8  # every list answers late: within the read timeout below, then beyond it
    w, views = watcher(kube, tmp_path)
    try:
        started = time.monotonic()
        wait_for(lambda: len(views.names()) == 9, why="a slow list")
        assert time.monotonic() - started >= 0.8
    finally:
        w.close()
    impatient = dataclasses.replace(FAST, read_seconds=0.3)
    import os

    os.environ["KUBECONFIG"] = str(kube.kubeconfig(tmp_path / "kubeconfig"))
    loaded = load_client()
    assert loaded is not None
    views = Views()
    w = ClusterWatcher(loaded[0], views, impatient, metrics=None)
    w.start()
    try:
        time.sleep(1.5)
        assert views.last is None  # every list timed out: no view, never a partial one
        kube.delay = 0.0
        wait_for(lambda: len(views.names()) == 9, why="the list once the API server is fast again")
    finally:
        w.close()


def test_odd_objects_from_the_api_never_break_the_view() -> None:
    """Whatever a list or watch returns, reducing it never raises: a node is never the reason a
    request fails. Fields of the wrong shape read as absent."""
    from webhook.cluster.view import reduce_claim, reduce_claim_template, reduce_device_class
    from webhook.policy.nodes import node_key, view_of_nodes

    odd = [
        None,
        [],
        {"metadata": None},
        {"metadata": {"name": ""}},
        {"metadata": {"name": "n1", "labels": ["x"]}, "status": {"allocatable": {GPU: "four"}}},
        {"metadata": {"name": "n2", "labels": {"a": 1}}, "spec": {"taints": ["x", {"key": 1}], "unschedulable": "yes"}},
        {"metadata": {"name": "n3"}, "status": "Ready", "spec": []},
    ]
    keys = [node_key(o) for o in odd]
    assert keys[:4] == [None, None, None, None]
    assert keys[4] == ("n1", ((), (), (), False))  # an unparsable quantity is no resource
    assert keys[5] == ("n2", ((), (), (), False))  # only "true" cordons; junk taints are not taints
    view = view_of_nodes(odd)
    assert view.nodes == 3 and view.advertised() == set()
    for reduce in (reduce_claim, reduce_claim_template, reduce_device_class):
        for obj in ({}, {"metadata": {"name": "c"}, "spec": "x"}, {"metadata": {"name": "c", "namespace": "ml"}}):
            reduce(obj)  # never raises
    claim = {"metadata": {"name": "c", "namespace": "ml"}, "spec": {"devices": {"requests": [7, {"exactly": "x"}]}}}
    assert reduce_claim(claim) == (("ml", "c"), ())
