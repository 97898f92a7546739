"""The adversarial corpus (tests/corpus): every bypass denied or warned, every clean manifest allowed.

Each manifest goes through the server the way the API server sends it (Pods: /mutate, the
patch applied, then /validate on the result) and through `gpu-policy check`, so a regression
in either path fails here. tests/corpus/expected.yaml holds the verdicts.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.helpers import AMD_NONE, VOID, Server
from webhook.policy import RULE_IDS

CORPUS = Path(__file__).resolve().parent / "corpus"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS.parent / "corpus-expected.yaml").read_text())


def test_every_manifest_has_an_expectation() -> None:
    files = {p.name for p in CORPUS.glob("*.yaml")}
    assert files == set(EXPECTED)
    verdicts = [e["verdict"] for e in EXPECTED.values()]
    assert verdicts.count("deny") >= 30 and verdicts.count("allow") >= 8


@pytest.fixture(scope="module")
def corpus_api(start_server: Callable[..., Server]) -> ApiServer:
    return start_server({"clusterVersion": "unknown"}).client()


def rules_in(text: str) -> list[str]:
    return [r for r in RULE_IDS if f"{r} (" in text]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    return [c for kind in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(kind, [])]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_through_the_server(corpus_api: ApiServer, name: str) -> None:
    expected = EXPECTED[name]
    obj = yaml.safe_load((CORPUS / name).read_text())
    if obj["kind"] == "Pod":
        response, patched = corpus_api.mutate(copy.deepcopy(obj))
        isolated, amd = [], []
        for before, after in zip(containers(obj), containers(patched), strict=True):
            old = before.get("env", [])
            added = after.get("env", [])[len(old) :]
            assert after.get("env", [])[: len(old)] == old  # isolation only appends
            if added[-1:] == [AMD_NONE]:  # AMD's entry comes last, after NVIDIA's
                amd.append(after["name"])
                added = added[:-1]
            if added == [VOID]:
                isolated.append(after["name"])
        assert sorted(isolated) == sorted(expected.get("isolated", isolated))
        assert sorted(amd) == sorted(expected.get("amd", amd))
        obj = patched
    response = corpus_api.validate(obj)
    verdict = expected["verdict"]
    if verdict == "deny":
        assert response["allowed"] is False
        assert rules_in(response["status"]["message"]) == expected["rules"]
        assert rules_in(" ".join(response.get("warnings", []))) == expected.get("warns", [])
        if "exemption" in expected:  # a node agent: each fix leads with the exemption
            lead = f'fix: if this is a trusted GPU node agent, the platform exempts it: "{expected["exemption"]}"'
            assert response["status"]["message"].count(lead) == len(expected["rules"])
    else:
        assert response["allowed"] is True, response.get("status")
        warned = rules_in(" ".join(response.get("warnings", [])))
        assert warned == (expected["rules"] if verdict == "warn" else [])


@pytest.fixture(scope="module")
def cli_results() -> dict[str, dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-f", str(CORPUS), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = json.loads(result.stdout)
    assert out["exitCode"] == result.returncode == 1
    by_file: dict[str, dict[str, Any]] = {}
    for r in out["results"]:
        by_file[Path(r["where"].split(" (document")[0]).name] = r
    return by_file


@pytest.mark.parametrize("name", sorted(set(EXPECTED)))
def test_through_gpu_policy_check(cli_results: dict[str, dict[str, Any]], name: str) -> None:
    expected = EXPECTED[name]
    r = cli_results[name]
    if expected["verdict"] == "deny":
        assert r["allowed"] is False
        assert [v["rule"] for v in r["violations"]] == [
            rule for rule in expected["rules"] for v in r["violations"] if v["rule"] == rule
        ]
        assert sorted({v["rule"] for v in r["violations"]}) == sorted(expected["rules"])
        assert r["message"] and all(v["fix"] for v in r["violations"])
        assert rules_in(" ".join(r["warnings"])) == expected.get("warns", [])
        if "exemption" in expected:
            lead = f'if this is a trusted GPU node agent, the platform exempts it: "{expected["exemption"]}"'
            assert all(v["fix"].startswith(lead) for v in r["violations"])
    else:
        assert r["allowed"] is True
        assert rules_in(" ".join(r["warnings"])) == (expected["rules"] if expected["verdict"] == "warn" else [])
