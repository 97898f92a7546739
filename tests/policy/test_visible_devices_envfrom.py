"""visible-devices-envfrom: envFrom may carry NVIDIA_VISIBLE_DEVICES into GPU pods (warn)."""

from __future__ import annotations

from tests.helpers import container, default_policy, pod, run
from webhook.policy import Mode

ENVFROM = "visible-devices-envfrom"
CM = [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "creds"}}]


def test_envfrom_in_gpu_containers() -> None:
    (v,) = run(pod(container("t", gpu=1, envFrom=CM), container("side", envFrom=CM)), rule=ENVFROM)
    assert v.container == "t" and v.path == "spec.containers[0].envFrom"
    assert 'loads ConfigMap "settings", Secret "creds"' in v.detail
    assert "an explicit env entry wins over envFrom" in v.fix


def test_envfrom_without_isolation_flags_non_gpu_containers_too() -> None:
    p = default_policy(isolate_non_gpu=False)
    found = run(pod(container("t", gpu=1), container("side", envFrom=CM)), p, rule=ENVFROM)
    assert [v.container for v in found] == ["side"]


def test_envfrom_with_explicit_entry_or_without_gpu_is_fine() -> None:
    explicit = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert run(pod(container(gpu=1, envFrom=CM, env=explicit)), rule=ENVFROM) == []
    assert run(pod(container(envFrom=CM)), rule=ENVFROM) == []


def test_envfrom_is_a_warning_by_default() -> None:
    from webhook.config import from_mapping

    assert from_mapping({}, environ={}).policy.mode(ENVFROM) is Mode.WARN
