"""gpu-max-per-pod: a cap on the GPU devices of one pod, counted as the scheduler counts."""

from __future__ import annotations

from tests.helpers import container, pod, run, wrap
from webhook.config import default_policy
from webhook.policy import Mode

ID = "gpu-max-per-pod"
ON = default_policy(modes={ID: Mode.DENY}, gpu_max_per_pod=4)


def test_off_by_default_and_8_is_the_shipped_cap() -> None:
    assert default_policy().mode(ID) is Mode.OFF and default_policy().gpu_max_per_pod == 8
    assert run(pod(container("t", gpu=16))) == []


def test_an_8_gpu_pod_against_a_cap_of_4() -> None:
    """The EKS p4d samples: one 8-GPU trainer, against a platform that schedules 4 at most."""
    (v,) = run(pod(container("trainer", gpu=8)), ON, rule=ID)
    assert v.path == "spec.containers" and v.value == "8"
    assert "ask for 8 GPU devices (its containers together): more than the 4 one pod may have" in v.detail
    assert "pods of at most 4 GPUs" in v.fix
    assert run(pod(container("trainer", gpu=4)), ON, rule=ID) == []
    (v,) = run(wrap(pod(container("trainer", gpu=8)), "Job"), ON, rule=ID)
    assert v.path == "spec.template.spec.containers"


def test_counted_as_the_scheduler_counts() -> None:
    # Regular containers add up; init containers run one at a time: the largest counts if more.
    two = pod(container("a", gpu=3), container("b", gpu=2))
    assert [v.value for v in run(two, ON, rule=ID)] == ["5"]
    init = pod(container("a", gpu=1), initContainers=[container("warm", gpu=6), container("copy", gpu=2)])
    (v,) = run(init, ON, rule=ID)
    assert v.value == "6" and "its largest init container" in v.detail
    assert run(pod(container("a", gpu=4), initContainers=[container("w", gpu=4)]), ON, rule=ID) == []


def test_every_device_of_the_gpu_model_counts_and_a_share_holds_its_card() -> None:
    mig = pod({"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 5}}})
    assert [v.value for v in run(mig, ON, rule=ID)] == ["5"]
    shares = default_policy(modes={ID: Mode.DENY}, gpu_max_per_pod=1, shared_gpu=True)
    assert [v.value for v in run(pod(container("a", gpu="0.5"), container("b", gpu="0.5")), shares, rule=ID)] == ["2"]
    cpu = pod({"name": "c", "image": "x", "resources": {"limits": {"cpu": "64", "memory": "1Ti"}}})
    assert run(cpu, ON, rule=ID) == []


def test_a_namespace_label_sets_its_own_cap() -> None:
    """gpu-policy.io/max-gpus-per-pod on the namespace: a training team's 16, a notebook namespace's 1."""
    from tests.helpers import node_table, with_nodes

    label = "gpu-policy.io/max-gpus-per-pod"
    known = {"training": ((label, "16"),), "notebooks": ((label, "1"),), "odd": ((label, "eight"),), "plain": ()}
    p = with_nodes(node_table(), ON, namespaces=known)
    assert run(pod(container("t", gpu=16), namespace="training"), p, rule=ID) == []
    (v,) = run(pod(container("t", gpu=2), namespace="notebooks"), p, rule=ID)
    assert "more than the 1 one pod may have (the namespace's label gpu-policy.io/max-gpus-per-pod)" in v.detail
    (v,) = run(pod(container("t", gpu=8), namespace="odd"), p, rule=ID)
    assert (
        'more than the 4 one pod may have (gpuMaxPerPod; the namespace\'s gpu-policy.io/max-gpus-per-pod="eight"'
        in v.detail
    )
    (v,) = run(pod(container("t", gpu=8), namespace="plain"), p, rule=ID)
    assert v.detail.endswith("(gpuMaxPerPod)")
    (v,) = run(pod(container("t", gpu=8), namespace="unseen"), p, rule=ID)  # not in the view: the config's cap
    assert "more than the 4" in v.detail
