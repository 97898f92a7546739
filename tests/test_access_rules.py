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


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }


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


def test_namespace_rbac_only_while_the_rule_is_on(tmp_path: Path) -> None:
    from tests.chart import find, render

    def namespace_rules(values: dict[str, Any]) -> list[Any]:
        docs = render(values, tmp=tmp_path)
        role = find(docs, "ClusterRole", "gpu-policy")
        return [r for r in role["rules"] if "namespaces" in r.get("resources", [])]

    assert namespace_rules({}) == []
    on = namespace_rules({"policy": {"rules": {"gpu-namespace-allowed": "deny"}}})
    assert on == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]


def test_ten_thousand_namespaces_hold_under_5_mb() -> None:
    """What the view keeps of 10,000 namespaces of a few labels each (their own name label, a
    team, the GPU switch), measured with tracemalloc around the list that stores them."""
    import threading
    import tracemalloc

    import orjson

    from webhook.clusterview import Reflector, Timing, reduce_namespace

    items = [
        namespace(f"team-{i:05d}", team=f"team-{i % 200}", **{"gpu.deckhouse.io/enabled": str(i % 2 == 0).lower()})
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
