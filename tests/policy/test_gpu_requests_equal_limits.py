import pytest

from tests.helpers import SPEC_PATH, container, pod, run, wrap

ID = "gpu-requests-equal-limits"


@pytest.mark.parametrize(
    ("limit", "req"),
    [("1", "1"), ("1", "1000m"), ("1000m", 1), ("0.5", "500m"), (0.5, "0.5"), ("2", 2.0), ("1e0", "1")],
)
def test_numerically_equal_is_fine(limit: object, req: object) -> None:
    assert run(pod(container(gpu=limit, request=req)), rule=ID) == []


def test_limits_without_requests_is_fine() -> None:
    assert run(wrap(pod(container(gpu="1")), "Deployment"), rule=ID) == []


def test_mismatch() -> None:
    (v,) = run(pod(container("t", gpu="2", request="1")), rule=ID)
    assert v.path == 'spec.containers[0].resources.requests["nvidia.com/gpu"]'
    assert v.detail == 'is "1" but the limit is "2": they must be equal'
    assert v.fix == 'drop requests["nvidia.com/gpu"] or set it to "2"'


def test_requests_without_limits() -> None:
    (v,) = run(pod(container("t", request="1")), rule=ID)
    assert v.detail == 'is "1" but limits["nvidia.com/gpu"] is not set'


def test_requests_with_other_limits_only() -> None:
    c = container("t", request="1")
    c["resources"]["limits"] = {"cpu": "1"}
    assert len(run(pod(c), rule=ID)) == 1


def test_unparsable_values_are_left_to_gpu_quantity() -> None:
    assert run(pod(container(gpu="abc", request="1")), rule=ID) == []


def test_init_container_mismatch() -> None:
    p = pod(container(), initContainers=[container("i", gpu="1", request="2")])
    (v,) = run(p, rule=ID)
    assert v.container_kind == "init container" and v.path.startswith("spec.initContainers[0]")


@pytest.mark.parametrize("kind", ["Job", "CronJob", "Deployment"])
def test_templates(kind: str) -> None:
    (v,) = run(wrap(pod(container(gpu="1", request="2")), kind), rule=ID)
    assert v.path == f'{SPEC_PATH[kind]}.containers[0].resources.requests["nvidia.com/gpu"]'
