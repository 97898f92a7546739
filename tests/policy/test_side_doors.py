"""The side doors of issue 5: hostPath, CDI annotations, host namespaces, envFrom, LimitRange."""

from __future__ import annotations

import pytest

from tests.builders import SPEC_PATH, container, pod, wrap
from webhook import policy
from webhook.policy import Mode, Policy
from webhook.policy.rules.no_gpu_device_hostpath import exposes, normalise

from .helpers import run

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


CDI = "no-cdi-annotations"


def test_cdi_annotations_on_pods_and_templates() -> None:
    p = pod(container())
    p["metadata"]["annotations"] = {
        "nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all",
        "cdi.k8s.io/vendor": "x",
        "prometheus.io/scrape": "true",
    }
    assert [v.path for v in run(p, rule=CDI)] == [
        'metadata.annotations["nvidia.cdi.k8s.io/container.main"]',
        'metadata.annotations["cdi.k8s.io/vendor"]',
    ]
    d = wrap(pod(container()), "Deployment")
    d["spec"]["template"]["metadata"]["annotations"] = {"nvidia.cdi.k8s.io/container.c": "nvidia.com/gpu=0"}
    (v,) = run(d, rule=CDI)
    assert v.path == 'spec.template.metadata.annotations["nvidia.cdi.k8s.io/container.c"]'
    assert v.describe().startswith("no-cdi-annotations (pod: spec.template.metadata.annotations")


HOSTNS = "no-host-namespaces-gpu"


def test_host_namespaces_in_gpu_pods() -> None:
    p = pod(container(gpu=1), hostPID=True, hostIPC=True, hostNetwork=True)
    assert [v.path for v in run(p, rule=HOSTNS)] == ["spec.hostPID", "spec.hostIPC"]
    assert run(pod(container(), hostPID=True), rule=HOSTNS) == []
    assert len(run(pod(container(), hostIPC=True, nodeSelector={"accelerator": "t4"}), rule=HOSTNS)) == 1
    assert run(pod(container(gpu=1), hostPID=False), rule=HOSTNS) == []


ENVFROM = "visible-devices-envfrom"
CM = [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "creds"}}]


def test_envfrom_in_gpu_containers() -> None:
    (v,) = run(pod(container("t", gpu=1, envFrom=CM), container("side", envFrom=CM)), rule=ENVFROM)
    assert v.container == "t" and v.path == "spec.containers[0].envFrom"
    assert 'loads ConfigMap "settings", Secret "creds"' in v.detail
    assert "an explicit env entry wins over envFrom" in v.fix


def test_envfrom_without_isolation_flags_non_gpu_containers_too() -> None:
    p = Policy(isolate_non_gpu=False)
    found = run(pod(container("t", gpu=1), container("side", envFrom=CM)), p, rule=ENVFROM)
    assert [v.container for v in found] == ["side"]


def test_envfrom_with_explicit_entry_or_without_gpu_is_fine() -> None:
    explicit = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert run(pod(container(gpu=1, envFrom=CM, env=explicit)), rule=ENVFROM) == []
    assert run(pod(container(envFrom=CM)), rule=ENVFROM) == []


def test_envfrom_is_a_warning_by_default() -> None:
    from webhook.config import from_mapping

    assert from_mapping({}, environ={}).policy.mode(ENVFROM) is Mode.WARN


def limit_range(**limits: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "l", "namespace": "ml"},
        "spec": {"limits": [{"type": "Container", **limits}]},
    }


def test_limitrange_defaults() -> None:
    lr = limit_range(
        default={"nvidia.com/gpu": "1", "cpu": "1"}, defaultRequest={"nvidia.com/gpu": 1}, max={"nvidia.com/gpu": "4"}
    )
    found = policy.check(lr, "", "LimitRange", Policy())
    assert found is not None
    assert [v.path for v in found] == [
        'spec.limits[0].default["nvidia.com/gpu"]',
        'spec.limits[0].defaultRequest["nvidia.com/gpu"]',
    ]
    assert found[0].describe().startswith('gpu-limitrange (LimitRange: spec.limits[0].default["nvidia.com/gpu"] is "1"')
    assert (
        policy.check(limit_range(default={"cpu": "1"}, max={"nvidia.com/gpu": "2"}), "", "LimitRange", Policy()) == []
    )
    assert policy.check(lr, "", "LimitRange", Policy(modes={"gpu-limitrange": Mode.OFF})) == []
