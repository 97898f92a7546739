"""no-host-namespaces-gpu: hostPID / hostIPC in GPU pods."""

from __future__ import annotations

from tests.helpers import container, pod, run

HOSTNS = "no-host-namespaces-gpu"


def test_host_namespaces_in_gpu_pods() -> None:
    p = pod(container(gpu=1), hostPID=True, hostIPC=True, hostNetwork=True)
    assert [v.path for v in run(p, rule=HOSTNS)] == ["spec.hostPID", "spec.hostIPC"]
    assert run(pod(container(), hostPID=True), rule=HOSTNS) == []
    assert len(run(pod(container(), hostIPC=True, nodeSelector={"accelerator": "t4"}), rule=HOSTNS)) == 1
    assert run(pod(container(gpu=1), hostPID=False), rule=HOSTNS) == []
