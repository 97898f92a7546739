"""Audit first, as one setting (issue 50, item 1): `policy.rollout: audit` installs every deny rule
as warn + audit, in the server and in the API server's own policies, and makes everything gpu-policy
installs fail open; `helm upgrade` to `enforce` changes nothing else.

Through a real helm (the rendered chart, enforcement webhook on 1.30 and both on 1.36), the real
server over TLS, and `check --engine cel` (the native policies as the API server runs them)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import render
from tests.helpers import ROOT, Server, container, pod
from webhook import certs
from webhook.config import from_mapping
from webhook.policy import Mode

CORPUS = ROOT / "tests" / "corpus"
PRIVILEGED_GPU = pod(container("train", gpu=1, privileged=True))


@pytest.fixture(scope="module")
def fixed_certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Provided certificates, so two renders differ only by what the values change."""
    out = tmp_path_factory.mktemp("rollout-certs")
    certs.write(certs.generate("gpu-policy", "gpu-policy", days=2), out)
    ca = base64.b64encode((out / "ca.crt").read_bytes()).decode()
    return {"mode": "provided", "existingSecret": "gpu-policy-tls", "caBundle": ca}


def rendered(rollout: str, kube_version: str, provided: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    docs = render({"certificates": provided, "policy": {"rollout": rollout}}, kube_version=kube_version, tmp=tmp)
    assert isinstance(docs, list)
    return docs


PREFIXES = ("violates GPU policy: ", "would violate GPU policy: ")


def without_rollout(doc: dict[str, Any]) -> Any:
    """`doc` with what rollout may change blanked: failure policies, binding actions, the messages'
    first words, the config's rollout key and the pods' config checksum."""
    text = json.dumps(doc)
    text = re.sub(r'"failurePolicy": "(Fail|Ignore)"', '"failurePolicy": "?"', text)
    text = re.sub(r'"validationActions": \[[^]]*\]', '"validationActions": "?"', text)
    text = re.sub(r"rollout: (audit|enforce)", "rollout: ?", text)
    text = re.sub(r'"checksum/config": "[0-9a-f]+"', '"checksum/config": "?"', text)
    # helm test's probe: a denial under enforce, the warning under audit
    text = re.sub(r'"--expect=(denied|warned)"', '"--expect=?"', text)
    text = text.replace(PREFIXES[1], "?").replace(PREFIXES[0], "?")
    return json.loads(text)


@pytest.mark.parametrize("kube_version", ["1.30.0", "1.36.0"])
def test_audit_rollout_refuses_nothing_and_enforcing_changes_nothing_else(
    kube_version: str, fixed_certs: dict[str, Any], tmp_path: Path
) -> None:
    """Under audit: no webhook and no admission policy fails closed, every deny binding warns and
    audits (no binding denies), and every deny rule's message says "would violate". Against
    enforce, object by object, nothing else differs."""
    audit, enforce = (rendered(r, kube_version, fixed_certs, tmp_path) for r in ("audit", "enforce"))
    assert [(d["kind"], d["metadata"]["name"]) for d in audit] == [(d["kind"], d["metadata"]["name"]) for d in enforce]
    for a, e in zip(audit, enforce, strict=True):
        assert without_rollout(a) == without_rollout(e), (a["kind"], a["metadata"]["name"])
    policies = [
        *(h for d in audit if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]),
        *(d["spec"] for d in audit if d["kind"] in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")),
    ]
    assert policies and {p["failurePolicy"] for p in policies} == {"Ignore"}
    assert "Fail" in {p["failurePolicy"] for d in enforce for p in _failure_policies(d)}
    bindings = {d["metadata"]["name"]: d["spec"] for d in audit if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert all("Deny" not in b["validationActions"] for b in bindings.values())
    denying = [n for n, b in bindings.items() if b["validationActions"] == ["Warn", "Audit"]]
    if kube_version == "1.36.0":  # enforcement both: the rules' deny policies
        assert any(n.endswith("-rules-deny") for n in denying), sorted(bindings)
    assert PREFIXES[0] not in json.dumps(audit)
    config = next(d for d in audit if d["kind"] == "ConfigMap")
    assert yaml.safe_load(config["data"]["config.yaml"])["rollout"] == "audit"


def _failure_policies(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"].endswith("WebhookConfiguration"):
        return list(doc["webhooks"])
    if doc["kind"] in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        return [doc["spec"]]
    return []


def test_the_notes_lead_with_the_rollout(fixed_certs: dict[str, Any], tmp_path: Path) -> None:
    from tests.chart import CHART, PUSHED, helm

    def notes(rollout: str) -> str:
        out = helm(
            "install", "gpu-policy", str(CHART), "--dry-run=client", "-n", "gpu-policy",
            "--set", f"image.repository={PUSHED}", "--set", f"policy.rollout={rollout}", "--set", "replicaCount=1",
        ).stdout  # fmt: skip
        return out[out.index("NOTES:") :]

    audit = notes("audit")
    assert audit.splitlines()[1].startswith("AUDIT ROLLOUT (policy.rollout=audit): nothing is refused")
    assert "--set policy.rollout=enforce" in audit and "WARNING" not in audit  # nothing fails closed
    assert "WARNING: replicaCount is 1" in notes("enforce")
    assert "install with\n--set policy.rollout=audit first" in notes("enforce")


def test_the_config_takes_enforce_or_audit_only() -> None:
    with pytest.raises(ValueError, match=r"rollout: must be enforce or audit, got .dry-run."):
        from_mapping({"rollout": "dry-run"})
    policy = from_mapping({"rollout": "audit"}).policy
    assert policy.audited == {r for r, m in from_mapping({}).policy.modes.items() if m is Mode.DENY}
    assert Mode.DENY not in policy.modes.values()
    assert from_mapping({"rollout": "audit", "rules": {"host-shm": "audit"}}).policy.mode("host-shm") is Mode.AUDIT


def test_the_server_warns_and_records_what_enforcing_would_refuse(start_server: Callable[..., Server]) -> None:
    """A privileged GPU pod under audit: allowed, warned ("would violate"), recorded as the audit
    annotation its rule would give in audit mode; a warn rule keeps its warning and gets no
    annotation; under enforce the same pod is refused."""
    server = start_server({"rollout": "audit", "clusterVersion": "1.30"})
    client = server.client()
    try:
        response = client.validate(PRIVILEGED_GPU)
    finally:
        client.close()
    assert response["allowed"] is True
    assert any(w.startswith("would violate GPU policy: no-privileged-gpu") for w in response["warnings"])
    assert list(response["auditAnnotations"]) == ["no-privileged-gpu"]
    assert response["auditAnnotations"]["no-privileged-gpu"].startswith("would violate GPU policy: no-privileged-gpu")
    assert "gpu_policy_reviews_total" in server.scrape()


def _check(tmp_path: Path, *args: str) -> dict[str, Any]:
    config = tmp_path / "audit.yaml"
    config.write_text("rollout: audit\nclusterVersion: '1.36'\n")
    files = [str(CORPUS / n) for n in ("privileged-gpu.yaml", "env-all.yaml", "clean-gpu-pod.yaml")]
    run = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "--config", str(config), "-o", "json", *args, *files],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr  # nothing denied: exit 0
    return dict(json.loads(run.stdout))


def test_the_native_policies_audit_as_the_webhook_does(tmp_path: Path) -> None:
    """`check --engine cel` (the deny policies bound Warn and Audit, messages "would violate") and
    the webhook engine give the same answers, warnings and audit annotations under audit."""
    webhook, native = _check(tmp_path), _check(tmp_path, "--engine", "cel")
    assert [r["decision"] for r in webhook["results"]] == [r["decision"] for r in native["results"]]
    assert {r["decision"] for r in webhook["results"]} == {"allowed"}
    assert sum(bool(r["warnings"]) for r in webhook["results"]) == 2
    for a, b in zip(webhook["results"], native["results"], strict=True):
        assert sorted(a["warnings"]) == sorted(b["warnings"]), a["where"]
        assert sorted(a["auditAnnotations"]) == sorted(b["auditAnnotations"]), a["where"]
