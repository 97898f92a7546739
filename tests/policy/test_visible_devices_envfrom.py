"""visible-devices-envfrom: envFrom must not be able to override the device plugin's variable (issue 32 #3)."""

from __future__ import annotations

import pytest

from tests.helpers import container, default_policy, pod, run
from webhook.policy import Mode
from webhook.policy.nvidia import GRANTING

ENVFROM = "visible-devices-envfrom"
CM = [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "creds"}}]


def test_envfrom_in_gpu_containers_is_denied() -> None:
    found = run(pod(container("t", gpu=1, envFrom=CM), container("side", envFrom=CM)), rule=ENVFROM)
    assert [(v.container, v.path) for v in found] == [
        ("t", "spec.containers[0].envFrom[0]"),
        ("t", "spec.containers[0].envFrom[1]"),
    ]
    assert 'loads ConfigMap "settings" with no prefix' in found[0].detail
    assert "NVIDIA_VISIBLE_DEVICES" in found[0].detail and "prefix" in found[0].fix
    assert 'Secret "creds"' in found[1].detail


@pytest.mark.parametrize(
    ("prefix", "flagged"),
    [("", True), ("NVIDIA_", True), ("NVIDIA_IMEX", True), ("N", True), ("APP_", False), ("HF_", False)],
)
def test_a_prefix_that_rules_the_names_out_is_fine(prefix: str, flagged: bool) -> None:
    env_from = [{"configMapRef": {"name": "settings"}, "prefix": prefix}]
    assert bool(run(pod(container("t", gpu=1, envFrom=env_from)), rule=ENVFROM)) is flagged


def test_explicit_entries_rule_their_names_out() -> None:
    explicit = [{"name": n, "value": "void"} for n in GRANTING]
    assert run(pod(container(gpu=1, envFrom=CM, env=explicit)), rule=ENVFROM) == []
    assert len(run(pod(container(gpu=1, envFrom=CM, env=explicit[:1])), rule=ENVFROM)) == 2


def test_containers_without_a_plugin_gpu_are_left_to_isolation() -> None:
    assert run(pod(container(envFrom=CM)), rule=ENVFROM) == []
    assert run(pod(container(envFrom=CM)), default_policy(isolate_non_gpu=False), rule=ENVFROM) == []


def test_envfrom_is_denied_by_default() -> None:
    from webhook.config import from_mapping

    assert from_mapping({}, environ={}).policy.mode(ENVFROM) is Mode.DENY
