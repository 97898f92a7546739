"""ld-library-path: exact operations, applied with jsonpatch, idempotent on the result."""

from __future__ import annotations

import pytest

from tests.helpers import container, default_policy, mutate, pod, wrap

# Isolation (isolate-non-gpu) has its own tests; here it is off so each case shows one mutation.
OLD = default_policy(cluster_version=(1, 27), isolate_non_gpu=False)
NEW = default_policy(cluster_version=(1, 28), isolate_non_gpu=False)
UNKNOWN = default_policy(cluster_version=None, isolate_non_gpu=False)
LD = {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}


def test_injects_env_when_container_has_none() -> None:
    ops, warnings, out = mutate(pod(container("t", gpu=1)), OLD)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env", "value": [LD]}]
    assert out["spec"]["containers"][0]["env"] == [LD]
    assert len(warnings) == 1
    assert "injected LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in warnings[0]
    assert "replaces any value baked into the image" in warnings[0]


def test_appends_to_existing_env_list() -> None:
    ops, _, out = mutate(pod(container(gpu=1, env=[{"name": "A", "value": "1"}])), OLD)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env/-", "value": LD}]
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, LD]


def test_appends_directory_to_literal_value() -> None:
    env = [{"name": "LD_LIBRARY_PATH", "value": "/opt/lib"}]
    ops, _, _out = mutate(pod(container(gpu=1, env=env)), OLD)
    assert ops == [
        {"op": "replace", "path": "/spec/containers/0/env/0/value", "value": "/opt/lib:/usr/local/nvidia/lib64"}
    ]


@pytest.mark.parametrize(
    "value", ["/usr/local/nvidia/lib64", "/a:/usr/local/nvidia/lib64/", "/usr/local/nvidia/lib64:/b"]
)
def test_value_with_directory_is_untouched(value: str) -> None:
    ops, warnings, _ = mutate(pod(container(gpu=1, env=[{"name": "LD_LIBRARY_PATH", "value": value}])), OLD)
    assert ops == [] and warnings == []


def test_empty_value_becomes_directory() -> None:
    ops, _, _ = mutate(pod(container(gpu=1, env=[{"name": "LD_LIBRARY_PATH", "value": ""}])), OLD)
    assert ops[0]["value"] == "/usr/local/nvidia/lib64"


def test_last_duplicate_is_the_one_patched() -> None:
    env = [{"name": "LD_LIBRARY_PATH", "value": "/x"}, {"name": "LD_LIBRARY_PATH", "value": "/y"}]
    ops, _, _ = mutate(pod(container(gpu=1, env=env)), OLD)
    assert ops == [{"op": "replace", "path": "/spec/containers/0/env/1/value", "value": "/y:/usr/local/nvidia/lib64"}]


def test_value_from_is_left_alone_with_a_warning() -> None:
    env = [{"name": "LD_LIBRARY_PATH", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    ops, warnings, _ = mutate(pod(container("t", gpu=1, env=env)), OLD)
    assert ops == [] and "valueFrom" in warnings[0]


def test_only_gpu_containers_of_pods_on_old_clusters() -> None:
    p = pod(
        container("cpu"),
        container("zero", gpu=0),
        container("gpu", gpu="500m"),
        initContainers=[container("init", gpu=1)],
    )
    ops, _, _ = mutate(p, OLD)
    assert [op["path"] for op in ops] == ["/spec/initContainers/0/env", "/spec/containers/2/env"]
    assert mutate(p, NEW)[0] == []
    assert mutate(p, UNKNOWN)[0] == []
    off = default_policy(cluster_version=(1, 17), ld_library_path_enabled=False, isolate_non_gpu=False)
    assert mutate(p, off)[0] == []


def test_when_unset_warn_only_warns() -> None:
    ops, warnings, _ = mutate(
        pod(container("t", gpu=1)),
        default_policy(cluster_version=(1, 19), ld_library_path_when_unset="warn", isolate_non_gpu=False),
    )
    assert ops == [] and "does not set LD_LIBRARY_PATH" in warnings[0]


def test_configurable_directory() -> None:
    p = default_policy(cluster_version=(1, 27), ld_library_path="/opt/nvidia/lib", isolate_non_gpu=False)
    ops, _, _ = mutate(pod(container(gpu=1)), p)
    assert ops[0]["value"] == [{"name": "LD_LIBRARY_PATH", "value": "/opt/nvidia/lib"}]


def test_templates_are_never_mutated() -> None:
    assert mutate(wrap(pod(container(gpu=1)), "Deployment"), OLD)[0] == []


def test_invalid_objects_do_not_crash_mutation() -> None:
    # Mutation runs before object validation, so it sees GPU values upstream will reject.
    for bad in ("abc", "1.5", -1, None):
        mutate(pod(container(gpu=bad)), OLD)
