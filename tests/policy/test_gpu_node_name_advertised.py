"""gpu-node-name-advertised: a pod bound by spec.nodeName gets its GPU only where the node has it (issue 32 #4)."""

from __future__ import annotations

from tests.helpers import POLICY, container, node, pod, run, with_nodes, wrap

ID = "gpu-node-name-advertised"
CLUSTER = with_nodes([node("a100-1", allocatable={"nvidia.com/gpu": "8"}), node("cpu-1")])


def mig(count: int = 1) -> dict[str, object]:
    return container("t", resources={"limits": {"nvidia.com/mig-7g.80gb": count}})


def test_a_resource_the_named_node_lacks_is_denied() -> None:
    (v,) = run(pod(mig(), nodeName="a100-1"), CLUSTER, ID)
    assert v.path == 'spec.containers[0].resources.limits["nvidia.com/mig-7g.80gb"]'
    assert 'node "a100-1" does not advertise nvidia.com/mig-7g.80gb' in v.detail
    assert "remove spec.nodeName" in v.fix


def test_unknown_nodes_and_no_view_fail_closed() -> None:
    (v,) = run(pod(container("t", gpu=1), nodeName="new-node"), CLUSTER, ID)
    assert "has not seen node" in v.detail
    (v,) = run(pod(container("t", gpu=1), nodeName="a100-1"), POLICY, ID)
    assert "no cluster view" in v.detail


def test_an_advertised_resource_and_scheduled_pods_are_fine() -> None:
    assert run(pod(container("t", gpu=1), nodeName="a100-1"), CLUSTER, ID) == []
    assert run(pod(mig()), CLUSTER, ID) == []  # the scheduler places it only where it is allocatable
    assert run(pod(container("t"), nodeName="cpu-1"), CLUSTER, ID) == []  # no GPU asked
    assert run(wrap(pod(mig(), nodeName="a100-1"), "Deployment"), CLUSTER, ID) == []  # templates: pods are judged


def test_companions_and_dra_extended_names_need_the_node_too() -> None:
    hami = container("t", resources={"limits": {"nvidia.com/gpumem": 4000}})
    assert len(run(pod(hami, nodeName="a100-1"), CLUSTER, ID)) == 1
    dra = container("t", resources={"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}})
    assert len(run(pod(dra, nodeName="a100-1"), CLUSTER, ID)) == 1
