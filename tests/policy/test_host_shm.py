"""host-shm: the node's /dev/shm, off by default; never a GPU device finding."""

from __future__ import annotations

from tests.helpers import container, pod, run
from webhook.config import default_policy
from webhook.policy import Mode

ID = "host-shm"


def shm_pod(path: str = "/dev/shm") -> dict[str, object]:
    # The EKS multi-node training samples: 8 GPUs and the host's shared memory.
    return pod(container("trainer", gpu=8), volumes=[{"name": "shm", "hostPath": {"path": path}}])


def test_off_by_default_and_not_a_device_finding() -> None:
    assert default_policy().mode(ID) is Mode.OFF
    assert run(shm_pod()) == []
    assert run(shm_pod("/dev/shm/")) == []
    assert run(shm_pod("/dev")) == []  # a device node by hostPath: the device cgroup refuses it


def test_when_on_it_names_the_memory_backed_empty_dir() -> None:
    on = default_policy(modes={ID: Mode.WARN})
    (v,) = run(shm_pod("/var/../dev/shm"), on, rule=ID)
    assert v.path == "spec.volumes[0].hostPath.path"
    assert "emptyDir volume with medium: Memory" in v.fix
    assert run(shm_pod("/dev/shmem"), on, rule=ID) == []
