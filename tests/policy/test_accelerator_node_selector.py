"""accelerator-node-selector: exact operations, applied with jsonpatch, idempotent on the result."""

from __future__ import annotations

from tests.helpers import container, default_policy, mutate, pod

# Isolation (isolate-non-gpu) has its own tests; here it is off so each case shows one mutation.
OLD = default_policy(cluster_version=(1, 27), isolate_non_gpu=False)
NEW = default_policy(cluster_version=(1, 28), isolate_non_gpu=False)
UNKNOWN = default_policy(cluster_version=None, isolate_non_gpu=False)
LD = {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}


ACC = default_policy(accelerator_default="nvidia-t4", isolate_non_gpu=False)


def test_node_selector_created() -> None:
    ops, warnings, _out = mutate(pod(container(gpu=1)), ACC)
    assert ops == [{"op": "add", "path": "/spec/nodeSelector", "value": {"accelerator": "nvidia-t4"}}]
    assert "accelerator=nvidia-t4" in warnings[0]


def test_node_selector_key_added_and_escaped() -> None:
    p = default_policy(accelerator_default="a100", accelerator_label="gpu.example.com/model", isolate_non_gpu=False)
    ops, _, out = mutate(pod(container(gpu=1), nodeSelector={"zone": "a"}), p)
    assert ops == [{"op": "add", "path": "/spec/nodeSelector/gpu.example.com~1model", "value": "a100"}]
    assert out["spec"]["nodeSelector"] == {"zone": "a", "gpu.example.com/model": "a100"}


def test_node_selector_respects_existing_choices() -> None:
    assert mutate(pod(container(gpu=1), nodeSelector={"accelerator": "nvidia-v100"}), ACC)[0] == []
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["nvidia-v100"]}]}
                ]
            }
        }
    }
    assert mutate(pod(container(gpu=1), affinity=aff), ACC)[0] == []
    assert mutate(pod(container()), ACC)[0] == []  # no GPU, no GPU model
    assert mutate(pod(container(gpu=1), nodeName="gpu-node-7"), ACC)[0] == []  # already bound
    assert mutate(pod(container(gpu=1)), default_policy(isolate_non_gpu=False))[0] == []  # no default configured


def test_both_mutations_together_and_opt_out() -> None:
    p = default_policy(cluster_version=(1, 25), accelerator_default="nvidia-t4", isolate_non_gpu=False)
    obj = pod(container(gpu=1))
    ops, _, _ = mutate(obj, p)
    assert [op["path"] for op in ops] == ["/spec/containers/0/env", "/spec/nodeSelector"]
    obj["metadata"]["annotations"] = {"gpu-policy.io/mutate": "false"}
    assert mutate(obj, p)[0] == []
