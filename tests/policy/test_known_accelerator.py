"""known-accelerator: a GPU model (GPU node label value) that no node has."""

from __future__ import annotations

from tests.helpers import container, node_table, pod, run, with_nodes, wrap

ID = "known-accelerator"
CLUSTER = with_nodes(node_table())


def gpu_pod(**spec: object) -> dict[str, object]:
    return pod(container("infer", gpu=1), **spec)


def test_the_issue_table_a100_on_a_cluster_of_t4_and_a30() -> None:
    (v,) = run(gpu_pod(nodeSelector={"accelerator": "nvidia-a100"}), CLUSTER, ID)
    assert v.path == "spec.nodeSelector.accelerator"
    assert (
        v.detail == "selects accelerator=nvidia-a100, which no node has: nodes have accelerator=nvidia-a30, nvidia-t4"
    )
    assert v.fix.startswith("select a value that exists (nvidia-a30, nvidia-t4)")
    assert run(gpu_pod(nodeSelector={"accelerator": "nvidia-t4"}), CLUSTER, ID) == []


def test_every_gpu_node_label_and_templates() -> None:
    (v,) = run(
        wrap(gpu_pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), "Deployment"), CLUSTER, ID
    )
    assert v.path == 'spec.template.spec.nodeSelector["nvidia.com/gpu.product"]'
    assert "nodes have nvidia.com/gpu.product=NVIDIA-A30-MIG-1g.6gb, Tesla-T4" in v.detail
    (v,) = run(gpu_pod(nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-l4"}), CLUSTER, ID)
    assert "no node carries the label cloud.google.com/gke-accelerator" in v.detail
    # Labels that are not GPU node labels are not this rule's business.
    assert run(gpu_pod(nodeSelector={"pool": "nope"}), CLUSTER, ID) == []


def test_affinity_is_dead_only_when_every_term_asks_for_a_missing_model() -> None:
    def terms(*values: list[str]) -> dict[str, object]:
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": v}]} for v in values
                    ]
                }
            }
        }

    assert run(gpu_pod(affinity=terms(["nvidia-a100", "nvidia-t4"])), CLUSTER, ID) == []
    assert run(gpu_pod(affinity=terms(["nvidia-a100"], ["nvidia-a30"])), CLUSTER, ID) == []
    (v,) = run(gpu_pod(affinity=terms(["nvidia-a100", "nvidia-h100"], ["nvidia-b200"])), CLUSTER, ID)
    assert v.path.endswith("nodeSelectorTerms[0].matchExpressions[0].values")
    assert "selects accelerator=nvidia-a100 or nvidia-h100" in v.detail


def test_silent_without_the_view_and_for_pods_that_name_no_model() -> None:
    assert run(gpu_pod(nodeSelector={"accelerator": "nvidia-a100"}), rule=ID) == []
    assert run(pod(container(gpu=1)), CLUSTER, ID) == []
    empty = with_nodes([])
    (v,) = run(gpu_pod(nodeSelector={"accelerator": "nvidia-a100"}), empty, ID)
    assert "no node carries the label accelerator" in v.detail
