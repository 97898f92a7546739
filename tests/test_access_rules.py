"""Who may use GPUs, and how many (the access rules, off by default), turned on as a platform
would: through the real server and through `gpu-policy check --config`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import ROOT, Server

CONFIG = {
    "clusterVersion": "1.30",
    "rules": {"gpu-controller-owned": "deny", "gpu-max-per-pod": "deny"},
    "gpuMaxPerPod": 4,
}

# A data scientist's notebook started as a bare pod (the pattern kyverno#13879 wants stopped).
NOTEBOOK = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "jupyter-gpu", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11",
                "ports": [{"containerPort": 8888}],
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ]
    },
}


def as_job_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The same pod as the Job controller creates it: generateName and a controller reference."""
    out = json.loads(json.dumps(pod))
    out["metadata"] = {
        "generateName": "train-",
        "namespace": "team-a",
        "labels": {"batch.kubernetes.io/job-name": "train"},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "3b1c", "controller": True,
             "blockOwnerDeletion": True}
        ],
    }  # fmt: skip
    out["spec"]["restartPolicy"] = "Never"
    return out


# The EKS p4d sample: one trainer with all 8 GPUs of the node.
EIGHT = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "nccl-allreduce", "namespace": "team-a"},
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "trainer",
                        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}},
                    }
                ],
            }
        }
    },
}


def test_through_the_server(start_server: Callable[..., Server]) -> None:
    server = start_server(CONFIG)
    client = server.client()
    try:
        bare = client.validate(NOTEBOOK)
        assert bare["allowed"] is False
        assert "gpu-controller-owned (pod: metadata.ownerReferences names no controller" in bare["status"]["message"]
        assert client.validate(as_job_pod(NOTEBOOK))["allowed"] is True
        eight = client.validate(EIGHT)
        assert eight["allowed"] is False
        assert (
            "ask for 8 GPU devices (its containers together): more than the 4 one pod may have"
            in (eight["status"]["message"])
        )
    finally:
        client.close()


def test_through_check(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    manifests = tmp_path / "m.yaml"
    manifests.write_text(yaml.safe_dump_all([NOTEBOOK, as_job_pod(NOTEBOOK), EIGHT]))
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "--config", str(config), "-o", "json", str(manifests)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    results = json.loads(r.stdout)["results"]
    assert [[v["rule"] for v in x["violations"]] for x in results] == [
        ["gpu-controller-owned"],
        [],
        ["gpu-max-per-pod"],
    ]


# ---------------------------------------------------------------- gpu-namespace-allowed with a live view

SELECTOR = {"matchLabels": {"gpu.deckhouse.io/enabled": "true"}}
NS_CONFIG = {"clusterVersion": "1.30", "rules": {"gpu-namespace-allowed": "deny"}, "gpuNamespaceSelector": SELECTOR}


def namespace(name: str, annotations: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def in_namespace(ns: str) -> dict[str, Any]:
    out = as_job_pod(NOTEBOOK)
    out["metadata"]["namespace"] = ns
    return out


def test_namespace_allow_list_through_the_server_with_the_stand_in_cluster(cert_dir: Path, tmp_path: Path) -> None:
    """Deckhouse's rule: GPU pods only in namespaces labelled gpu.deckhouse.io/enabled=true; a
    namespace the view has not seen yet fails closed; labelling one opens it without a restart."""
    from tests.helpers import node_table
    from tests.kubeapi import KubeApi
    from tests.test_cluster_view import serve, synced, wait_for

    kube = KubeApi(cert_dir, bookmark_seconds=0.2).start()
    try:
        kube.put(*node_table(), namespace("ml-prod", **{"gpu.deckhouse.io/enabled": "true"}), namespace("web"))
        server = serve(kube, tmp_path, NS_CONFIG)
        try:
            wait_for(lambda: synced(server), why="the view synced")
            client = server.client()
            try:
                wait_for(lambda: client.validate(in_namespace("ml-prod"))["allowed"], why="namespaces synced")
                web = client.validate(in_namespace("web"))
                assert web["allowed"] is False
                assert 'metadata.namespace is "web"' not in web["status"]["message"]  # the value is not the path
                assert "does not carry labels matching gpu.deckhouse.io/enabled=true" in web["status"]["message"]
                new = client.validate(in_namespace("ml-new"))
                assert new["allowed"] is False and "failing closed until it is" in new["status"]["message"]
                kube.put(namespace("ml-new", **{"gpu.deckhouse.io/enabled": "true"}))
                wait_for(lambda: client.validate(in_namespace("ml-new"))["allowed"], why="the new namespace watched")
                kube.put(namespace("web", **{"gpu.deckhouse.io/enabled": "true"}))  # labelled later
                wait_for(lambda: client.validate(in_namespace("web"))["allowed"], why="the label seen")
            finally:
                client.close()
        finally:
            server.stop()
        watched = {(p, q.get("watch")) for _m, p, q in kube.requests if p == "/api/v1/namespaces"}
        assert watched == {("/api/v1/namespaces", None), ("/api/v1/namespaces", "True")}
    finally:
        kube.close()


def test_namespace_rbac_only_while_a_rule_that_reads_them_is_on(tmp_path: Path) -> None:
    """The ClusterRole and the server's watch follow one flag, Rule.watches_namespaces; the pods
    roll (checksum/server-config) when it flips, since a running server cannot start the watch."""
    from tests.chart import find, render
    from webhook.config import default_policy
    from webhook.policy import RULES, Mode, watches_namespaces

    def rendered(values: dict[str, Any]) -> tuple[list[Any], str]:
        docs = render(values, tmp=tmp_path)
        role = find(docs, "ClusterRole", "gpu-policy")
        checksum = find(docs, "Deployment", "gpu-policy")["spec"]["template"]["metadata"]["annotations"]
        return [r for r in role["rules"] if "namespaces" in r.get("resources", [])], checksum["checksum/server-config"]

    off, off_sum = rendered({})
    assert off == [] and not watches_namespaces(default_policy())
    readers = [r.id for r in RULES if r.watches_namespaces]
    assert readers == ["gpu-max-per-pod", "gpu-namespace-allowed", "gpu-kinds-allowed"]
    for rule in readers:
        on, on_sum = rendered({"policy": {"rules": {rule: "warn"}}})
        assert on == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}], rule
        assert on_sum != off_sum and watches_namespaces(default_policy(modes={rule: Mode.WARN}))
    assert rendered({"policy": {"rules": {"gpu-controller-owned": "deny"}}})[0] == []


# ---------------------------------------------------------------- caps, kinds and deadlines per namespace

# A platform's access rules: 8 GPUs a pod, but team-a's namespace caps it at 4; whole cards, MIG and
# DRA everywhere, fractions only where a namespace's annotation allows them (KAI-Scheduler#45);
# GPU Jobs are told (warned) to set a deadline.
KINDS_CONFIG = {
    "clusterVersion": "1.30",
    "sharedGpu": True,
    "rules": {"gpu-max-per-pod": "deny", "gpu-kinds-allowed": "deny", "gpu-job-deadline": "warn"},
}
TEAM_A = namespace("team-a", **{"gpu-policy.io/max-gpus-per-pod": "4"})
NOTEBOOKS = namespace("notebooks", annotations={"gpu-policy.io/gpu-kinds": "whole,shared"})


def fraction(ns: str) -> dict[str, Any]:
    """A notebook on half a card, as GPU-sharing clusters (Volcano's, Alibaba's) spell it."""
    out = json.loads(json.dumps(NOTEBOOK))
    out["metadata"]["namespace"] = ns
    out["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "0.5"}}
    return out


def test_caps_and_kinds_through_the_server_with_the_stand_in_cluster(cert_dir: Path, tmp_path: Path) -> None:
    from tests.helpers import node_table
    from tests.kubeapi import KubeApi
    from tests.test_cluster_view import serve, synced, wait_for

    kube = KubeApi(cert_dir, bookmark_seconds=0.2).start()
    try:
        kube.put(*node_table(), TEAM_A, NOTEBOOKS)
        server = serve(kube, tmp_path, KINDS_CONFIG)
        try:
            wait_for(lambda: synced(server), why="the view synced")
            client = server.client()
            try:
                wait_for(lambda: not client.validate(EIGHT)["allowed"], why="team-a's cap label seen")
                eight = client.validate(EIGHT)
                assert (
                    "ask for 8 GPU devices (its containers together): more than the 4 one pod may have (the "
                    "namespace's label gpu-policy.io/max-gpus-per-pod)" in eight["status"]["message"]
                )
                assert any("gpu-job-deadline" in w and "activeDeadlineSeconds" in w for w in eight["warnings"])
                denied = client.validate(fraction("team-a"))
                assert denied["allowed"] is False
                assert (
                    "uses a shared GPU (nvidia.com/gpu: 0.5); this namespace may use whole, mig, dra (gpuKindsAllowed)"
                    in denied["status"]["message"]
                )
                assert client.validate(fraction("notebooks"))["allowed"] is True
                kube.put(namespace("team-a", **{"gpu-policy.io/max-gpus-per-pod": "8"}))  # the platform raises it
                wait_for(lambda: client.validate(EIGHT)["allowed"], why="the new cap seen without a restart")
            finally:
                client.close()
        finally:
            server.stop()
    finally:
        kube.close()


def test_caps_kinds_and_owners_through_check_cluster(cert_dir: Path, tmp_path: Path) -> None:
    """`check --cluster` lists namespaces when a rule reads them and judges as the server would."""
    from tests.helpers import node_table
    from tests.kubeapi import KubeApi
    from tests.test_audit import cli

    kube = KubeApi(cert_dir).start()
    try:
        kube.put(*node_table(), TEAM_A, NOTEBOOKS)
        config = tmp_path / "config.yaml"
        rules = {**KINDS_CONFIG["rules"], "gpu-controller-owned": "deny"}  # type: ignore[dict-item]
        config.write_text(yaml.safe_dump({**KINDS_CONFIG, "rules": rules}))
        manifest = tmp_path / "m.yaml"
        manifest.write_text(
            yaml.safe_dump_all([EIGHT, fraction("team-a"), fraction("notebooks"), NOTEBOOK, as_job_pod(NOTEBOOK)])
        )
        r = cli(kube, tmp_path, "check", "--cluster", "--config", str(config), "-o", "json", "-f", str(manifest))
        assert r.returncode == 1, r.stderr
        results = json.loads(r.stdout)["results"]
        assert [sorted({v["rule"] for v in x["violations"]}) for x in results] == [
            ["gpu-max-per-pod"],
            ["gpu-controller-owned", "gpu-kinds-allowed"],
            ["gpu-controller-owned"],
            ["gpu-controller-owned"],
            [],
        ]
        assert "more than the 4 one pod may have" in results[0]["message"]
        deadline = [[w for w in x["warnings"] if "gpu-job-deadline" in w] for x in results]
        assert [len(w) for w in deadline] == [1, 0, 0, 0, 0]  # the Job; pods are not Jobs
        assert "gpu-job-deadline (job: spec.activeDeadlineSeconds is not set" in deadline[0][0]
    finally:
        kube.close()


def test_ten_thousand_namespaces_hold_under_5_mb() -> None:
    """What the view keeps of 10,000 namespaces of a few labels each (their own name label, a
    team, the GPU switch, a GPU cap) and the kinds annotation on some, measured with tracemalloc
    around the list that stores them."""
    import threading
    import tracemalloc

    import orjson

    from webhook.cluster.reflector import Reflector, Timing
    from webhook.cluster.view import reduce_namespace

    items = [
        namespace(
            f"team-{i:05d}",
            # every tenth with the kinds annotation; other annotations (kubectl's last-applied) are not kept
            annotations={"gpu-policy.io/gpu-kinds": "whole,shared"} if i % 10 == 0 else {"owner": f"user-{i}@corp"},
            team=f"team-{i % 200}",
            **{"gpu.deckhouse.io/enabled": str(i % 2 == 0).lower(), "gpu-policy.io/max-gpus-per-pod": str(1 + i % 8)},
        )
        for i in range(10_000)
    ]
    body = orjson.dumps({"metadata": {"resourceVersion": "7"}, "items": items})

    class Response:
        data = body

        def release_conn(self) -> None:
            pass

    reflector = Reflector(
        "namespaces", lambda **_kw: Response(), reduce_namespace, lambda: None, threading.Event(), Timing(page=20_000)
    )
    import gc

    import kubernetes.client.exceptions  # noqa: F401  (imported by the first list: not the view's memory)

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        reflector.list()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(reflector.store) == 10_000
    print(f"\n10,000 namespaces: {held / 1e6:.2f} MB held by the view's store")
    assert held < 5_000_000
