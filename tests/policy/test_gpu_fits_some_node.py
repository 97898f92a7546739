"""gpu-fits-some-node: a GPU request larger than every node the pod may land on."""

from __future__ import annotations

from typing import Any

from tests.helpers import GPU, GPU_TAINT, T4_LABELS, container, node, node_table, pod, run, with_nodes, wrap

ID = "gpu-fits-some-node"
CLUSTER = with_nodes(node_table())
TOLERATE = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


def gpus(n: Any, name: str = "train", resource: str = GPU, **extra: Any) -> dict[str, Any]:
    return {**container(name, **extra), "resources": {"limits": {resource: n}}}


def test_the_issue_table_eight_gpus_where_the_largest_t4_node_has_four() -> None:
    (v,) = run(pod(gpus(8), nodeSelector={"accelerator": "nvidia-t4"}, tolerations=TOLERATE), CLUSTER, ID)
    assert v.path == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert "requests 8 in all, but the largest matching node (accelerator=nvidia-t4) has 4" in v.detail
    assert "at most 4 per pod" in v.fix
    # Without a selector, the largest GPU node anywhere decides; it names the pool.
    (v,) = run(pod(gpus(8)), CLUSTER, ID)
    assert "the largest matching node has 4 (gke-t4-pool-0, accelerator=nvidia-t4" in v.detail


def test_what_fits_says_nothing() -> None:
    assert run(pod(gpus(2), nodeSelector={"accelerator": "nvidia-t4"}, tolerations=TOLERATE), CLUSTER, ID) == []
    assert run(pod(gpus(4)), CLUSTER, ID) == []
    mig = gpus(1, resource="nvidia.com/mig-1g.6gb")
    assert run(pod(mig, nodeSelector={"accelerator": "nvidia-a30"}, tolerations=TOLERATE), CLUSTER, ID) == []


def test_counted_as_the_scheduler_counts_app_containers_summed_init_at_their_largest() -> None:
    # 2 + 2 app containers = 4: fits. An init container of 4 runs alone before them: fits.
    two = pod(gpus(2, "a"), gpus(2, "b"), initContainers=[gpus(4, "warmup")])
    assert run(two, CLUSTER, ID) == []
    # 3 + 2 = 5 does not.
    (v,) = run(pod(gpus(3, "a"), gpus(2, "b")), CLUSTER, ID)
    assert "requests 5 in all" in v.detail
    assert v.container == "a"  # the path names the largest asker
    # A sidecar (restartPolicy Always) runs beside the app containers: 1 + 4 = 5.
    sidecar = {**gpus(1, "sidecar"), "restartPolicy": "Always"}
    (v,) = run(pod(gpus(4), initContainers=[sidecar]), CLUSTER, ID)
    assert "requests 5 in all" in v.detail
    # Requests alone count too (templates), and limits win nowhere: requests equal limits.
    only_requests = {**container("r"), "resources": {"requests": {GPU: "6"}}}
    assert "requests 6 in all" in run(pod(only_requests), CLUSTER, ID)[0].detail


def test_taints_and_cordons_rule_out_nodes_for_pods_but_not_for_templates() -> None:
    cluster = with_nodes(
        [
            node("big-cordoned", T4_LABELS, {GPU: "8"}, unschedulable=True),
            node("big-tainted", T4_LABELS, {GPU: "8"}, [{"key": "team", "value": "vision", "effect": "NoSchedule"}]),
            node("small", T4_LABELS, {GPU: "4"}, [GPU_TAINT]),
        ]
    )
    (v,) = run(pod(gpus(8)), cluster, ID)
    assert "largest matching node has 4 (small" in v.detail
    # The pod that tolerates the team taint fits on big-tainted.
    team = [{"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"}]
    assert run(pod(gpus(8), tolerations=team), cluster, ID) == []
    # A Deployment's pods may still get tolerations from other webhooks; a cordon is temporary.
    assert run(wrap(pod(gpus(8)), "Deployment"), cluster, ID) == []


def test_required_affinity_terms_and_match_fields() -> None:
    a30_or_t4 = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["nvidia-t4"]}]},
                ]
            }
        }
    }
    (v,) = run(pod(gpus(6), affinity=a30_or_t4), CLUSTER, ID)
    assert "(accelerator=nvidia-t4) has 4" in v.detail
    by_name = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gke-t4-pool-1"]}]}
                ]
            }
        }
    }
    assert "has 4 (gke-t4-pool-1" in run(pod(gpus(5), affinity=by_name), CLUSTER, ID)[0].detail
    assert run(pod(gpus(5), nodeName="gke-t4-pool-2"), CLUSTER, ID)[0].detail.endswith("has 4 (gke-t4-pool-2)")
    # A node the view has not seen yet (it just joined): no data, no warning.
    assert run(pod(gpus(5), nodeName="gke-t4-pool-new"), CLUSTER, ID) == []


def test_a_gpu_pod_no_node_lets_on_is_told_what_exists() -> None:
    (v,) = run(pod(gpus(1), nodeSelector={"pool": "gpu-big"}), CLUSTER, ID)
    assert "matches no schedulable node (pool=gpu-big): 9 nodes, offering nvidia.com/gpu, nvidia.com/mig-" in v.detail
    assert "autoscaling from zero" in v.fix
    # An unknown GPU model is known-accelerator's to report, not twice.
    assert run(pod(gpus(1), nodeSelector={"accelerator": "nvidia-a100"}), CLUSTER, ID) == []


def test_silent_without_a_view_and_for_resources_served_through_dra() -> None:
    assert ID not in {v.rule for v in run(pod(gpus(64)))}
    dra = with_nodes(node_table(), dra_extended=frozenset({GPU}))
    assert run(pod(gpus(64)), dra, ID) == []  # a DeviceClass maps nvidia.com/gpu to DRA devices
    unknown = with_nodes(node_table(), dra_extended=None)  # DeviceClasses not known yet
    assert run(pod(gpus(64)), unknown, ID) == []
    assert run(pod(gpus(64, resource="deviceclass.resource.kubernetes.io/gpu.nvidia.com")), CLUSTER, ID) == []


def test_unreadable_scheduling_fields_make_it_silent_not_crash() -> None:
    assert run(pod(gpus(64), tolerations="all"), CLUSTER, ID) == []
    expr = {"key": "accelerator", "operator": "In", "values": "nvidia-t4"}
    bad = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        }
    }
    assert run(pod(gpus(64), affinity=bad), CLUSTER, ID) == []
