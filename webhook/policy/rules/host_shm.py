"""host-shm (off by default): the node's /dev/shm through hostPath.

Restricted fields: spec.volumes[*].hostPath.path, normalised, at or under /dev/shm.
Not a GPU side door (no device nodes live there), which is why no-gpu-device-hostpath leaves
it alone: EKS and NCCL multi-node training samples mount it into pods that already hold their
GPUs. It is still the node's shared memory, shared with every other pod that mounts it; a
platform that wants pods to keep to their own turns this on, and the fix is the pod's own
memory-backed emptyDir.
"""

from __future__ import annotations

from ..hostpaths import SHM, normalise, under
from ..objects import PodView
from ..rule import PATHS, Rule, Trigger, Where
from ..types import Mode, Policy, Violation

ID = "host-shm"


def check(view: PodView, policy: Policy) -> list[Violation]:
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.volumes[{volume.index}].hostPath.path",
            detail=f'is "{volume.path}": the node\'s shared memory, shared with every pod that mounts it',
            fix="use the pod's own shared memory: an emptyDir volume with medium: Memory mounted at /dev/shm",
            value=f'"{volume.path}"',
        )
        for volume in view.host_paths
        if under(normalise(volume.path), SHM)
    ]


RULE: Rule = Rule(
    webhook_only=PATHS,
    id=ID,
    check=check,
    summary="No hostPath at or under `/dev/shm` (off by default).",
    why="The node's shared memory is shared with every pod that mounts it; `emptyDir: {medium: Memory}` gives a "
    "pod (NCCL, PyTorch DataLoader) its own.",
    reads=("volumes[*].hostPath.path",),
    triggers=(Trigger(Where.HOSTPATH_VOLUME, "hostPath"),),
    example={
        "spec": {"containers": [{"name": "t"}], "volumes": [{"name": "shm", "hostPath": {"path": "/dev/shm"}}]},
    },
    default_mode=Mode.OFF,
)
