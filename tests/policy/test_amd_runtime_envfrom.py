"""amd-runtime-envfrom: where nodes run the AMD runtime, envFrom cannot set its variables (issue 36)."""

from __future__ import annotations

import pytest

from tests.helpers import POLICY, container, default_policy, mutated, pod, run
from webhook.policy import Mode
from webhook.policy.vendors import NVIDIA

ID = "amd-runtime-envfrom"
ON = default_policy(amd_runtime_env=True)


def test_silent_until_the_nodes_are_said_to_run_the_amd_runtime() -> None:
    """One switch for both AMD defaults (issue 48): vendors.amd.runtimeEnv, off as shipped."""
    assert POLICY.mode(ID) is Mode.DENY and not POLICY.amd_runtime_env
    assert run(pod(container("web", envFrom=[{"configMapRef": {"name": "settings"}}])), rule=ID) == []
    _, stored = mutated(pod(container("web")))
    assert "AMD_VISIBLE_DEVICES" not in str(stored)


@pytest.mark.parametrize(("prefix", "reached"), [("", "DOCKER_RESOURCE_*"), ("DOCKER_", "DOCKER_RESOURCE_*")])
def test_a_prefix_that_reaches_docker_resource_is_denied_in_every_container(prefix: str, reached: str) -> None:
    item = {"configMapRef": {"name": "settings"}, **({"prefix": prefix} if prefix else {})}
    _, stored = mutated(pod(container("web", envFrom=[item])), ON)  # as the validating webhook sees it
    (v,) = run(stored, ON, rule=ID)
    assert v.path == "spec.containers[0].envFrom[0]" and reached in v.detail
    assert "AMD_VISIBLE_DEVICES" not in v.detail  # isolation's own `none` in env overrides that key
    assert "APP_" in v.fix


def test_an_amd_gpu_container_keeps_no_override_for_amd_visible_devices() -> None:
    c = container("rocm", resources={"limits": {"amd.com/gpu": 1}}, envFrom=[{"secretRef": {"name": "s"}}])
    (v,) = run(pod(c), ON, rule=ID)
    assert "AMD_VISIBLE_DEVICES or DOCKER_RESOURCE_*" in v.detail and 'Secret "s"' in v.detail


def test_safe_prefixes_and_amd_off() -> None:
    for prefix in ("APP_", "DOCKER_RESOURCES", "AMD_"):
        item = {"configMapRef": {"name": "settings"}, "prefix": prefix}
        found = run(pod(container(envFrom=[item], env=[{"name": "AMD_VISIBLE_DEVICES", "value": "none"}])), ON, rule=ID)
        assert found == [], prefix
    off = default_policy(amd_runtime_env=True, vendors=(NVIDIA,))
    assert run(pod(container(envFrom=[{"configMapRef": {"name": "settings"}}])), off, rule=ID) == []
