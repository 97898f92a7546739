"""gpu-quota-advice: a ResourceQuota that means to cap GPUs must say requests.<resource>."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import run
from webhook.config import default_policy
from webhook.policy import Mode
from webhook.policy.shapes import ShapeError

ID = "gpu-quota-advice"
ON = default_policy(modes={ID: Mode.WARN})


def quota(hard: Any) -> dict[str, Any]:
    # What teams write after the Kubernetes docs' compute-resources quota example, GPUs added.
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute-resources", "namespace": "team-a"},
        "spec": {"hard": hard},
    }


def test_off_by_default() -> None:
    assert default_policy().mode(ID) is Mode.OFF
    assert run(quota({"nvidia.com/gpu": "4"})) == []


def test_plain_and_limits_keys_cap_nothing_and_say_the_key_to_use() -> None:
    found = run(quota({"requests.cpu": "64", "nvidia.com/gpu": "4", "limits.nvidia.com/gpu": 4}), ON, rule=ID)
    assert [(v.path, v.value) for v in found] == [
        ('spec.hard["nvidia.com/gpu"]', '"4"'),
        ('spec.hard["limits.nvidia.com/gpu"]', "4"),
    ]
    assert "quota counts nvidia.com/gpu only as requests.nvidia.com/gpu: this caps nothing" in found[0].detail
    assert found[0].fix.startswith('name it "requests.nvidia.com/gpu"') and found[0].scope == "ResourceQuota"


def test_the_right_key_mig_and_other_resources() -> None:
    assert run(quota({"requests.nvidia.com/gpu": "4", "pods": "20", "requests.memory": "1Ti"}), ON, rule=ID) == []
    (v,) = run(quota({"nvidia.com/mig-1g.10gb": "7"}), ON, rule=ID)
    assert v.path == 'spec.hard["nvidia.com/mig-1g.10gb"]'


def test_a_misshapen_quota_is_a_shape_error() -> None:
    with pytest.raises(ShapeError):
        run(quota(["nvidia.com/gpu"]), ON, rule=ID)
