"""node-wide-access (warn by default): any pod outside the boundary the GPU guarantee covers
(privilege, capabilities outside baseline, host namespaces, hostPaths reaching a device channel),
reported with the exemption a node agent takes; attacks 5 and 8 of issue 48."""

from __future__ import annotations

import pytest

from tests.helpers import container, pod, run
from webhook.config import from_mapping
from webhook.policy import Mode

ID = "node-wide-access"


def test_privileged_in_any_container_kind_is_flagged_with_the_agent_exemption() -> None:
    (v,) = run(pod(container("web", privileged=True)), rule=ID)
    assert v.path == "spec.containers[0].securityContext.privileged" and "every GPU" in v.detail
    assert "exemptServiceAccounts" in v.fix and "Pod Security Admission" in v.fix
    debug = pod(container("web"), ephemeralContainers=[container("debugger", privileged=True)])
    (v,) = run(debug, rule=ID)
    assert v.container == "debugger"


def test_an_nvidia_image_is_no_exemption() -> None:
    """Attack 8: an image under nvcr.io/nvidia made a privileged pod a node agent, skipped."""
    p = pod(container("x", image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0", privileged=True), hostPID=True)
    assert {v.path for v in run(p, rule=ID)} == {"spec.containers[0].securityContext.privileged"}


@pytest.mark.parametrize(
    "path",
    [
        "/run/containerd/containerd.sock",
        "/var/run/containerd",
        "/run/crio/crio.sock",
        "/var/run/docker.sock",
        "/run/k3s/containerd/containerd.sock",
        "/var/run//containerd/",
        "/run",
        "/",
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/device-plugins",
    ],
)
def test_sockets_are_flagged_read_only_too(path: str) -> None:
    mount = {"name": "sock", "mountPath": "/s", "readOnly": True}
    p = pod(container("web", volumeMounts=[mount]), volumes=[{"name": "sock", "hostPath": {"path": path}}])
    (v,) = run(p, rule=ID)
    assert v.path == "spec.volumes[0].hostPath.path" and "reaches" in v.detail


@pytest.mark.parametrize("path", ["/proc", "/sys", "/etc/cdi", "/usr/local/nvidia", "/var/log", "/dev"])
def test_read_only_files_are_fine(path: str) -> None:
    """node-exporter's /proc and /sys, istio-cni's /proc, Falco's /dev: read-only, no channel."""
    mount = {"name": "h", "mountPath": "/h", "readOnly": True}
    p = pod(container("web", volumeMounts=[mount]), volumes=[{"name": "h", "hostPath": {"path": path}}])
    assert run(p, rule=ID) == []


def test_host_namespaces_and_capabilities_are_flagged() -> None:
    # hostPID alone (node-exporter) reaches no device; with SYS_PTRACE, other pods' open GPU descriptors.
    assert run(pod(container("web"), hostPID=True), rule=ID) == []
    assert run(pod(container("web"), hostIPC=True), rule=ID) == []
    ptrace = run(pod(container("web", caps=["SYS_PTRACE"]), hostPID=True), rule=ID)
    assert [v.path for v in ptrace] == ["spec.hostPID"] and "pidfd_getfd" in ptrace[0].detail
    (v,) = run(pod(container("web", caps=["SYS_ADMIN", "NET_BIND_SERVICE", "IPC_LOCK", "NET_RAW"])), rule=ID)
    assert v.path == "spec.containers[0].securityContext.capabilities.add[0]" and "device cgroup" in v.detail
    assert run(pod(container("web", caps=["IPC_LOCK", "NET_ADMIN"])), rule=ID) == []  # reach no device


def test_gpu_pods_get_the_rest_and_the_gpu_rules_the_gpu_part() -> None:
    """Attack 5: a GPU pod's runtime socket is denied by no-gpu-device-hostpath, not silently skipped."""
    assert run(pod(container("t", gpu=1, privileged=True)), rule=ID) == []
    (v,) = run(pod(container("t", gpu=1, caps=["SYS_MODULE"])), rule=ID)
    assert '"SYS_MODULE"' in v.detail
    sock = {"name": "s", "mountPath": "/s"}
    gpu = pod(
        container("t", gpu=1, volumeMounts=[sock]), volumes=[{"name": "s", "hostPath": {"path": "/run/containerd"}}]
    )
    assert [v.rule for v in run(gpu)] == ["no-gpu-device-hostpath"]


def test_plain_pods_are_fine() -> None:
    assert run(pod(container("web"), volumes=[{"name": "d", "hostPath": {"path": "/data"}}]), rule=ID) == []


def test_warn_by_default_deny_by_choice() -> None:
    assert from_mapping({}, environ={}).policy.mode(ID) is Mode.WARN
    assert from_mapping({"rules": {ID: "deny"}}, environ={}).policy.mode(ID) is Mode.DENY
