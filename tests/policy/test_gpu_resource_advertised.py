"""gpu-resource-advertised: a GPU resource no node the pod may land on advertises."""

from __future__ import annotations

from typing import Any

from tests.helpers import GPU, container, node, node_table, pod, run, with_nodes

ID = "gpu-resource-advertised"
CLUSTER = with_nodes(node_table())
TOLERATE = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


def asks(resource: str, n: Any = 1) -> dict[str, Any]:
    return {**container("infer"), "resources": {"limits": {resource: n}}}


def test_the_issue_table_plain_gpu_pinned_to_mig_mixed_a30s() -> None:
    (v,) = run(pod(asks(GPU), nodeSelector={"accelerator": "nvidia-a30"}, tolerations=TOLERATE), CLUSTER, ID)
    assert v.path == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert v.detail == (
        "is advertised by no matching node (accelerator=nvidia-a30); "
        "they offer nvidia.com/mig-1g.6gb, nvidia.com/mig-2g.12gb"
    )
    assert v.fix == "request one of nvidia.com/mig-1g.6gb, nvidia.com/mig-2g.12gb"
    # And the MIG pod on the A30s is fine.
    mig = pod(asks("nvidia.com/mig-1g.6gb"), nodeSelector={"accelerator": "nvidia-a30"}, tolerations=TOLERATE)
    assert run(mig, CLUSTER) == []


def test_a_profile_or_shared_name_nobody_advertises_names_the_clusters_gpu_resources() -> None:
    (v,) = run(pod(asks("nvidia.com/mig-3g.20gb")), CLUSTER, ID)
    # The GPU nodes are tainted nvidia.com/gpu: untolerated, so only CPU nodes match; the cluster is named.
    assert "is advertised by no node; GPU nodes offer nvidia.com/gpu, nvidia.com/mig-1g" in v.detail
    (v,) = run(pod(asks("nvidia.com/gpu.shared")), CLUSTER, ID)
    assert v.path.endswith('["nvidia.com/gpu.shared"]') and "is advertised by no node" in v.detail
    # Pinned to CPU nodes: those advertise no GPU, so the cluster's GPU resources are named.
    (v,) = run(pod(asks(GPU), nodeSelector={"pool": "cpu"}), CLUSTER, ID)
    assert "they" not in v.detail and "GPU nodes offer nvidia.com/gpu, nvidia.com/mig-" in v.detail


def test_a_cluster_without_any_gpu_and_dra_served_names() -> None:
    (v,) = run(pod(asks(GPU)), with_nodes([node("cpu-0")]), ID)
    assert v.detail.endswith("no node offers a GPU")
    assert run(pod(asks(GPU)), with_nodes([node("cpu-0")], dra_extended=frozenset({GPU})), ID) == []


def test_silent_without_the_view() -> None:
    assert run(pod(asks("nvidia.com/mig-7g.80gb")), rule=ID) == []


def test_an_amd_pod_on_a_fleet_without_amd_nodes_is_told_so() -> None:
    """Issue 36: another vendor's GPU where no node has one is no naming slip: the fix says where it runs."""
    h100 = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "h100-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    rocm = pod(container("rocm", resources={"limits": {"amd.com/gpu": 1}}))
    (v,) = run(rocm, with_nodes([h100]), rule=ID)
    assert v.detail == "is advertised by no node; no node offers AMD GPUs (they offer nvidia.com/gpu)"
    assert "AMD GPU nodes" in v.fix and "nvidia.com/gpu" not in v.fix
    mi300 = {**h100, "metadata": {"name": "mi300x-1", "labels": {}}, "status": {"allocatable": {"amd.com/gpu": "8"}}}
    partition = pod(container("rocm", resources={"limits": {"amd.com/cpx_nps4": 1}}))
    (w,) = run(partition, with_nodes([h100, mi300]), rule=ID)
    assert "amd.com/gpu" in w.fix  # AMD nodes exist, unpartitioned: the resource they do advertise
