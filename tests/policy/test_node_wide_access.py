"""node-wide-access (warn by default): pods that ask for no GPU but reach every GPU of their node (issue 32 #8)."""

from __future__ import annotations

import pytest

from tests.helpers import container, pod, run
from webhook.config import from_mapping
from webhook.policy import Mode

ID = "node-wide-access"


def test_privileged_in_any_container_kind_is_flagged() -> None:
    (v,) = run(pod(container("web", privileged=True)), rule=ID)
    assert v.path == "spec.containers[0].securityContext.privileged" and "every GPU" in v.detail
    debug = pod(container("web"), ephemeralContainers=[container("debugger", privileged=True)])
    (v,) = run(debug, rule=ID)
    assert v.container == "debugger"


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
    ],
)
def test_runtime_sockets_are_flagged(path: str) -> None:
    p = pod(container("web"), volumes=[{"name": "sock", "hostPath": {"path": path}}])
    (v,) = run(p, rule=ID)
    assert v.path == "spec.volumes[0].hostPath.path" and "container runtime" in v.detail


def test_host_pid_is_flagged() -> None:
    (v,) = run(pod(container("web"), hostPID=True), rule=ID)
    assert v.path == "spec.hostPID"


def test_gpu_pods_are_left_to_the_gpu_rules_and_plain_pods_are_fine() -> None:
    assert run(pod(container("t", gpu=1, privileged=True)), rule=ID) == []
    assert run(pod(container("web"), volumes=[{"name": "d", "hostPath": {"path": "/data"}}]), rule=ID) == []


def test_warn_by_default_deny_by_choice() -> None:
    assert from_mapping({}, environ={}).policy.mode(ID) is Mode.WARN
    assert from_mapping({"rules": {ID: "deny"}}, environ={}).policy.mode(ID) is Mode.DENY
