"""gpu-namespace-allowed: GPU pods only in the namespaces the platform names or labels (Deckhouse's
rule), failing closed while gpu-policy has not seen a namespace's labels."""

from __future__ import annotations

from typing import Any

from tests.helpers import container, node_table, pod, run, with_nodes, wrap
from webhook.config import default_policy
from webhook.policy import Mode, Policy

ID = "gpu-namespace-allowed"
LABELLED = (("gpu.deckhouse.io/enabled", "true"), ("team", "vision"))
NAMESPACES = {"team-a": LABELLED, "team-b": (("team", "search"),), "sandbox": ()}


def policy(**changes: Any) -> Policy:
    settings: dict[str, Any] = {"gpu_namespace_labels": (("gpu.deckhouse.io/enabled", "true"),), **changes}
    return with_nodes(node_table(), default_policy(modes={ID: Mode.DENY}, **settings), namespaces=NAMESPACES)


def gpu_pod(namespace: str) -> dict[str, object]:
    return pod(container("train", gpu=1), namespace=namespace)


def test_off_by_default() -> None:
    assert default_policy().mode(ID) is Mode.OFF
    assert run(gpu_pod("team-b")) == []


def test_a_labelled_namespace_may_and_others_may_not() -> None:
    assert run(gpu_pod("team-a"), policy(), rule=ID) == []
    (v,) = run(gpu_pod("team-b"), policy(), rule=ID)
    assert v.path == "metadata.namespace" and v.value == '"team-b"'
    assert "does not carry labels matching gpu.deckhouse.io/enabled=true" in v.detail
    assert "label the namespace" in v.fix
    (v,) = run(wrap(gpu_pod("sandbox"), "Deployment"), policy(), rule=ID)
    assert v.path == "metadata.namespace"


def test_pods_without_a_gpu_and_listed_namespaces_are_fine() -> None:
    assert run(pod(container("web"), namespace="team-b"), policy(), rule=ID) == []
    assert run(gpu_pod("team-b"), policy(gpu_namespaces=frozenset({"team-b"})), rule=ID) == []


def test_unknown_namespaces_and_an_unsynced_view_fail_closed() -> None:
    (v,) = run(gpu_pod("brand-new"), policy(), rule=ID)
    assert "is not yet in gpu-policy's view of namespaces (created a moment ago?): failing closed" in v.detail
    unsynced = default_policy(modes={ID: Mode.DENY}, gpu_namespace_labels=(("gpu.deckhouse.io/enabled", "true"),))
    (v,) = run(gpu_pod("team-a"), unsynced, rule=ID)
    assert "does not see namespace labels yet (its cluster view is not synced): failing closed" in v.detail


def test_selector_expressions_and_the_namespace_name_label() -> None:
    expressions = (("team", "In", ("vision", "search")), ("quarantine", "DoesNotExist", ()))
    p = policy(gpu_namespace_labels=(), gpu_namespace_expressions=expressions)
    assert run(gpu_pod("team-a"), p, rule=ID) == run(gpu_pod("team-b"), p, rule=ID) == []
    assert [v.rule for v in run(gpu_pod("sandbox"), p, rule=ID)] == [ID]
    (v,) = run(gpu_pod("sandbox"), p, rule=ID)
    assert "team in (vision,search),!quarantine" in v.detail
    # kubernetes.io/metadata.name is every namespace's own label (the view keeps it implicit).
    by_name = policy(
        gpu_namespace_labels=(), gpu_namespace_expressions=(("kubernetes.io/metadata.name", "In", ("sandbox",)),)
    )
    assert run(gpu_pod("sandbox"), by_name, rule=ID) == []


def test_only_a_list_of_names() -> None:
    names = default_policy(modes={ID: Mode.DENY}, gpu_namespaces=frozenset({"team-a"}))
    assert run(gpu_pod("team-a"), names, rule=ID) == []
    (v,) = run(gpu_pod("team-b"), names, rule=ID)
    assert v.detail == "may not run GPU pods: it is not in gpuNamespaces"
