"""no-device-grant-env: IMEX channels and MIG control are not set by hand (issue 32 #7)."""

from __future__ import annotations

import pytest

from tests.helpers import container, pod, run

ID = "no-device-grant-env"


@pytest.mark.parametrize("name", ["NVIDIA_IMEX_CHANNELS", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"])
@pytest.mark.parametrize("value", ["0", "all", "0,1", " void", "void\x1c"])
def test_granting_values_are_denied_in_every_container(name: str, value: str) -> None:
    for gpu in (None, 1):
        (v,) = run(pod(container("c", gpu=gpu, env=[{"name": name, "value": value}])), rule=ID)
        assert v.path == "spec.containers[0].env[0]" and name in v.detail


def test_imex_fix_names_the_dra_way() -> None:
    (v,) = run(pod(container("c", env=[{"name": "NVIDIA_IMEX_CHANNELS", "value": "0"}])), rule=ID)
    assert "ComputeDomain" in v.fix


@pytest.mark.parametrize("value", ["void", "none", ""])
def test_literals_granting_nothing_and_value_from(value: str) -> None:
    assert run(pod(container("c", env=[{"name": "NVIDIA_IMEX_CHANNELS", "value": value}])), rule=ID) == []
    ref = {"name": "NVIDIA_IMEX_CHANNELS", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}
    assert "valueFrom" in run(pod(container("c", env=[ref])), rule=ID)[0].detail
