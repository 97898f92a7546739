"""Pod templates inside the GPU batch world's custom resources."""

from __future__ import annotations

import pytest

from tests.helpers import POLICY, container, pod
from webhook.config import from_mapping
from webhook.policy import Policy, ShapeError, engine, group_of

BAD = {"metadata": {}, "spec": {"containers": [container("t", gpu=2, request=1)]}}  # JSON numbers, as CRDs keep them
GOOD = {"metadata": {}, "spec": {"containers": [container("t", gpu=1)]}}


def paths(obj: dict, p: Policy | None = None) -> list[str]:
    p = p or POLICY
    found = engine.find_violations(obj, group_of(obj["apiVersion"]), obj["kind"], p)
    assert found is not None
    return [v.path for v in found]


CASES = {
    "volcano": (
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "spec": {"tasks": [{"name": "a", "template": GOOD}, {"name": "b", "template": BAD}]},
        },
        "spec.tasks[1].template.spec.containers[0]",
    ),
    "pytorch": (
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "spec": {"pytorchReplicaSpecs": {"Master": {"template": GOOD}, "Worker": {"template": BAD}}},
        },
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]",
    ),
    "tf": (
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "spec": {"tfReplicaSpecs": {"PS": {"template": BAD}}}},
        "spec.tfReplicaSpecs.PS.template.spec.containers[0]",
    ),
    "mpi": (
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "spec": {"mpiReplicaSpecs": {"Launcher": {"template": GOOD}, "Worker": {"template": BAD}}},
        },
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0]",
    ),
    "raycluster": (
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "spec": {"headGroupSpec": {"template": GOOD}, "workerGroupSpecs": [{"template": GOOD}, {"template": BAD}]},
        },
        "spec.workerGroupSpecs[1].template.spec.containers[0]",
    ),
    "rayjob": (
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "spec": {"rayClusterSpec": {"headGroupSpec": {"template": BAD}, "workerGroupSpecs": []}},
        },
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]",
    ),
    "jobset": (
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": BAD}}}]},
        },
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0]",
    ),
    "lws": (
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "spec": {"leaderWorkerTemplate": {"workerTemplate": BAD}},
        },
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_templates_in_custom_resources(name: str) -> None:
    obj, where = CASES[name]
    assert paths(obj) == [f'{where}.resources.requests["nvidia.com/gpu"]']


def test_missing_optional_templates_are_fine_but_broken_ones_are_named() -> None:
    assert paths({"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {}}) == []
    broken = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"tasks": [{"template": "x"}]}}
    with pytest.raises(ShapeError) as info:
        paths(broken)
    assert info.value.path == "spec.tasks[0].template"


def test_configured_custom_resources() -> None:
    settings = from_mapping(
        {
            "customResources": [
                {"group": "train.example.com", "kind": "Trainer", "templates": ["spec.stages[*].pod"]},
                # Overrides a built-in entry:
                {"group": "ray.io", "kind": "RayCluster", "templates": ["spec.headGroupSpec.template"]},
            ]
        },
        environ={},
    )
    obj = {"apiVersion": "train.example.com/v1", "kind": "Trainer", "spec": {"stages": [{"pod": BAD}]}}
    assert paths(obj, settings.policy) == ['spec.stages[0].pod.spec.containers[0].resources.requests["nvidia.com/gpu"]']
    ray = CASES["raycluster"][0]
    assert paths(ray, settings.policy) == []  # workers no longer looked at


def test_custom_resources_config_errors() -> None:
    from webhook.config import ConfigError

    with pytest.raises(ConfigError) as info:
        from_mapping(
            {
                "customResources": [
                    {"group": "a", "kind": "B", "template": ["x"]},
                    {"kind": "C", "templates": ["spec..x"]},
                    {"kind": "D", "containers": []},
                    # A Pod's paths would replace the Pod itself: a platform typo must not leave
                    # every Pod judged at a path it does not have (nothing found: allowed).
                    {"group": "", "kind": "Pod", "podSpecs": ["spec.template.spec"]},
                ]
            },
            environ={},
        )
    assert info.value.problems == [
        "customResources[0].template: unknown key (did you mean customResources[0].templates?)",
        "customResources[0]: needs templates, podSpecs or containers (paths such as spec.tasks[*].template)",
        "customResources[1].templates[0]: 'spec..x' is not a template path such as spec.tasks[*].template",
        "customResources[2].containers: must be a non-empty list of paths such as spec.tasks[*].template",
        "customResources[3]: a Pod is judged as itself (every container of its spec); it takes no paths",
    ]


def test_crd_templates_are_never_mutated() -> None:
    obj, _ = CASES["volcano"]
    views = engine.pod_views(obj, "batch.volcano.sh", "Job", POLICY)
    assert views and all(engine.mutate(v, POLICY).ops == [] for v in views)


def test_pods_still_single_view() -> None:
    views = engine.pod_views(pod(container()), "", "Pod", POLICY)
    assert views is not None and len(views) == 1 and views[0].is_pod
