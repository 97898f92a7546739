"""Modes, ordering, messages and the UPDATE rule, on the assembled verdict."""

from typing import Any

import pytest

from tests.helpers import POLICY, container, default_policy, pod
from webhook.policy import Mode, Policy, Verdict, engine

BAD = pod(
    container("a", gpu="1.5", privileged=True, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
    container("b", gpu="2", request="1"),
)


def judge(obj: dict, p: Policy, old: dict | None = None) -> Verdict:
    found = engine.find_violations(obj, "", "Pod", p)
    before = engine.find_violations(old, "", "Pod", p) if old else None
    assert found is not None
    return engine.judge(found, p, before)


def test_all_violations_at_once_in_registry_order() -> None:
    v = judge(BAD, POLICY)
    assert [x.rule for x in v.of(Mode.DENY)] == [
        "gpu-quantity",
        "gpu-requests-equal-limits",
        "no-visible-devices-env",
        "no-privileged-gpu",
    ]
    assert v.message().startswith('violates GPU policy: gpu-quantity (container "a": ')
    assert v.message().count("; fix: ") == 4


def test_modes() -> None:
    p = default_policy(
        modes={
            "gpu-quantity": Mode.WARN,
            "gpu-requests-equal-limits": Mode.AUDIT,
            "no-visible-devices-env": Mode.OFF,
            "no-privileged-gpu": Mode.DENY,
        }
    )
    v = judge(BAD, p)
    assert [x.rule for x in v.of(Mode.DENY)] == ["no-privileged-gpu"]
    assert v.warnings() == [
        'would violate GPU policy: gpu-quantity (container "a": spec.containers[0].resources.limits["nvidia.com/gpu"] '
        'is "1.5": more than one GPU must be a whole number (a share is always of one card))'
    ]  # with the fix it would pass 256 characters, where Kubernetes may cut it: the fix goes first
    assert list(v.audit_annotations()) == ["gpu-requests-equal-limits"]
    assert v.audit_annotations()["gpu-requests-equal-limits"].startswith("would violate GPU policy: ")


def test_warnings_stay_short() -> None:
    long_name = "x" * 200
    v = judge(pod(container(long_name, gpu="abc")), default_policy(modes={"gpu-quantity": Mode.WARN}))
    assert all(len(w) <= 256 for w in v.warnings())


def test_update_judges_only_what_changed() -> None:
    old = pod(container("a", gpu="1.5"))
    same = pod(container("a", gpu="1.5"))
    same["metadata"]["labels"] = {"new": "label"}
    assert judge(same, POLICY, old).allowed
    worse = pod(container("a", gpu="1.5", privileged=True))
    assert [x.rule for x in judge(worse, POLICY, old).of(Mode.DENY)] == ["no-privileged-gpu"]


def test_unpoliced_gpu_requests_finds_containers_anywhere_and_vllm_runtime_counts() -> None:
    from webhook.policy.engine import unpoliced_gpu_requests

    vllm = {
        "apiVersion": "production-stack.vllm.ai/v1alpha1",
        "kind": "VLLMRuntime",
        "spec": {"deploymentConfig": {"replicas": 1, "resources": {"cpu": "8", "memory": "64Gi", "gpu": "1"}}},
    }
    assert unpoliced_gpu_requests(vllm, POLICY) == ["spec.deploymentConfig"]
    mig = {"spec": {"a": [{"b": {"resources": {"requests": {"nvidia.com/mig-1g.5gb": 1}}}}]}}
    assert unpoliced_gpu_requests(mig, POLICY) == ["spec.a[0].b"]
    cpu = {"spec": {"resources": {"limits": {"cpu": 1}}, "deploymentConfig": {"resources": {"gpu": "0"}}}}
    assert unpoliced_gpu_requests(cpu, POLICY) == []
    many = {"items": [{"resources": {"limits": {"nvidia.com/gpu": 1}}} for _ in range(20)]}
    assert len(unpoliced_gpu_requests(many, POLICY)) == 5  # bounded


def test_unpoliced_walk_holds_no_path_per_pending_node() -> None:
    """Issue 33: a deep chain with many siblings per level made the walk hold S x D path strings
    (a 612 KiB body: 78.7 MiB peak before). Bound: peak under 8 MiB, and paths still right."""
    import tracemalloc

    from webhook.policy.engine import unpoliced_gpu_requests

    root: dict[str, Any] = {}
    node = root
    for _ in range(300):
        deeper: dict[str, Any] = {}
        node["next" + "x" * 40] = deeper
        for i in range(40):
            node[f"k{i:02d}" + "k" * 40] = {}
        node = deeper
    node["worker"] = {"resources": {"limits": {"nvidia.com/gpu": 1}}}
    tracemalloc.start()
    try:
        found = unpoliced_gpu_requests(root, POLICY)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"FIGURE unpoliced walk of a 300-deep, 40-wide object: peak {peak / 2**20:.1f} MiB")
    assert peak < 8 * 2**20
    assert found == [".".join(["next" + "x" * 40] * 300) + ".worker"]


def test_answers_are_bounded_whatever_the_number_of_violations() -> None:
    """Issue 33: 40,000 audited violations froze the loop 40 s (a quadratic annotation), 72,000
    denied containers made a 16.5 MiB message. Bound: 20 listed, the rest counted."""
    many = pod(*[container(f"c{i}", gpu="1.5") for i in range(1000)])
    verdict = judge(many, POLICY)
    message = verdict.message()
    assert message.count("gpu-quantity (") == 20 and message.endswith("and 980 more violations like these")
    warned = engine.judge(
        engine.find_violations(many, "", "Pod", POLICY) or [], default_policy(modes={"gpu-quantity": Mode.WARN})
    )
    assert len(warned.warnings()) == 21 and warned.warnings()[-1].endswith("and 980 more warnings like these")
    audited = engine.judge(
        engine.find_violations(many, "", "Pod", POLICY) or [], default_policy(modes={"gpu-quantity": Mode.AUDIT})
    )
    (text,) = audited.audit_annotations().values()
    assert text.endswith("and 980 more violations like these") and len(text) < 20_000


def test_objects_past_the_budget_are_too_large_to_judge_before_they_are_read() -> None:
    """Issue 33: a 3 MiB pod of 92,836 plain containers cost 0.6 s and a 13 MiB patch. Bound:
    MAX_CONTAINERS (1000) per object, checked before a container is read, templates summed."""
    from webhook.policy.objects import MAX_ANNOTATION_BYTES, MAX_CONTAINERS
    from webhook.policy.shapes import ShapeError

    assert engine.find_violations(pod(*[container(f"c{i}") for i in range(MAX_CONTAINERS)]), "", "Pod", POLICY) == []
    huge = pod(*[{"name": f"c{i}", "image": "i", "env": "not read"} for i in range(MAX_CONTAINERS + 1)])
    with pytest.raises(ShapeError) as raised:
        engine.find_violations(huge, "", "Pod", POLICY)
    assert raised.value.path == "spec.containers"
    assert raised.value.problem == "holds 1001 containers: too large to judge (at most 1000)"
    # Pod templates count one each and add up across an object's templates (a custom resource with many).
    from webhook.config.settings import from_mapping

    fleets = [{"group": "x.example.com", "kind": "Fleet", "podSpecs": ["spec.pods[*]"]}]
    custom = from_mapping({"customResources": fleets}, environ={}).policy
    fleet = {"spec": {"pods": [{"containers": [{"name": "c", "image": "i"}] * 9} for _ in range(150)]}}
    with pytest.raises(ShapeError) as raised:
        engine.find_violations(fleet, "x.example.com", "Fleet", custom)
    assert raised.value.path == "spec.pods[100]" and "1010 containers and pod templates" in raised.value.problem
    volumes = pod(container("a"), volumes=[{"name": f"v{i}", "emptyDir": {}} for i in range(1001)])
    with pytest.raises(ShapeError) as raised:
        engine.find_violations(volumes, "", "Pod", POLICY)
    assert raised.value.path == "spec.volumes" and raised.value.problem.endswith("(at most 1000)")
    big = pod(container("a"))
    big["metadata"]["annotations"] = {f"k{i}": "v" * 1000 for i in range(300)}
    with pytest.raises(ShapeError) as raised:
        engine.find_violations(big, "", "Pod", POLICY)
    assert raised.value.path == "metadata.annotations" and f"at most {MAX_ANNOTATION_BYTES}" in raised.value.problem


def test_a_gpu_container_gets_only_what_its_node_reads() -> None:
    """ld-library-path creates a GPU container's env; isolation's AMD_VISIBLE_DEVICES=none, even
    where nodes run the AMD runtime, leaves a container whose GPU comes through NVIDIA's env alone
    (issue 48: GPU containers untouched), so one op creates the list and nothing replaces it."""
    import jsonpatch

    from tests.helpers import AMD_NONE, view

    old = default_policy(cluster_version=(1, 27), amd_runtime_env=True)
    obj = pod(container("train", gpu=1), container("side"))
    ops = engine.mutate(view(obj, old), old).ops
    out = jsonpatch.apply_patch(obj, ops)["spec"]["containers"]
    assert out[0]["env"] == [{"name": "LD_LIBRARY_PATH", "value": old.ld_library_path}]
    assert out[1]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}, AMD_NONE]
    assert [op["path"] for op in ops if op["path"].startswith("/spec/containers/0/env")] == ["/spec/containers/0/env"]
