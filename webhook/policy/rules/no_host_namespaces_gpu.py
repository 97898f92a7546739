"""no-host-namespaces-gpu: GPU pods do not share the node's PID or IPC namespace.

Restricted fields: spec.hostPID, spec.hostIPC (GPU pods: a GPU request, or pinned to GPU nodes)
Allowed values: false or absent.

Why: with the host PID namespace a pod sees, signals and inspects the processes of every
other GPU workload on the node; with the host IPC namespace it reaches their shared memory
(CUDA IPC and NCCL use it). Monitoring agents that need this run in exempt namespaces.
"""

from __future__ import annotations

from ..objects import PodView
from ..types import Policy, Rule, Violation, gpu_pod

ID = "no-host-namespaces-gpu"
WHAT = {"hostPID": "the node's processes", "hostIPC": "the node's shared memory"}


def check(view: PodView, policy: Policy) -> list[Violation]:
    flagged = [field for field in WHAT if view.spec.get(field) is True]
    if not flagged or not view.is_gpu_pod(policy):
        return []
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.{field}",
            detail=f"is true in a GPU pod: it exposes {WHAT[field]}, including other GPU workloads",
            fix=f"remove {field}",
            value="true",
        )
        for field in flagged
    ]


RULE = Rule(id=ID, check=check, summary="no hostPID or hostIPC in GPU pods", triggers=gpu_pod)
