"""gpu-node-wide-resource: Intel's monitoring resource is a node agent's (issue 36)."""

from __future__ import annotations

import pytest

from tests.helpers import container, default_policy, pod, run, wrap
from webhook.policy.vendors import AMD, NVIDIA

ID = "gpu-node-wide-resource"


def intel(resource: str, value: object = 1, side: str = "limits") -> dict[str, object]:
    return container("m", image="intel/intel-opencl-icd:devel", resources={side: {resource: value}})


@pytest.mark.parametrize(
    "resource", ["gpu.intel.com/monitoring", "gpu.intel.com/i915_monitoring", "gpu.intel.com/xe_monitoring"]
)
def test_a_workload_asking_for_every_gpu_of_the_node_is_denied(resource: str) -> None:
    (v,) = run(pod(intel(resource), namespace="team-a"), rule=ID)
    assert v.path == f'spec.containers[0].resources.limits["{resource}"]'
    assert "every Intel GPU of the node" in v.detail and v.value == "1"
    # The exemption comes first (an agent needs it), then what a workload asks for instead.
    assert v.fix.startswith('if this is a trusted GPU node agent, the platform exempts it: "team-a/default"')
    assert v.fix.endswith("a workload requests gpu.intel.com/i915 or gpu.intel.com/xe")
    assert "nvidia.com/gpu" not in v.fix


def test_requests_init_and_templates_count_zero_does_not() -> None:
    (v,) = run(pod(container("c"), initContainers=[intel("gpu.intel.com/monitoring", "1", "requests")]), rule=ID)
    assert v.path == 'spec.initContainers[0].resources.requests["gpu.intel.com/monitoring"]'
    (t,) = run(wrap(pod(intel("gpu.intel.com/monitoring")), "DaemonSet"), rule=ID)
    assert t.path.startswith("spec.template.spec.containers[0]")
    assert run(pod(intel("gpu.intel.com/monitoring", 0)), rule=ID) == []
    assert run(pod(intel("gpu.intel.com/i915")), rule=ID) == []  # a countable GPU: a workload's


def test_intel_off() -> None:
    assert run(pod(intel("gpu.intel.com/monitoring")), default_policy(vendors=(NVIDIA, AMD)), rule=ID) == []


def test_one_exemption_lead_per_fix_in_an_agent_pod() -> None:
    """An XPU Manager-like DaemonSet (monitoring + SYS_ADMIN) is a node agent: every fix leads with the
    exemption once, and no fix tells it to request NVIDIA's GPU."""
    agent = container("xpumd", image="intel/xpumanager:latest", caps=["SYS_ADMIN"])
    agent["resources"] = {"limits": {"gpu.intel.com/monitoring": 1}}
    obj = wrap(pod(agent, namespace="monitoring", serviceAccountName="xpumanager"), "DaemonSet")
    found = run(obj)
    assert [v.rule for v in found] == ["no-privileged-gpu", ID]
    for v in found:
        assert v.fix.count("if this is a trusted GPU node agent") == 1, v.fix
        assert '"monitoring/xpumanager"' in v.fix and "nvidia.com/gpu" not in v.fix
    assert "every Intel GPU of the node" in found[0].detail  # not "the NVIDIA runtime"
