"""`gpu-policy audit` and `gpu-policy check --cluster` against the stand-in API server, as a user runs
them: the CLI in a subprocess with a kubeconfig, through the official client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import GPU, ROOT, container, node_table, pod, wrap
from tests.kubeapi import KubeApi

SERVED = {
    "": ("v1",),
    "apps": ("v1",),
    "batch": ("v1",),
    "resource.k8s.io": ("v1",),
    "wgpolicyk8s.io": ("v1alpha2",),
}
TOLERATE = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture
def kube(cert_dir: Path) -> Iterator[KubeApi]:
    api = KubeApi(cert_dir, served=SERVED).start()
    yield api
    api.close()


def cli(kube: KubeApi, tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig(tmp_path / "kubeconfig")), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout
    )


def training_pod(i: int, ns: str) -> dict[str, Any]:
    """A PyTorchJob worker as the training operator makes it (labels, owner, one GPU)."""
    p = pod(
        {
            **container("pytorch", gpu=1),
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["torchrun", "--nproc_per_node=1", "train.py"],
            "env": [{"name": "PET_NNODES", "value": "4"}],
        },
        name=f"bert-{i}-worker-0",
        namespace=ns,
        tolerations=TOLERATE,
    )
    p["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": f"bert-{i}",
        "training.kubeflow.org/replica-type": "worker",
    }
    p["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": f"bert-{i}",
            "uid": f"job-{i}",
            "controller": True,
        }
    ]
    return p


def population(n: int) -> list[dict[str, Any]]:
    """n pods: web pods, GPU training pods, and a few that break rules (privileged GPU pods: deny;
    two time-sliced slots: warn; eight GPUs where nodes have four: pre-flight warn)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        ns = f"team-{i % 20}"
        if i % 1000 == 1:
            p = pod(
                {**container("debug", gpu=1), "securityContext": {"privileged": True}}, name=f"priv-{i}", namespace=ns
            )
        elif i % 1000 == 2:
            c = {**container("notebook"), "resources": {"limits": {"nvidia.com/gpu.shared": 2}}}
            p = pod(c, name=f"shared-{i}", namespace=ns)
        elif i % 1000 == 3:
            p = pod(container("big", gpu=8), name=f"big-{i}", namespace=ns, tolerations=TOLERATE)
        elif i % 2:
            p = training_pod(i, ns)
        else:
            p = pod({**container("web"), "image": "nginx:1.27"}, name=f"web-{i}", namespace=ns)
        out.append(p)
    deploy = wrap(pod({**container("serve", gpu=1), "securityContext": {"privileged": True}}), "Deployment")
    deploy["metadata"] = {"name": "llm-serve", "namespace": "team-0"}
    out.append(deploy)
    kube_system = pod(
        {**container("dcgm", gpu=1), "securityContext": {"privileged": True}}, name="dcgm", namespace="kube-system"
    )
    out.append(kube_system)
    return out


def test_audit_of_10000_pods_reports_per_namespace_and_rule_with_time(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table(), *population(10_000))
    started = time.monotonic()
    r = cli(kube, tmp_path, "audit", "-o", "json")
    took = time.monotonic() - started
    assert r.returncode == 1, r.stderr  # privileged GPU pods are denied today
    body = json.loads(r.stdout)
    print(f"\naudit of {body['judged']}: {body['seconds']} s inside, {took:.1f} s with start-up")
    assert body["judged"]["Pod"] == 10_001 and body["judged"]["Deployment"] == 1
    assert "Volcano" not in json.dumps(body["judged"]) and "Job.batch.volcano.sh" in body["notServed"]
    rows = {(row["namespace"], row["rule"]): row for row in body["table"]}
    # Pod i lands in team-(i % 20): the rule breakers (i % 1000 in 1, 2, 3) in teams 1, 2 and 3, ten each.
    assert rows[("team-1", "no-privileged-gpu")] == {
        "namespace": "team-1",
        "rule": "no-privileged-gpu",
        "denied": 10,
        "warned": 0,
        "deniedIfEnforced": 10,
    }
    assert rows[("team-2", "gpu-shared-slots")]["warned"] == 10
    assert rows[("team-2", "gpu-shared-slots")]["deniedIfEnforced"] == 10
    assert rows[("team-2", "gpu-resource-advertised")]["warned"] == 10
    assert rows[("team-3", "gpu-fits-some-node")]["warned"] == 10  # the pre-flight rules judged against the nodes
    assert rows[("team-0", "no-privileged-gpu")]["denied"] == 1  # the Deployment
    assert not any(ns == "kube-system" for ns, _ in rows)  # exempt, as in the webhook
    assert body["summary"] == {"deniedToday": 11, "warnedToday": 20, "deniedIfEnforced": 31}
    # Progress on stderr, and every list paginated (500 a page).
    assert "audit: pods: 5000 judged" in r.stderr and "audit: pods: 10001 judged" in r.stderr
    pages = [q for m, p, q in kube.requests if p == "/api/v1/pods"]
    assert len(pages) == 21 and all(q["limit"] == "500" for q in pages)


def test_audit_text_strict_and_namespace(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table(), *population(1_000))
    r = cli(kube, tmp_path, "audit", "-n", "team-2")
    assert r.returncode == 0, r.stdout + r.stderr  # nothing denied today in team-2
    assert "NAMESPACE  RULE" in r.stdout
    assert "team-2     gpu-shared-slots              0       1                   1" in r.stdout
    # gpu.shared is advertised by no node of this cluster: the pre-flight rule says so too.
    assert "team-2     gpu-resource-advertised       0       1                   1" in r.stdout
    assert "WARN  Pod team-2/shared-2: gpu-shared-slots" in r.stdout
    assert "0 object(s) denied today" in r.stdout and "1 would be denied if every warn rule were deny" in r.stdout
    assert cli(kube, tmp_path, "audit", "-n", "team-2", "--strict").returncode == 1


def test_policy_reports_written_to_the_cluster_and_replaced_on_the_next_run(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table(), *population(1_000))
    assert cli(kube, tmp_path, "audit", "--report").returncode == 1
    first = kube.call(lambda: dict(kube.objects["policyreports"]))
    assert len(first) == 20  # one per namespace with objects (kube-system is exempt: not judged)
    report = first[("team-1", "gpu-policy")]
    assert report["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and report["kind"] == "PolicyReport"
    assert report["summary"] == {"pass": 49, "fail": 1, "warn": 0, "error": 0, "skip": 0}  # 50 pods
    (result,) = report["results"]
    assert result["policy"] == "gpu-policy" and result["rule"] == "no-privileged-gpu" and result["result"] == "fail"
    assert result["resources"][0]["kind"] == "Pod" and result["resources"][0]["name"] == "priv-1"
    assert result["resources"][0]["uid"]
    # A second run replaces the reports (no AlreadyExists, no duplicates).
    assert cli(kube, tmp_path, "audit", "--report").returncode == 1
    second = kube.call(lambda: dict(kube.objects["policyreports"]))
    assert second.keys() == first.keys()
    assert int(second[("team-1", "gpu-policy")]["metadata"]["resourceVersion"]) > int(
        report["metadata"]["resourceVersion"]
    )
    # To a file instead, as YAML documents.
    r = cli(kube, tmp_path, "audit", "--report-file", "-")
    docs = list(yaml.safe_load_all(r.stdout))
    assert len(docs) == 20 and {d["kind"] for d in docs} == {"PolicyReport"}


def test_a_cluster_without_the_policyreport_crd_or_without_a_cluster_is_exit_2(cert_dir: Path, tmp_path: Path) -> None:
    kube = KubeApi(cert_dir).start()  # wgpolicyk8s.io not served
    try:
        kube.put(*node_table())
        r = cli(kube, tmp_path, "audit", "--report")
        assert r.returncode == 2 and "the PolicyReport CRD (wgpolicyk8s.io/v1alpha2) is not installed" in r.stderr
        kube.stop()
        r = cli(kube, tmp_path, "audit")
        assert r.returncode == 2 and "cannot reach the API server" in r.stderr
    finally:
        kube.close()
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "audit"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert r.returncode == 2 and "no cluster" in r.stderr


def test_check_cluster_asks_would_this_fit(kube: KubeApi, tmp_path: Path) -> None:
    kube.put(*node_table())
    manifest = tmp_path / "train.yaml"
    job = wrap(pod(container("train", gpu=8), tolerations=TOLERATE), "Job")
    job["metadata"] = {"name": "train", "namespace": "ml"}
    manifest.write_text(yaml.safe_dump(job))
    r = cli(kube, tmp_path, "check", "--cluster", "-f", str(manifest))
    assert r.returncode == 0, r.stderr
    assert "cluster: 9 nodes in 3 groups" in r.stderr
    assert "WARN  " in r.stdout and "gpu-fits-some-node" in r.stdout and "has 4 (gke-t4-pool-0" in r.stdout
    # Without --cluster the pre-flight rules are silent.
    assert "gpu-fits-some-node" not in cli(kube, tmp_path, "check", "-f", str(manifest)).stdout
    strict = tmp_path / "deny.yaml"
    strict.write_text(yaml.safe_dump({"rules": {"gpu-fits-some-node": "deny"}}))
    r = cli(kube, tmp_path, "check", "--cluster", "--config", str(strict), "-f", str(manifest))
    assert r.returncode == 1 and "DENY" in r.stdout
    kube.stop()
    r = cli(kube, tmp_path, "check", "--cluster", "-f", str(manifest))
    assert r.returncode == 2 and "cannot reach the API server" in r.stderr


def test_check_cluster_reads_namespace_labels_for_gpu_namespace_allowed(kube: KubeApi, tmp_path: Path) -> None:
    """With gpu-namespace-allowed on, check --cluster lists namespaces too: a labelled one may run
    GPU pods, an unlabelled one may not, one the cluster does not have fails closed."""
    labelled = {"gpu.deckhouse.io/enabled": "true"}
    kube.put(
        *node_table(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": labelled}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web", "labels": {}}},
    )
    config = tmp_path / "namespaces.yaml"
    config.write_text(
        yaml.safe_dump({"rules": {"gpu-namespace-allowed": "deny"}, "gpuNamespaceSelector": {"matchLabels": labelled}})
    )
    docs = []
    for ns in ("ml", "web", "elsewhere"):
        job = wrap(pod(container("train", gpu=1), tolerations=TOLERATE), "Job")
        job["metadata"] = {"name": f"train-{ns}", "namespace": ns}
        docs.append(job)
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    r = cli(kube, tmp_path, "check", "--cluster", "--config", str(config), "-o", "json", "-f", str(manifest))
    assert r.returncode == 1, r.stderr
    results = json.loads(r.stdout)["results"]
    assert [x["allowed"] for x in results] == [True, False, False]
    assert "does not carry labels matching gpu.deckhouse.io/enabled=true" in results[1]["message"]
    assert "is not yet in gpu-policy's view of namespaces" in results[2]["message"]


def test_audit_reports_the_access_rules_with_live_namespaces(kube: KubeApi, tmp_path: Path) -> None:
    """audit judges what runs against the namespaces' live labels and annotations: team-a's cap of
    2 and its whole-cards-only kinds, a quota that caps nothing, a bare notebook, a Job with no
    deadline; nothing in team-b, whose annotation allows fractions and whose cap is the config's."""
    ns_a = {"name": "team-a", "labels": {"gpu-policy.io/max-gpus-per-pod": "2"}}
    ns_b = {"name": "team-b", "annotations": {"gpu-policy.io/gpu-kinds": "whole,shared"}}
    half = {**container("lab"), "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}
    job = wrap(pod(container("train", gpu=1), tolerations=TOLERATE), "Job")
    job["metadata"] = {"name": "train", "namespace": "team-a"}
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": "team-a"},
        "spec": {"hard": {"nvidia.com/gpu": "4"}},
    }
    kube.put(
        *node_table(),
        *({"apiVersion": "v1", "kind": "Namespace", "metadata": m} for m in (ns_a, ns_b)),
        training_pod(1, "team-a"),  # a PyTorchJob's worker, one GPU: fine
        pod(container("big", gpu=4), name="big", namespace="team-a", tolerations=TOLERATE),
        pod(half, name="half-a", namespace="team-a"),
        pod(half, name="half-b", namespace="team-b"),
        job,
        quota,
    )
    config = tmp_path / "access.yaml"
    rules = ["gpu-max-per-pod", "gpu-kinds-allowed", "gpu-controller-owned", "gpu-job-deadline", "gpu-quota-advice"]
    config.write_text(yaml.safe_dump({"sharedGpu": True, "rules": {r: "warn" for r in rules}}))
    r = cli(kube, tmp_path, "audit", "--config", str(config), "-o", "json")
    assert r.returncode == 0, r.stderr
    rows = {(row["namespace"], row["rule"]): row["warned"] for row in json.loads(r.stdout)["table"]}
    access = {key: n for key, n in rows.items() if key[1] in rules}
    assert access == {
        ("team-a", "gpu-max-per-pod"): 1,  # big: 4 > the namespace's 2
        ("team-a", "gpu-kinds-allowed"): 1,  # half-a: a share, where gpuKindsAllowed has none
        ("team-a", "gpu-controller-owned"): 2,  # big and half-a are bare pods
        ("team-b", "gpu-controller-owned"): 1,  # half-b too; its fraction is allowed there
        ("team-a", "gpu-job-deadline"): 1,
        ("team-a", "gpu-quota-advice"): 1,
    }
