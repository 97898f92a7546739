"""driver-hostpath-non-gpu: the node's driver only for pods that get a GPU."""

from __future__ import annotations

from typing import Any

from tests.helpers import POLICY, container, default_policy, pod, run
from webhook.policy import Mode

ID = "driver-hostpath-non-gpu"
ON = default_policy(modes={ID: Mode.DENY})


def test_off_by_default() -> None:
    """Without a device node the device cgroup allows, the driver's files give nothing (issue 48)."""
    assert POLICY.mode(ID) is Mode.OFF
    assert run(with_volume("/usr/local/nvidia"), rule=ID) == []


def with_volume(path: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return pod(*(containers or (container("app"),)), volumes=[{"name": "d", "hostPath": {"path": path}}], **spec)


def test_vendor_driver_folders_in_non_gpu_pods_are_denied_when_on() -> None:
    for path in (
        "/home/kubernetes/bin/nvidia",
        "/home/kubernetes/bin/nvidia/lib64",
        "/usr/local/nvidia/",
        "/usr/local",
    ):
        (v,) = run(with_volume(path), ON, rule=ID)
        assert v.path == "spec.volumes[0].hostPath.path", path


def test_gpu_pods_and_other_paths_are_fine() -> None:
    # GKE's TCPX daemon mounts the driver in a pod that holds 8 GPUs.
    assert (
        run(with_volume("/home/kubernetes/bin/nvidia/lib64", container("d"), container("t", gpu=8)), ON, rule=ID) == []
    )
    assert (
        run(with_volume("/usr/local/nvidia", container("a"), nodeSelector={"nvidia.com/gpu.present": "true"}), rule=ID)
        == []
    )
    assert run(with_volume("/usr/local/bin"), ON, rule=ID) == []
    assert run(with_volume("/home/kubernetes/bin/nvidia-smi-exporter"), ON, rule=ID) == []
