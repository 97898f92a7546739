"""no-gpu-device-hostpath: a GPU pod reaching the node's device channels by hostPath; device-list
mounts in any pod (attack 2 of issue 48: the toolkit's prefix has no trailing slash)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import SPEC_PATH, container, pod, run, wrap
from webhook.policy.hostpaths import CHANNELS, channel, normalise
from webhook.policy.rules.no_gpu_device_hostpath import device_list_mount

HOSTPATH = "no-gpu-device-hostpath"


def mounted(path: str, read_only: bool = False, gpu: int | None = 1, **spec: Any) -> dict[str, Any]:
    mount = {"name": "h", "mountPath": "/host", **({"readOnly": True} if read_only else {})}
    return pod(
        container("t", gpu=gpu, volumeMounts=[mount]), volumes=[{"name": "h", "hostPath": {"path": path}}], **spec
    )


@pytest.mark.parametrize(
    ("path", "norm"),
    [
        ("//dev", "/dev"),
        ("/dev/", "/dev"),
        ("/dev/../dev/nvidia0", "/dev/nvidia0"),
        ("/var/run/cdi", "/run/cdi"),
        ("/var//run/./nvidia-container-devices/", "/run/nvidia-container-devices"),
        ("/../..", "/"),
        ("", "/"),
        ("/var/run", "/run"),
    ],
)
def test_normalise(path: str, norm: str) -> None:
    assert normalise(path) == norm


SOCKETS = [
    "/",
    "//",
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/device-plugins/kubelet.sock",
    "/var/lib/kubelet/plugins_registry",  # attack 6: a socket there registers as a DRA driver
    "/var/lib/kubelet/plugins/gpu.nvidia.com",
    "/var/lib/kubelet",
    "/var/lib",
    "/var",
    "/run/containerd/containerd.sock",  # attack 5: the runtime's socket in a GPU pod
    "/var/run/docker.sock",
    "/run/nri/nri.sock",
    "/run",
    "/var/run",
]
FILES = [
    "/var/run/cdi",
    "/etc/cdi",
    "/etc",
    "/run/nvidia",
    "/run/nvidia/driver",
    "/usr/local/nvidia",  # attack 7: the operator's runtime binaries
    "/usr/local",
    "/etc/nvidia-container-runtime",  # attack 7: config.toml names what the hook runs as root
    "/proc",
    "/sys/fs/cgroup",
    "/etc/containerd",
]


@pytest.mark.parametrize("path", SOCKETS)
def test_sockets_are_denied_in_gpu_pods_even_read_only(path: str) -> None:
    (v,) = run(mounted(path, read_only=True), rule=HOSTPATH)
    assert v.path == "spec.volumes[0].hostPath.path" and v.value == f'"{path}"'
    assert "reaches" in v.detail and "exempt" in v.fix


@pytest.mark.parametrize("path", FILES)
def test_file_channels_are_denied_in_gpu_pods_when_writable(path: str) -> None:
    (v,) = run(mounted(path), rule=HOSTPATH)
    assert v.path == "spec.volumes[0].hostPath.path"
    assert run(mounted(path, read_only=True), rule=HOSTPATH) == []  # reading them gives no device


@pytest.mark.parametrize(
    "path",
    ["/dev", "/dev/nvidia0", "/dev/infiniband", "/dev/shm", "/tmp", "/var/log", "/data/models", "/opt/nvidia"],
)
def test_device_nodes_and_data_are_fine(path: str) -> None:
    """The device cgroup refuses a device node the runtime did not add: /dev by hostPath gives
    nothing (measured, docs/policy.md); NCCL pods mount /dev/infiniband and /dev/shm."""
    assert run(mounted(path), rule=HOSTPATH) == []


@pytest.mark.parametrize("path", SOCKETS[:3] + FILES[:3])
def test_non_gpu_pods_are_node_wide_access_not_this_rule(path: str) -> None:
    assert run(mounted(path, gpu=None), rule=HOSTPATH) == []
    assert [v.rule for v in run(mounted(path, gpu=None))] == ["node-wide-access"]


def test_pinned_to_gpu_nodes_is_a_gpu_pod() -> None:
    (v,) = run(mounted("/run/containerd", gpu=None, nodeSelector={"accelerator": "nvidia-t4"}), rule=HOSTPATH)
    assert "containerd" in v.detail


def test_an_unmounted_volume_reaches_nothing() -> None:
    p = pod(container("t", gpu=1), volumes=[{"name": "h", "hostPath": {"path": "/run/containerd"}}])
    assert run(p, rule=HOSTPATH) == []


def test_every_channel_is_reached_by_itself_and_by_root() -> None:
    for ch in CHANNELS:
        assert channel(ch.root, True) == ch or channel(ch.root, True) is not None
        assert channel(ch.root + "/x", True) is not None
    assert channel("/", False) is not None and channel("/", False).socket  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "mount_path",
    [
        "/var/run/nvidia-container-devices/all",
        "/var/run/nvidia-container-devicesall",  # attack 2: no slash, the toolkit's HasPrefix
        "/var/run/nvidia-container-devices",
        "/run/nvidia-container-devices/GPU-1",
        "/var//run/./nvidia-container-devices-x",
        "/var/run/x/../nvidia-container-devicesX",
    ],
)
def test_device_list_mounts_are_denied_whatever_the_volume(mount_path: str) -> None:
    assert device_list_mount(mount_path)
    mounts = [{"name": "d", "mountPath": mount_path}, {"name": "e", "mountPath": "/data"}]
    p = pod(container("c", volumeMounts=mounts), volumes=[{"name": "d", "emptyDir": {}}])
    (v,) = run(p, rule=HOSTPATH)
    assert v.path == "spec.containers[0].volumeMounts[0].mountPath" and v.container == "c"


@pytest.mark.parametrize(
    "mount_path", ["/data/nvidia-container-devices", "/var/run/nvidia", "/opt/run/nvidia-container-devices"]
)
def test_other_mounts_are_fine(mount_path: str) -> None:
    assert not device_list_mount(mount_path)


def test_classic_dev_null_device_list_trick() -> None:
    p = pod(
        container("c", volumeMounts=[{"name": "n", "mountPath": "/run/nvidia-container-devices/GPU-1"}]),
        volumes=[{"name": "n", "hostPath": {"path": "/dev/null", "type": "CharDevice"}}],
    )
    assert [v.path for v in run(p, rule=HOSTPATH)] == ["spec.containers[0].volumeMounts[0].mountPath"]


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_hostpath_in_templates(kind: str) -> None:
    (v,) = run(wrap(mounted("/var/lib/kubelet/device-plugins"), kind), rule=HOSTPATH)
    assert v.path == f"{SPEC_PATH[kind]}.volumes[0].hostPath.path"
