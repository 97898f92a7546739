"""The access rules' corpus (tests/corpus-access): manifests shaped after the public examples the
rules answer (Deckhouse's labelled namespaces, kyverno#13879's bare GPU pods, KAI-Scheduler#45's
fractions, the EKS p4d 8-GPU sample against a cap of 4, kubeflow/website#2460's quota), judged with
every access rule on (config.yaml) against a stand-in cluster whose namespaces (namespaces.yaml)
carry the labels and annotations. Through the server, with its cluster view watching the stand-in
API server, and through `gpu-policy check --cluster`: the same verdicts (expected.yaml) both ways."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import node_table
from tests.kubeapi import KubeApi
from tests.test_audit import cli
from tests.test_cluster_view import serve, synced, wait_for

CORPUS = Path(__file__).resolve().parent / "corpus-access"
CONFIG: dict[str, Any] = yaml.safe_load((CORPUS / "config.yaml").read_text())
NAMESPACES = list(yaml.safe_load_all((CORPUS / "namespaces.yaml").read_text()))
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text())
ACCESS = set(CONFIG["rules"])


def manifests() -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load((CORPUS / name).read_text()) for name in EXPECTED}


def test_every_manifest_has_an_expectation_and_every_access_rule_a_case() -> None:
    files = {p.name for p in CORPUS.glob("*.yaml")} - {"config.yaml", "namespaces.yaml", "expected.yaml"}
    assert files == set(EXPECTED)
    covered = {r for e in EXPECTED.values() for r in (*e.get("rules", ()), *e.get("warns", ()))}
    assert covered == ACCESS


def access(messages: list[str]) -> list[str]:
    return sorted({r for m in messages for r in ACCESS if f"{r} (" in m})


def test_through_the_server_with_the_stand_in_cluster(cert_dir: Path, tmp_path: Path) -> None:
    kube = KubeApi(cert_dir, bookmark_seconds=0.5).start()
    try:
        kube.put(*node_table(), *NAMESPACES)
        server = serve(kube, tmp_path, CONFIG)
        try:
            wait_for(lambda: f"{len(NAMESPACES)} namespaces" in synced(server), why="namespaces synced")
            client = server.client()
            try:
                for name, obj in manifests().items():
                    expected = EXPECTED[name]
                    response = client.validate(obj)
                    assert response["allowed"] is (expected["verdict"] == "allow"), (name, response)
                    message = (response.get("status") or {}).get("message", "")
                    assert access([message]) == sorted(expected.get("rules", [])), (name, message)
                    assert access(response.get("warnings") or []) == sorted(expected.get("warns", [])), name
            finally:
                client.close()
        finally:
            server.stop()
        assert not server.log_problems(0), server.log_problems(0)
    finally:
        kube.close()


def test_through_check_cluster(cert_dir: Path, tmp_path: Path) -> None:
    kube = KubeApi(cert_dir).start()
    try:
        kube.put(*node_table(), *NAMESPACES)
        paths = [str(CORPUS / name) for name in EXPECTED]
        r = cli(kube, tmp_path, "check", "--cluster", "--config", str(CORPUS / "config.yaml"), "-o", "json", *paths)
        assert r.returncode == 1, r.stderr
        results = json.loads(r.stdout)["results"]
        assert len(results) == len(EXPECTED)
        for name, result in zip(EXPECTED, results, strict=True):
            expected = EXPECTED[name]
            assert result["where"].endswith(f"{name} (document 1)")
            assert result["allowed"] is (expected["verdict"] == "allow"), (name, result)
            assert access([result["message"] or ""]) == sorted(expected.get("rules", [])), (name, result)
            assert access(result["warnings"]) == sorted(expected.get("warns", [])), (name, result)
    finally:
        kube.close()
