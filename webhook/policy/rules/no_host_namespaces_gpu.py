"""no-host-namespaces-gpu: GPU pods do not share the node's PID or IPC namespace.

Restricted fields: spec.hostPID, spec.hostIPC (GPU pods: a GPU request, or pinned to GPU nodes)
Allowed values: false or absent. Monitoring agents that need this run in exempt namespaces.
"""

from __future__ import annotations

from ..gpus import gpu_pod, pod_vendor
from ..objects import PodView
from ..rule import GPU_POD, Rule
from ..types import Policy, Violation

ID = "no-host-namespaces-gpu"


def _fix(field: str, view: PodView, policy: Policy) -> str:
    if field == "hostIPC" and pod_vendor(view, policy).key == "amd":
        # AMD's configuration guide suggests hostIPC for non-privileged pods; ROCm needs it only
        # to share memory with processes outside the pod.
        return (
            "remove hostIPC: ROCm's processes in one pod share memory through the pod's own IPC namespace "
            "(mount an emptyDir with medium: Memory at /dev/shm for more)"
        )
    return f"remove {field}"


def check(view: PodView, policy: Policy) -> list[Violation]:
    flagged = [
        (field, what)
        for field, on, what in [
            ("hostPID", view.host_pid, "the node's processes"),
            ("hostIPC", view.host_ipc, "the node's shared memory"),
        ]
        if on
    ]
    if not flagged or not gpu_pod(view, policy):
        return []
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.{field}",
            detail=f"is true in a GPU pod: it exposes {what}, including other GPU workloads",
            fix=_fix(field, view, policy),
            value="true",
        )
        for field, what in flagged
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="GPU pods do not set `hostPID` or `hostIPC`.",
    why="With the host PID namespace a pod sees and signals the processes of every other GPU workload on the "
    "node; with host IPC it reaches their shared memory (CUDA IPC and NCCL use it).",
    reads=("hostPID", "hostIPC", "containers[*].resources", "nodeSelector", "affinity"),
    triggers=GPU_POD,
    example={"spec": {"hostPID": True, "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
)
