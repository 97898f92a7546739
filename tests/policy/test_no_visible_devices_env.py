import pytest

from tests.helpers import SPEC_PATH, container, default_policy, pod, run, wrap
from webhook.policy.nvidia import grants_devices
from webhook.policy.vendors import NVIDIA

ID = "no-visible-devices-env"


def nvd(value: str) -> dict[str, str]:
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}


@pytest.mark.parametrize(
    ("value", "grants"),
    [
        ("all", True),
        ("0", True),
        ("0,1", True),
        ("GPU-8e2b6c3a-1234", True),
        ("MIG-abc", True),
        ("0,all", True),
        ("all,none", True),
        (" all ", True),
        ("ALL", True),
        ("None", True),
        ("VOID", True),
        ("void", False),
        ("none", False),
        ("", False),
        ("none,all", True),
        ("0,none", True),
        ("all,void", True),
        (" , ", True),
        (" void ", True),
        (",,", True),
        # Issue 32 #1: Python's strip() eats \x1c-\x1f, Go's TrimSpace does not; the legacy hook
        # passes any text but the exact literals to nvidia-container-cli.
        ("all,void\x1c", True),
        ("none\x1f,all", True),
        ("$(a,void,b)", True),
    ],
)
def test_toolkit_semantics(value: str, grants: bool) -> None:
    assert grants_devices(value) is grants


@pytest.mark.parametrize("value", ["all", "0,all", "GPU-1234", "ALL", "1"])
def test_granting_values_are_denied(value: str) -> None:
    (v,) = run(pod(container("c", gpu="1", env=[nvd(value)])), rule=ID)
    assert v.path == "spec.containers[0].env[0]"
    assert v.detail == f'sets NVIDIA_VISIBLE_DEVICES="{value}", which bypasses the device plugin'


@pytest.mark.parametrize("value", ["void", "none", ""])
def test_values_granting_nothing_are_allowed(value: str) -> None:
    assert run(pod(container(env=[nvd(value)])), rule=ID) == []


def test_missing_value_is_empty_and_allowed() -> None:
    assert run(pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES"}])), rule=ID) == []


def test_value_from_is_denied() -> None:
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}]
    (v,) = run(pod(container(env=env)), rule=ID)
    assert "through valueFrom" in v.detail


def test_every_duplicate_is_checked() -> None:
    # The runtime uses the last entry, but `kubectl apply` may drop either duplicate.
    env = [nvd("all"), {"name": "X", "value": "1"}, nvd("void")]
    assert [v.path for v in run(pod(container(env=env)), rule=ID)] == ["spec.containers[0].env[0]"]
    env = [nvd("void"), nvd("all")]
    assert [v.path for v in run(pod(container(env=env)), rule=ID)] == ["spec.containers[0].env[1]"]


def test_names_are_case_sensitive_and_cuda_visible_devices_is_not_policed() -> None:
    env = [{"name": "nvidia_visible_devices", "value": "all"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]
    assert run(pod(container(env=env)), rule=ID) == []


def test_all_container_kinds() -> None:
    p = pod(
        container("app", env=[nvd("all")]),
        initContainers=[container("init", env=[nvd("0")])],
        ephemeralContainers=[container("debug", env=[nvd("all")])],
    )
    found = run(p, rule=ID)
    assert [(v.container_kind, v.container) for v in found] == [
        ("init container", "init"),
        ("container", "app"),
        ("ephemeral container", "debug"),
    ]


@pytest.mark.parametrize("kind", ["CronJob", "StatefulSet", "PodTemplate"])
def test_templates(kind: str) -> None:
    (v,) = run(wrap(pod(container(env=[nvd("all")])), kind), rule=ID)
    assert v.path == f"{SPEC_PATH[kind]}.containers[0].env[0]"


# ---- The AMD Container Runtime's variables (issue 36): the same exact-literal discipline.


@pytest.mark.parametrize("name", ["AMD_VISIBLE_DEVICES", "DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_"])
@pytest.mark.parametrize("value", ["all", "ALL", "0", "none,0", "0-3", "0x1a2b3c4d5e", " none", "$(X)", "NONE"])
def test_amd_granting_values_are_denied(name: str, value: str) -> None:
    for resources in ({}, {"limits": {"amd.com/gpu": 1}}):
        c = container("rocm", image="rocm/pytorch:latest", env=[{"name": name, "value": value}], resources=resources)
        (v,) = run(pod(c), rule=ID)
        assert v.path == "spec.containers[0].env[0]" and f"sets {name}=" in v.detail and "AMD" in v.detail
        assert v.fix == 'remove the variable and request GPUs with resources.limits["amd.com/gpu"]'


@pytest.mark.parametrize("value", ["none", "void", ""])
def test_amd_literals_granting_nothing_pass_and_value_from_does_not(value: str) -> None:
    assert run(pod(container(env=[{"name": "AMD_VISIBLE_DEVICES", "value": value}])), rule=ID) == []
    ref = {"name": "DOCKER_RESOURCE_X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    (v,) = run(pod(container(env=[ref])), rule=ID)
    assert v.value == "valueFrom"


def test_amd_names_are_exact_and_follow_the_vendor_switch() -> None:
    for name in ("amd_visible_devices", "AMD_VISIBLE_DEVICES_X", "XDOCKER_RESOURCE_GPU", "DOCKER_RESOURCES"):
        assert run(pod(container(env=[{"name": name, "value": "all"}])), rule=ID) == [], name
    entry = {"name": "AMD_VISIBLE_DEVICES", "value": "all"}
    assert run(pod(container(env=[entry])), default_policy(vendors=(NVIDIA,)), rule=ID) == []


def test_nvidia_first_then_amd_in_each_container() -> None:
    env = [{"name": "AMD_VISIBLE_DEVICES", "value": "0"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    found = run(pod(container(env=env)), rule=ID)
    assert [v.path for v in found] == ["spec.containers[0].env[1]", "spec.containers[0].env[0]"]
