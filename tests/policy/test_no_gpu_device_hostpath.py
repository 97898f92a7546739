"""no-gpu-device-hostpath: hostPath into devices, device-plugin or CDI state; device-list mounts."""

from __future__ import annotations

import pytest

from tests.helpers import SPEC_PATH, container, pod, run, wrap
from webhook.policy.hostpaths import normalise
from webhook.policy.rules.no_gpu_device_hostpath import exposes

HOSTPATH = "no-gpu-device-hostpath"


def host_volume(path: str) -> dict:
    return {"name": "h", "hostPath": {"path": path}}


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


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "//",
        "/dev",
        "//dev",
        "/dev/",
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/dri",
        "/dev/nvidia-caps",
        "/dev/null",
        "/dev/../dev/nvidia0",
        "/home/x/../../dev",
        "/proc",
        "/proc/1/root",
        "/sys",
        "/sys/fs/cgroup",
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/device-plugins/kubelet.sock",
        "/var/lib/kubelet",
        "/var/lib",
        "/var",
        "/var/run/cdi",
        "/run/cdi",
        "/etc/cdi",
        "/etc",
        "/run/nvidia",
        "/run/nvidia/driver",
        "/var/run/nvidia-container-devices",
        "/run/nvidia-container-devices/all",
        "/run",
        "/var/run",
    ],
)
def test_dangerous_host_paths_are_denied(path: str) -> None:
    (v,) = run(pod(container(), volumes=[host_volume(path)]), rule=HOSTPATH)
    assert v.path == "spec.volumes[0].hostPath.path" and v.value == f'"{path}"'
    assert exposes(path)


@pytest.mark.parametrize(
    "path",
    [
        "/tmp",
        "/var/log",
        "/data/models",
        "/devices",
        "/dev2",
        "/opt/nvidia",
        "/etc/ssl/certs",
        "/var/lib/docker-cache",
        "/run/containerd-logs",
    ],
)
def test_other_host_paths_are_fine(path: str) -> None:
    assert run(pod(container(), volumes=[host_volume(path)]), rule=HOSTPATH) == []


def test_device_list_mounts_are_denied_whatever_the_volume() -> None:
    mounts = [{"name": "d", "mountPath": "/var/run/nvidia-container-devices/all"}, {"name": "e", "mountPath": "/data"}]
    p = pod(container("c", volumeMounts=mounts), volumes=[{"name": "d", "emptyDir": {}}])
    (v,) = run(p, rule=HOSTPATH)
    assert v.path == "spec.containers[0].volumeMounts[0].mountPath" and v.container == "c"


def test_classic_dev_null_device_list_trick() -> None:
    p = pod(
        container("c", volumeMounts=[{"name": "n", "mountPath": "/run/nvidia-container-devices/GPU-1"}]),
        volumes=[{"name": "n", "hostPath": {"path": "/dev/null", "type": "CharDevice"}}],
    )
    assert [v.path for v in run(p, rule=HOSTPATH)] == [
        "spec.volumes[0].hostPath.path",
        "spec.containers[0].volumeMounts[0].mountPath",
    ]


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_hostpath_in_templates(kind: str) -> None:
    (v,) = run(wrap(pod(container(), volumes=[host_volume("/dev")]), kind), rule=HOSTPATH)
    assert v.path == f"{SPEC_PATH[kind]}.volumes[0].hostPath.path"
