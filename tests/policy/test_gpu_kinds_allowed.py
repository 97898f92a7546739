"""gpu-kinds-allowed: the GPU kinds (whole, shared, time-sliced, mig:<profile>, dra:<class>) a
namespace may use, from its gpu-policy.io/gpu-kinds annotation or gpuKindsAllowed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import container, node_table, pod, run, with_nodes, wrap
from webhook.config import default_policy
from webhook.policy import Mode, Policy
from webhook.policy.rules.gpu_kinds_allowed import parse_kinds
from webhook.policy.types import NamespaceFacts

ID = "gpu-kinds-allowed"
NAMESPACES = {
    "notebooks": NamespaceFacts((), "whole, shared"),  # fractions allowed here
    "inference": NamespaceFacts((), "mig:1g.*"),
    "broken": NamespaceFacts((), "whole, halves"),
    "plain": NamespaceFacts((("team", "a"),), ""),
}


def policy(**changes: Any) -> Policy:
    return with_nodes(node_table(), default_policy(modes={ID: Mode.DENY}, **changes), namespaces=NAMESPACES)


def limits(namespace: str, **resources: Any) -> dict[str, Any]:
    return pod(container("main", resources={"limits": resources}), namespace=namespace)


def test_off_by_default_and_the_isolating_kinds_are_the_default() -> None:
    assert default_policy().mode(ID) is Mode.OFF
    assert default_policy().gpu_kinds_allowed == ("whole", "mig:*", "dra:*")
    assert run(limits("plain", **{"nvidia.com/gpu": "0.5"})) == []


def test_a_fraction_in_a_namespace_that_does_not_allow_fractions() -> None:
    """KAI-Scheduler#45: fractions do not isolate memory, so the platform allows them per namespace."""
    (v,) = run(limits("plain", **{"nvidia.com/gpu": "0.5"}), policy(), rule=ID)
    assert v.path == "spec.containers[0].resources" and v.container == "main"
    assert (
        v.detail == "uses a shared GPU (nvidia.com/gpu: 0.5); this namespace may use whole, mig, dra (gpuKindsAllowed)"
    )
    assert "allow shared here" in v.fix
    assert run(limits("notebooks", **{"nvidia.com/gpu": "0.5"}), policy(), rule=ID) == []
    assert run(limits("plain", **{"nvidia.com/gpu": 1}), policy(), rule=ID) == []


def test_kai_fractions_hami_and_time_slices_are_sharing_kinds() -> None:
    kai = pod(container("main"), namespace="plain", schedulerName="kai-scheduler")
    kai["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    p = policy()
    (v,) = run(kai, p, rule=ID)
    assert "uses a shared GPU (KAI fraction (gpu-fraction annotation))" in v.detail
    hami = limits("plain", **{"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000})
    assert {v.detail.split(" (")[0] for v in run(hami, policy(hami=True), rule=ID)} == {"uses a shared GPU"}
    (v,) = run(limits("plain", **{"nvidia.com/gpu.shared": 1}), p, rule=ID)
    assert v.detail.startswith("uses a time-sliced GPU (nvidia.com/gpu.shared: 1)")


def test_mig_profiles_by_pattern() -> None:
    p = policy()
    assert run(limits("inference", **{"nvidia.com/mig-1g.5gb": 1}), p, rule=ID) == []
    (v,) = run(limits("inference", **{"nvidia.com/mig-3g.20gb": 1}), p, rule=ID)
    assert "uses a mig:3g.20gb GPU (nvidia.com/mig-3g.20gb: 1); this namespace may use mig:1g.*" in v.detail
    assert "gpu-policy.io/gpu-kinds annotation" in v.detail
    (v,) = run(limits("inference", **{"nvidia.com/gpu": 1}), p, rule=ID)  # whole cards not here
    assert v.detail.startswith("uses a whole GPU")


def test_dra_claims_by_device_class() -> None:
    claim = pod(container("main", resources={"claims": [{"name": "gpu"}]}), namespace="plain")
    claim["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "one-gpu"}]
    only_nvidia = policy(gpu_kinds_allowed=("whole", "dra:gpu.nvidia.com"))
    resolved = with_nodes(
        node_table(), only_nvidia, namespaces=NAMESPACES, claims={("plain", "one-gpu"): ("gpu.nvidia.com",)}
    )
    assert run(claim, resolved, rule=ID) == []
    (v,) = run(claim, only_nvidia, rule=ID)  # the claim not seen: its class unknown, failing closed
    assert "a DRA claim whose device class gpu-policy cannot resolve yet" in v.detail
    assert run(claim, policy(), rule=ID) == []  # dra (every class) is in the default list


def test_an_annotation_that_does_not_parse_fails_closed() -> None:
    (v,) = run(limits("broken", **{"nvidia.com/gpu": 1}), policy(), rule=ID)
    assert v.path == "metadata.namespace" and v.value == '"broken"'
    assert '"halves" is not a GPU kind' in v.detail and "failing closed" in v.detail


def test_unknown_namespaces_get_the_config_list_and_templates_are_judged() -> None:
    p = policy()
    (v,) = run(wrap(limits("new-team", **{"nvidia.com/gpu": "0.5"}), "Deployment"), p, rule=ID)
    assert v.path == "spec.template.spec.containers[0].resources" and "(gpuKindsAllowed)" in v.detail
    assert run(limits("new-team", **{"nvidia.com/gpu": 2}), p, rule=ID) == []
    assert run(pod(container("cpu"), namespace="plain"), p, rule=ID) == []


@pytest.mark.parametrize(
    ("text", "patterns", "problem"),
    [
        ("whole, mig", ("whole", "mig:*"), ""),
        ("dra:gpu.nvidia.com,time-sliced", ("dra:gpu.nvidia.com", "time-sliced"), ""),
        ("whole:x", (), "only mig and dra take a pattern"),
        ("gpus", (), '"gpus" is not a GPU kind'),
        ("whole,,shared", (), "'' is not a GPU kind"),
    ],
)
def test_parse_kinds(text: str, patterns: tuple[str, ...], problem: str) -> None:
    got, error = parse_kinds(text)
    assert got == patterns and problem in error and bool(error) == bool(problem)
