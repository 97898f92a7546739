"""Reports in the cluster (issue 50, item 4): the chart's optional CronJob runs `gpu-policy audit
--report` from its own image under a ServiceAccount of its own, and writes one wgpolicyk8s.io
PolicyReport per namespace, replaced each run, bounded in size.

The render is checked with a real helm and kubernetes-validate; the CronJob's own arguments are run
against a REAL kube-apiserver 1.36 (tests/realapi.py; skipped where it is absent) with the
PolicyReport CRD installed, authenticated as that ServiceAccount with exactly the chart's RBAC: the
least privilege it grants is enough, and a second run replaces the reports."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.chart import find, render
from tests.helpers import ROOT
from tests.realapi import SKIP, RealApi, available, running
from webhook.cluster.audit import MAX_RESULTS, OMITTED, Audit, Finding, Kind, policy_reports

ON = {"auditReports": {"enabled": True}}


def rendered(tmp: Path, **values: Any) -> list[dict[str, Any]]:
    docs = render({**ON, **values}, kube_version="1.36.0", tmp=tmp)
    assert isinstance(docs, list)
    return docs


def test_the_cronjob_runs_the_audit_from_the_charts_image_with_its_own_least_privilege(tmp_path: Path) -> None:
    docs = rendered(tmp_path)
    cron = find(docs, "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["args"][1:] == ["audit", "--config=/etc/gpu-policy/config/config.yaml", "--report",
                                     "--limit=0", "--exit-zero"]  # fmt: skip
    assert cron["spec"]["concurrencyPolicy"] == "Forbid" and container["securityContext"]["readOnlyRootFilesystem"]
    assert (
        pod["serviceAccountName"]
        == "gpu-policy-audit"
        != find(docs, "Deployment")["spec"]["template"]["spec"].get("serviceAccountName")
    )
    role = find(docs, "ClusterRole", "gpu-policy-audit")
    verbs = {(g, r): tuple(rule["verbs"]) for rule in role["rules"] for g in rule.get("apiGroups", ["-"])
             for r in rule.get("resources", rule.get("nonResourceURLs", []))}  # fmt: skip
    assert verbs[("wgpolicyk8s.io", "policyreports")] == ("get", "create", "update")
    assert {v for (g, r), v in verbs.items() if (g, r) != ("wgpolicyk8s.io", "policyreports")} <= {("list",), ("get",)}
    assert not [k for k in verbs if "*" in k]
    for doc in docs:
        if doc["metadata"]["name"].endswith("-audit"):
            kubernetes_validate.validate(doc, "1.30.0", strict=True)
    # A switched-on custom resource is listed too; off, the CronJob and its RBAC are not rendered.
    with_ray = rendered(tmp_path, webhook={"customResources": {"ray": True}})
    rules = find(with_ray, "ClusterRole", "gpu-policy-audit")["rules"]
    assert any("ray.io" in rule.get("apiGroups", []) for rule in rules)
    off = render({}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(off, list) and not [d for d in off if d["metadata"]["name"].endswith("-audit")]


def test_a_report_is_bounded_and_a_held_deny_is_a_fail() -> None:
    """A namespace with more findings than MAX_RESULTS: the report keeps the fails first, counts
    every finding in its summary and says how many it left out. Under rollout audit a held deny
    is a `fail` (as Kyverno's audit mode reports a violation), once, with mode `held`."""
    from tests.apiserver import ApiServer
    from tests.helpers import container, pod
    from webhook.admission import validate
    from webhook.admission.review import parse
    from webhook.config import from_mapping

    audit = Audit()
    policy = from_mapping({"rollout": "audit"}).policy
    kind = Kind("", "v1", "Pod", "pods")
    bad = pod(container("t", gpu=1, privileged=True), namespace="big")
    for i in range(MAX_RESULTS + 5):
        outcome = validate(parse(ApiServer.build(bad)), policy)
        audit.findings.append(Finding(kind, "big", f"p{i}", f"uid-{i}", outcome))
    (report,) = policy_reports(audit, now=0)
    assert len(report["results"]) == MAX_RESULTS
    assert report["metadata"]["annotations"][OMITTED] == "5"
    assert report["summary"]["fail"] == MAX_RESULTS + 5 and report["summary"]["warn"] == 0
    assert {r["properties"]["mode"] for r in report["results"]} == {"held"}
    assert len(json.dumps(report)) < 1_500_000


@pytest.fixture(scope="module")
def real_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApi]:
    if not available():
        pytest.skip(SKIP)
    with running(tmp_path_factory.mktemp("kube136")) as client:
        yield client


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "policyreports.wgpolicyk8s.io"},
    "spec": {
        "group": "wgpolicyk8s.io",
        "names": {"kind": "PolicyReport", "listKind": "PolicyReportList", "plural": "policyreports",
                  "singular": "policyreport", "shortNames": ["polr"]},
        "scope": "Namespaced",
        "versions": [{"name": "v1alpha2", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip
PLURAL = {
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
}


def _create(api: RealApi, doc: dict[str, Any]) -> None:
    kind = doc["kind"]
    if kind == "ServiceAccount":
        path = f"/api/v1/namespaces/{doc['metadata']['namespace']}/serviceaccounts"
    else:
        path = f"/apis/rbac.authorization.k8s.io/v1/{PLURAL[kind]}"
    code, body, _ = api.call("POST", path, doc)
    assert code == 201, body


def test_the_cronjobs_audit_writes_and_replaces_reports_with_only_its_rbac(real_api: RealApi, tmp_path: Path) -> None:
    docs = rendered(tmp_path)
    code, body, _ = real_api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert code == 201, body
    real_api.call(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-policy"}}
    )
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        _create(real_api, find(docs, kind, "gpu-policy-audit"))
    # What runs: a privileged GPU pod (denied by no-privileged-gpu) and a clean one, in `ml`.
    for name, privileged in (("trainer", True), ("web", False)):
        c: dict[str, Any] = {"name": "c", "image": "x"}
        if privileged:
            c |= {"securityContext": {"privileged": True}, "resources": {"limits": {"nvidia.com/gpu": 1}}}
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [c]}}
        code, body, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", obj)
        assert code == 201, body
    # The ServiceAccount's token (TokenRequest), as the kubelet would mount it.
    code, token, _ = real_api.call(
        "POST", "/api/v1/namespaces/gpu-policy/serviceaccounts/gpu-policy-audit/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )  # fmt: skip
    assert code == 201, token
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "audit",
        "clusters": [{"name": "real", "cluster": {"server": real_api.url, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "audit", "user": {"token": token["status"]["token"]}}],
        "contexts": [{"name": "audit", "context": {"cluster": "real", "user": "audit"}}],
    }))  # fmt: skip
    config = tmp_path / "config.yaml"
    config.write_text(find(docs, "ConfigMap", "gpu-policy")["data"]["config.yaml"])
    (container,) = find(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = [f"--config={config}" if a.startswith("--config=") else a for a in container["args"]]
    versions = []
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, "-m", "webhook", *args, "--kubeconfig", str(kubeconfig)],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "POD_NAMESPACE": "gpu-policy"},
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr  # --exit-zero: a denial is in the report
        code, report, _ = real_api.call("GET", "/apis/wgpolicyk8s.io/v1alpha2/namespaces/ml/policyreports/gpu-policy")
        assert code == 200, report
        versions.append(int(report["metadata"]["resourceVersion"]))
        time.sleep(0.1)
    results = [r for r in report["results"] if r["result"] == "fail"]
    assert [r["rule"] for r in results] == ["no-privileged-gpu"], report["results"]
    (result,) = results
    assert result["resources"][0]["name"] == "trainer" and report["summary"]["pass"] == 1
    assert versions[1] > versions[0]  # replaced, not duplicated
    print(f"\nFIGURE real API server, audit CronJob as its ServiceAccount: report ml/gpu-policy {report['summary']}")
