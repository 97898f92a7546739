"""driver-capabilities-non-gpu: NVIDIA_DRIVER_CAPABILITIES=all in a container that requests no GPU (warn)."""

from __future__ import annotations

import pytest

from tests.helpers import POLICY, container, pod, run, wrap
from webhook.policy import Mode, engine

ID = "driver-capabilities-non-gpu"


def caps(value: str) -> list[dict[str, str]]:
    return [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": value}]


@pytest.mark.parametrize("value", ["all", "compute,all", " all ", "utility, all"])
def test_all_in_a_non_gpu_container_is_flagged(value: str) -> None:
    (v,) = run(pod(container("gpu", gpu=1), container("web", env=caps(value))), rule=ID)
    assert v.container == "web" and v.path == "spec.containers[1].env[0]"
    assert "requests no GPU" in v.detail


@pytest.mark.parametrize("value", ["compute,utility", "ALL", "", "graphics"])
def test_other_values_are_fine(value: str) -> None:
    assert run(pod(container("web", env=caps(value))), rule=ID) == []


def test_gpu_containers_choose_their_capabilities() -> None:
    assert run(pod(container("t", gpu=1, env=caps("all"))), rule=ID) == []
    assert run(pod(container("t", gpu="0.5", env=caps("all"))), rule=ID) == []


def test_init_containers_and_templates() -> None:
    (v,) = run(wrap(pod(container(), initContainers=[container("i", env=caps("all"))]), "Deployment"), rule=ID)
    assert v.path == "spec.template.spec.initContainers[0].env[0]"


def test_a_warning_by_default() -> None:
    assert POLICY.mode(ID) is Mode.WARN
    found = engine.find_violations(pod(container("web", env=caps("all"))), "", "Pod", POLICY)
    assert found is not None
    verdict = engine.judge(found, POLICY)
    assert verdict.allowed and verdict.warnings()[0].startswith(f"would violate GPU policy: {ID} (")
