"""no-host-namespaces-gpu: GPU pods do not share the node's PID or IPC namespace.

Restricted fields: spec.hostPID, spec.hostIPC (GPU pods: a GPU request, or pinned to GPU nodes)
Allowed values: false or absent. Monitoring agents that need this run in exempt namespaces.
"""

from __future__ import annotations

from ..gpus import gpu_pod
from ..objects import PodView
from ..rule import GPU_POD, Rule
from ..types import Policy, Violation

ID = "no-host-namespaces-gpu"


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
            fix=f"remove {field}",
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
