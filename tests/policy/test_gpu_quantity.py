import pytest

from tests.helpers import SPEC_PATH, container, default_policy, pod, run, wrap

ID = "gpu-quantity"
SHARED_OFF = default_policy(shared_gpu=False)


@pytest.mark.parametrize(
    "value",
    ["1", 1, "1000m", "1e0", 1e0, "2", 8, "0", 0, "0.0", "0.5", 0.5, "500m", "0.2", "1m", "999m"],
)
def test_allowed_values(value: object) -> None:
    assert run(pod(container(gpu=value)), rule=ID) == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("1.5", 'is "1.5": more than one GPU must be a whole number'),
        ("1500m", 'is "1500m": more than one GPU must be a whole number'),
        (2.5, "is 2.5: more than one GPU"),
        ("-1", 'is "-1": must not be negative'),
        (-0.5, "is -0.5: must not be negative"),
        ("abc", 'is "abc": not a valid Kubernetes quantity'),
        ("NaN", 'is "NaN": not a valid Kubernetes quantity'),
        (True, "is true: not a valid Kubernetes quantity"),
        ("1Gi", None),  # a huge whole number is a count, if a silly one: allowed
    ],
)
def test_rejected_values(value: object, fragment: str | None) -> None:
    found = run(pod(container(gpu=value)), rule=ID)
    if fragment is None:
        assert found == []
        return
    assert len(found) == 1
    assert fragment in found[0].detail
    assert found[0].path == 'spec.containers[0].resources.limits["nvidia.com/gpu"]'


@pytest.mark.parametrize("value", ["0.5", "500m", 0.2, "1m"])
def test_shares_need_shared_gpu(value: object) -> None:
    found = run(pod(container(gpu=value)), SHARED_OFF, rule=ID)
    assert [v.rule for v in found] == [ID]
    assert "GPU shares (values below 1) are not enabled" in found[0].detail
    assert "or a share" not in found[0].fix


def test_whole_numbers_pass_without_sharing() -> None:
    assert run(pod(container(gpu="2")), SHARED_OFF, rule=ID) == []


def test_defaulted_request_is_reported_once() -> None:
    # Pods reach the webhook with requests copied from limits: one mistake, one message.
    found = run(pod(container(gpu="1.5", request="1.5")), rule=ID)
    assert len(found) == 1 and ".limits[" in found[0].path


def test_request_alone_is_checked() -> None:
    found = run(pod(container(request="-2")), rule=ID)
    assert [v.path for v in found] == ['spec.containers[0].resources.requests["nvidia.com/gpu"]']


def test_every_container_kind_is_checked() -> None:
    p = pod(container("app", gpu="1.5"), initContainers=[container("init", gpu="x")])
    found = run(p, rule=ID)
    assert [(v.container_kind, v.container) for v in found] == [("init container", "init"), ("container", "app")]


def test_exact_message() -> None:
    (v,) = run(pod(container("trainer", gpu="1500m")), rule=ID)
    assert v.describe() == (
        'gpu-quantity (container "trainer": spec.containers[0].resources.limits["nvidia.com/gpu"] is "1500m": '
        "more than one GPU must be a whole number (a share is always of one card); "
        "fix: use a whole number of GPUs such as 1 or 2, or a share of one GPU below 1 such as 0.5)"
    )


@pytest.mark.parametrize("kind", list(SPEC_PATH))
def test_templates_name_the_full_path(kind: str) -> None:
    found = run(wrap(pod(container(gpu="1.5")), kind), rule=ID)
    assert [v.path for v in found] == [f'{SPEC_PATH[kind]}.containers[0].resources.limits["nvidia.com/gpu"]']


def test_custom_resource_name() -> None:
    p = pod({"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1.5", "nvidia.com/gpu": "1.5"}}})
    found = run(p, default_policy(resource_name="nvidia.com/mig-1g.5gb"), rule=ID)
    # The configured resource is the one that may be a share; nvidia.com/gpu stays a device of
    # the model, and devices come whole.
    assert [(v.path, v.detail.split(":")[0]) for v in found] == [
        ('spec.containers[0].resources.limits["nvidia.com/mig-1g.5gb"]', 'is "1.5"'),
        ('spec.containers[0].resources.limits["nvidia.com/gpu"]', 'is "1.5"'),
    ]
    assert "whole devices" in found[1].detail


def test_xgpu_resources_mixed_with_whole_gpus_fit_no_node() -> None:
    xgpu = default_policy(xgpu=True)
    mixed = pod(
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}},
        {"name": "b", "resources": {"limits": {"volcano.sh/gpu-mem.128Mi": 8}}},
    )
    (v,) = run(mixed, xgpu, rule=ID)
    assert v.path == 'spec.containers[1].resources.limits["volcano.sh/gpu-mem.128Mi"]' and "fits no node" in v.detail
    assert run(mixed, rule=ID) == []  # only with the integration
