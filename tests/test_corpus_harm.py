"""First, do no harm (issue 48): real non-GPU workloads, rendered from their own charts into their
usual namespaces (tests/corpus-harm, sources.yaml names each one's repository, commit and command),
are never refused by gpu-policy: not while it is down, in any enforcement mode, not by its rules,
and not where they run outside the exempt namespaces. Isolation's NVIDIA_VISIBLE_DEVICES=void is
the only change made to them (no AMD entry on a fleet without the AMD runtime).

The pods are the ones their controllers make: a template becomes a Pod with its owner, and a
DaemonSet's pod gets the node affinity kube-controller-manager gives every daemon pod
(pkg/controller/daemon/util ReplaceDaemonSetPodNodeNameNodeAffinity: a `metadata.name In [node]`
matchFields term in each required term), which a condition reading "any affinity" would catch.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.celconditions import compile_webhooks, sent
from tests.celnative import compile_validations, request
from tests.helpers import VOID, Server
from webhook.config import default_policy
from webhook.policy.objects import find_templates
from webhook.policy.templates import expand

HARM = Path(__file__).resolve().parent / "corpus-harm"
SOURCES: list[dict[str, Any]] = yaml.safe_load((HARM / "sources.yaml").read_text())
# Out of every exempt namespace: where a platform that moved its agents would run them.
ELSEWHERE = "team-a"
VOID_IMEX = {"name": "NVIDIA_IMEX_CHANNELS", "value": "void"}
OWNERS = {"Deployment": "ReplicaSet", "CronJob": "Job"}


def _daemon_affinity(spec: dict[str, Any], node: str = "node-1") -> None:
    """What the DaemonSet controller does to each pod's affinity (see the module docstring)."""
    field = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required or not required.get("nodeSelectorTerms"):
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchFields": [field]}]
        }
        return
    for term in required["nodeSelectorTerms"]:
        term["matchFields"] = [field]


def controller_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """`obj` if it is a Pod, else the Pods its controller makes, owner reference and all."""
    if obj["kind"] == "Pod":
        return [copy.deepcopy(obj)]
    group = obj["apiVersion"].rpartition("/")[0]
    templates = find_templates(group, obj["kind"], default_policy())
    assert templates is not None, f"{obj['kind']}: no pod template known"
    out = []
    for pattern in templates.paths:
        for keys in expand(obj, pattern):
            node: Any = obj
            for key in keys:
                node = node[key]
            template = copy.deepcopy(node)
            meta = dict(template.get("metadata") or {})
            meta.update(name=f"{obj['metadata']['name']}-x1", namespace=obj["metadata"]["namespace"])
            owner = OWNERS.get(obj["kind"], obj["kind"])
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner,
                    "name": obj["metadata"]["name"],
                    "uid": "u",
                    "controller": True,
                }
            ]
            spec = template["spec"]
            if obj["kind"] == "DaemonSet":
                _daemon_affinity(spec)
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return out


@functools.cache
def workloads() -> dict[str, list[dict[str, Any]]]:
    """Each file's pods, by "file/Kind/name"."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(HARM.glob("*.yaml")):
        if path.name == "sources.yaml":
            continue
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                out[f"{path.stem}/{obj['kind']}/{obj['metadata']['name']}"] = controller_pods(obj)
    return out


def pods() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, made in workloads().items():
        for i, p in enumerate(made):
            yield f"{name}#{i}", p


def test_the_corpus_is_what_it_says() -> None:
    """At least 30 workloads, every file's source named, nothing in it about GPUs."""
    files = {p.name for p in HARM.glob("*.yaml")} - {"sources.yaml"}
    assert files == {s["file"] for s in SOURCES}
    assert all(s["repo"] and s["commit"] and s["command"] for s in SOURCES)
    assert len(files) >= 30 and sum(1 for _ in pods()) >= 100
    for path in files:
        head = (HARM / path).read_text().splitlines()[:3]
        assert any(line.startswith("# Source:") for line in head), path
        assert "nvidia.com/" not in (HARM / path).read_text(), path
    kinds = {p["metadata"]["ownerReferences"][0]["kind"] for _, p in pods() if "ownerReferences" in p["metadata"]}
    assert {"DaemonSet", "ReplicaSet", "StatefulSet", "Job"} <= kinds


# Each enforcement mode where it is the chart's (1.30: webhook only; 1.36: each).
MODES = [("webhook", "1.30.0"), ("webhook", "1.36.0"), ("both", "1.36.0"), ("native", "1.36.0")]


@pytest.mark.parametrize(("enforcement", "kube"), MODES)
def test_an_outage_refuses_none_of_them(enforcement: str, kube: str, tmp_path: Path) -> None:
    """While no replica answers, the API server refuses what a fail-closed webhook is sent: none."""
    hooks = compile_webhooks({"enforcement": enforcement}, tmp_path, kube)
    closed = {name: programs for name, (policy, programs) in hooks.items() if policy == "Fail"}
    assert "pods.validate.gpu-policy.io" in closed or enforcement == "native"
    refused = [f"{name} by {hook}" for name, p in pods() for hook, programs in closed.items() if sent(programs, p)]
    assert refused == []


def test_the_native_policies_deny_none_of_them(tmp_path: Path) -> None:
    """enforcement both and native: the rules' ValidatingAdmissionPolicies refuse none either."""
    policies = compile_validations({}, tmp_path)
    denied = []
    for name, p in pods():
        for rule, (policy, actions) in policies.items():
            if "Deny" in actions and policy.failures(p, request(p["metadata"]["namespace"])):
                denied.append(f"{name}: {rule}")
    assert denied == []


@pytest.fixture(scope="module")
def shipped(start_server: Callable[..., Server]) -> ApiServer:
    """The server with the policy as it ships (no config file)."""
    return start_server({}).client()


def _added_env(before: dict[str, Any], after: dict[str, Any]) -> list[list[dict[str, Any]]]:
    lists = ("initContainers", "containers", "ephemeralContainers")
    olds = [c for k in lists for c in before["spec"].get(k, [])]
    news = [c for k in lists for c in after["spec"].get(k, [])]
    out = []
    for old, new in zip(olds, news, strict=True):
        assert {k: v for k, v in new.items() if k != "env"} == {k: v for k, v in old.items() if k != "env"}
        before_env, after_env = old.get("env") or [], new.get("env") or []  # `env: null` is no env
        assert after_env[: len(before_env)] == before_env
        out.append(after_env[len(before_env) :])
    return out


@pytest.mark.parametrize("where", ["usual", ELSEWHERE])
def test_none_is_denied_and_only_isolation_touches_them(shipped: ApiServer, where: str) -> None:
    """Through the real server: /mutate then /validate on the result, as the API server sends them,
    in their usual namespace and moved out of it. Warnings name node access with the exemption a
    node agent takes; the only patch is NVIDIA_VISIBLE_DEVICES=void."""
    warned: dict[str, list[str]] = {}
    for name, p in pods():
        namespace = p["metadata"]["namespace"] if where == "usual" else ELSEWHERE
        p["metadata"]["namespace"] = namespace
        _response, patched = shipped.mutate(p, namespace=namespace)
        for added in _added_env(p, patched):
            # NVIDIA's isolation alone: void, and IMEX's void where an envFrom could set it
            assert added in ([], [VOID], [VOID_IMEX, VOID]), (name, added)
        response = shipped.validate(patched, namespace=namespace)
        assert response["allowed"] is True, (name, response.get("status"))
        for warning in response.get("warnings", []):
            assert re.match(r"would violate GPU policy: node-wide-access \(", warning), (name, warning)
            warned.setdefault(name.split("/")[0], []).append(warning)
    # Node access is reported, not hidden: the agents that reach device channels are told.
    if where == ELSEWHERE:
        assert {"falco", "datadog-agent", "prometheus-node-exporter", "csi-driver-smb"} <= set(warned), sorted(warned)
    assert not {"kube-state-metrics", "argo-cd", "cert-manager", "promtail", "fluent-bit"} & set(warned)
