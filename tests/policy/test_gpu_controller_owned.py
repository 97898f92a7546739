"""gpu-controller-owned: no bare pods holding GPUs (kyverno#13879's request)."""

from __future__ import annotations

from typing import Any

from tests.helpers import container, pod, run, wrap
from webhook.config import default_policy
from webhook.policy import Mode

ID = "gpu-controller-owned"
ON = default_policy(modes={ID: Mode.DENY})


def owned(p: dict[str, Any], kind: str, api_version: str = "batch/v1") -> dict[str, Any]:
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "train", "uid": "u-1", "controller": True}
    ]
    return p


def test_off_by_default() -> None:
    assert default_policy().mode(ID) is Mode.OFF
    assert run(pod(container("notebook", gpu=1))) == []


def test_a_bare_gpu_pod_is_told_to_be_a_job() -> None:
    (v,) = run(pod(container("notebook", gpu=1)), ON, rule=ID)
    assert v.path == "metadata.ownerReferences" and v.value is None
    assert "a bare pod with a GPU holds it until someone deletes the pod" in v.detail
    assert v.fix.startswith("run it as a Job")


def test_the_same_pod_made_by_a_job_or_a_training_operator_is_fine() -> None:
    assert run(owned(pod(container("t", gpu=1)), "Job"), ON, rule=ID) == []
    assert run(owned(pod(container("t", gpu=1)), "PyTorchJob", "kubeflow.org/v1"), ON, rule=ID) == []
    assert run(owned(pod(container("t", gpu=1)), "ReplicaSet", "apps/v1"), ON, rule=ID) == []


def test_an_owner_of_another_kind_is_named() -> None:
    (v,) = run(owned(pod(container("t", gpu=1)), "ConfigMap", "v1"), ON, rule=ID)
    assert v.value == '"ConfigMap"' and "ConfigMap is not one of gpuControllerKinds" in v.detail
    more = default_policy(modes={ID: Mode.DENY}, gpu_controller_kinds=frozenset({"Job", "Notebook"}))
    assert run(owned(pod(container("t", gpu=1)), "Notebook", "kubeflow.org/v1"), more, rule=ID) == []


def test_templates_and_pods_without_a_gpu_are_not_judged() -> None:
    assert run(wrap(pod(container("t", gpu=1)), "Deployment"), ON, rule=ID) == []
    assert run(pod(container("web")), ON, rule=ID) == []
    claim = pod(container("t"), resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    claim["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    assert [v.rule for v in run(claim, ON, rule=ID)] == [ID]
