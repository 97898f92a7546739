"""driver-hostpath-non-gpu (off by default): pods without a GPU do not mount the node's NVIDIA driver.

Off by default since the boundary model (docs/policy.md, "The boundary"): the driver's files give a
container nothing without a device node its device cgroup allows, which only the device plugin,
DRA, privilege or SYS_ADMIN add; a writable driver folder is a device channel, which
node-wide-access reports for every pod (no-gpu-device-hostpath denies it in GPU pods). A platform
that wants non-GPU pods never to read the driver turns it on.

Restricted fields: spec.volumes[*].hostPath.path, normalised, that is, lies under or contains a
vendor driver folder: /home/kubernetes/bin/nvidia (GKE), /usr/local/nvidia (CCE and others),
/run/nvidia/driver (GPU operator; also covered for every pod by no-gpu-device-hostpath).
Applies to pods that get no GPU (webhook.policy.gpus.gpu_pod): GPU pods legitimately mount the
driver (GKE's TCPX daemons do); a pod without one has no use for it except to pair it with
device nodes it obtains some other way.
"""

from __future__ import annotations

from typing import Final

from ..gpus import gpu_pod
from ..hostpaths import normalise, overlaps
from ..objects import PodView
from ..rule import PATHS, Rule, Trigger, Where
from ..types import Mode, Policy, Violation
from ..vendors import NVIDIA

ID = "driver-hostpath-non-gpu"
DRIVER_DIRS: Final[tuple[str, ...]] = NVIDIA.driver_dirs


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not view.host_paths or gpu_pod(view, policy):
        return []
    out: list[Violation] = []
    for volume in view.host_paths:
        norm = normalise(volume.path)
        for folder in DRIVER_DIRS:
            if overlaps(norm, folder):
                out.append(
                    Violation(
                        rule=ID,
                        path=f"{view.path}.volumes[{volume.index}].hostPath.path",
                        detail=f'is "{volume.path}", which reaches the NVIDIA driver ({folder}) in a pod that '
                        "requests no GPU",
                        fix=f'remove the volume, or request GPUs with resources.limits["{policy.resource_name}"] '
                        "(the device plugin mounts the driver)",
                        value=f'"{volume.path}"',
                    )
                )
                break
    return out


RULE: Rule = Rule(
    webhook_only=PATHS,
    id=ID,
    check=check,
    summary="A pod that gets no GPU mounts no hostPath under or containing `/home/kubernetes/bin/nvidia`, "
    "`/usr/local/nvidia` or `/run/nvidia/driver` (off by default: without a device the driver gives nothing).",
    why="The driver is half of a GPU: paired with device nodes obtained elsewhere it bypasses the device plugin. "
    "GPU pods get it from the device plugin (GKE's TCPX daemons mount it next to their GPUs, and stay allowed).",
    reads=("volumes[*].hostPath.path", "containers[*].resources", "nodeSelector", "affinity"),
    triggers=(Trigger(Where.HOSTPATH_VOLUME, "hostPath"),),
    default_mode=Mode.OFF,
    example={
        "spec": {
            "containers": [{"name": "t", "image": "ubuntu:22.04"}],
            "volumes": [{"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}],
        },
    },
)
