"""`gpu-policy check --values` judges exactly as the installed chart would.

The chart is rendered by the real helm with a values file; the server is started from the
ConfigMap helm rendered, and the API server is played from the webhook configurations helm
rendered (which kinds and namespaces are sent at all). Every corpus file then gets the same
verdict from `check --values` as from that cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.apiserver import RESOURCES
from tests.chart import find, render
from tests.helpers import ROOT, Server, corpus

VALUES: dict[str, Any] = {
    "webhook": {
        "customResources": {"kserve": True, "argo": True},
        "excludedNamespaces": ["kube-system", "kube-public", "kube-node-lease", "gpu-operator", "monitoring"],
    },
    "policy": {
        "rules": {"visible-devices-envfrom": "deny", "no-privileged-gpu": "warn"},
        "integrations": {"kai": {"enabled": True}},
    },
}
RELEASE_NAMESPACE = "platform"


def plural(obj: dict[str, Any]) -> tuple[str, str]:
    group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
    return group, RESOURCES.get(obj["kind"], ("", "", obj["kind"].lower() + "s"))[2]


def sent(hooks: list[dict[str, Any]], obj: dict[str, Any]) -> bool:
    """Whether a rendered validating webhook would be called for this object at all."""
    group, resource = plural(obj)
    namespace = obj.get("metadata", {}).get("namespace", "default")
    for hook in hooks:
        excluded: set[str] = set()
        for expr in hook.get("namespaceSelector", {}).get("matchExpressions", []):
            if expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn":
                excluded |= set(expr["values"])
        if namespace in excluded:
            continue
        for rule in hook["rules"]:
            if (group in rule["apiGroups"] or "*" in rule["apiGroups"]) and resource in rule["resources"]:
                return True
    return False


def rules_in(text: str, prefix: str) -> list[str]:
    return sorted({part.split(" ", 1)[0] for part in text.removeprefix(prefix).split("), ") if part})


def test_check_with_chart_values_agrees_with_the_rendered_chart(
    start_server: Callable[..., Server], tmp_path: Path
) -> None:
    docs = render(VALUES, namespace=RELEASE_NAMESPACE, tmp=tmp_path)
    assert isinstance(docs, list)
    config = yaml.safe_load(find(docs, "ConfigMap")["data"]["config.yaml"])
    hooks = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    server = start_server(config)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "check",
            "-f",
            str(ROOT / "tests" / "corpus"),
            "--values",
            str(values),
            "--release-namespace",
            RELEASE_NAMESPACE,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    results = json.loads(r.stdout)["results"]
    objects = list(corpus().values())
    assert len(results) == len(objects)
    api = server.client()
    compared = unsent = 0
    try:
        for obj, result in zip(objects, results, strict=True):
            name = result["where"]
            if not sent(hooks, obj):
                unsent += 1
                assert result["decision"] == "skipped", name
                continue
            compared += 1
            response = api.validate(obj)
            message = response.get("status", {}).get("message", "")
            assert response["allowed"] is result["allowed"], (name, message, result)
            assert rules_in(message, "violates GPU policy: ") == sorted({v["rule"] for v in result["violations"]}), name
            warned = [
                w.removeprefix("would violate GPU policy: ").split(" ", 1)[0] for w in response.get("warnings", [])
            ]
            assert warned == [
                w.removeprefix("would violate GPU policy: ").split(" ", 1)[0] for w in result["warnings"]
            ], name
    finally:
        api.close()
    # Both sides of the comparison are exercised: KServe and Argo are switched on, NIM and Volcano
    # are not (their objects are never sent), and `monitoring` is excluded.
    assert compared >= 40 and unsent >= 4, (compared, unsent)
    reasons = {x["reason"] for x in results if x["decision"] == "skipped"}
    assert "not sent: webhook.customResources.nim is false" in reasons
    assert "namespace exempt (exemptNamespaces)" in reasons


def test_values_and_config_are_exclusive_and_bad_values_are_named(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"policy": {"rulez": {}}}))
    manifest = tmp_path / "p.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}))

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "webhook", "check", "-f", str(manifest), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )

    r = check("--values", str(values))
    assert r.returncode == 2 and f"{values}: policy: rulez: unknown key (did you mean rules?)" in r.stderr
    r = check("--values", str(values), "--config", str(values))
    assert r.returncode == 2 and "--values and --config" in r.stderr
