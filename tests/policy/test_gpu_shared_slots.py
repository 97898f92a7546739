"""gpu-shared-slots: more than one time-sliced/MPS slot in a container."""

from __future__ import annotations

from typing import Any

from tests.helpers import pod, run, wrap
from webhook.config import default_policy

ID = "gpu-shared-slots"


def slots(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "c", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": resources}


def test_one_slot_is_fine_more_are_flagged_with_the_kubelet_reason() -> None:
    assert run(pod(slots({"nvidia.com/gpu.shared": 1})), rule=ID) == []
    assert run(pod(slots({"nvidia.com/gpu.shared": "1000m"})), rule=ID) == []
    (v,) = run(pod(slots({"nvidia.com/gpu.shared": 2})), rule=ID)
    assert v.path == 'spec.containers[0].resources.limits["nvidia.com/gpu.shared"]'
    assert "maximum request size for shared resources is 1" in v.detail
    assert v.fix.startswith("request 1 nvidia.com/gpu.shared")


def test_renamed_mig_slots_and_templates_with_requests_only() -> None:
    (v,) = run(wrap(pod(slots(requests={"nvidia.com/mig-1g.5gb.shared": "3"})), "Deployment"), rule=ID)
    assert v.path == 'spec.template.spec.containers[0].resources.requests["nvidia.com/mig-1g.5gb.shared"]'


def test_whole_gpus_and_unparsable_values_are_not_this_rules_business() -> None:
    assert run(pod(slots({"nvidia.com/gpu": 4})), rule=ID) == []
    assert run(pod(slots({"nvidia.com/gpu.shared": "two"})), rule=ID) == []


def test_the_shared_names_come_from_the_model() -> None:
    policy = default_policy(shared_resources=("example.com/vgpu",))
    assert [v.rule for v in run(pod(slots({"example.com/vgpu": 2})), policy, rule=ID)] == [ID]
    assert run(pod(slots({"nvidia.com/gpu.shared": 2})), policy, rule=ID) == []


def test_warns_by_default() -> None:
    from webhook.policy import Mode

    assert default_policy().mode(ID) is Mode.WARN
