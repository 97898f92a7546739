"""gpu-limitrange: LimitRange defaults would hand every container a GPU."""

from __future__ import annotations

from tests.helpers import POLICY, default_policy, run
from webhook.policy import Mode, engine

ID = "gpu-limitrange"


def limit_range(**limits: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "l", "namespace": "ml"},
        "spec": {"limits": [{"type": "Container", **limits}]},
    }


def test_limitrange_defaults() -> None:
    lr = limit_range(
        default={"nvidia.com/gpu": "1", "cpu": "1"}, defaultRequest={"nvidia.com/gpu": 1}, max={"nvidia.com/gpu": "4"}
    )
    found = engine.find_violations(lr, "", "LimitRange", POLICY)
    assert found is not None
    assert [v.path for v in found] == [
        'spec.limits[0].default["nvidia.com/gpu"]',
        'spec.limits[0].defaultRequest["nvidia.com/gpu"]',
    ]
    assert found[0].describe().startswith('gpu-limitrange (LimitRange: spec.limits[0].default["nvidia.com/gpu"] is "1"')
    fine = limit_range(default={"cpu": "1"}, max={"nvidia.com/gpu": "2"})
    assert engine.find_violations(fine, "", "LimitRange", POLICY) == []
    assert engine.find_violations(lr, "", "LimitRange", default_policy(modes={"gpu-limitrange": Mode.OFF})) == []


def test_every_vendors_gpu_is_caught() -> None:
    """Issue 36: an AMD or Intel GPU, or a partition, handed out by default is the same mistake."""
    for resource in ("amd.com/gpu", "amd.com/cpx_nps4", "gpu.intel.com/i915", "nvidia.com/mig-1g.5gb"):
        obj = {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "defaults", "namespace": "team-a"},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {resource: "1", "cpu": "1"}}]},
        }
        (v,) = run(obj, rule=ID)
        assert v.path == f'spec.limits[0].defaultRequest["{resource}"]' and f"requests.{resource}" in v.fix
