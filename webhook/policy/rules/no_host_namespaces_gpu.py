"""no-host-namespaces-gpu: GPU pods do not share the node's PID or IPC namespace.

Restricted fields: spec.hostPID, spec.hostIPC (GPU pods: a GPU request, or pinned to GPU nodes)
Allowed values: false or absent. Monitoring agents that need this run in exempt namespaces.
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import Check, lit
from ..gpus import gpu_pod, pod_vendor
from ..objects import PodView
from ..rule import GPU_POD, NativeRule, Rule
from ..types import Policy, Violation
from ..vendors import AMD

ID = "no-host-namespaces-gpu"
# AMD's configuration guide suggests hostIPC for non-privileged pods; ROCm needs it only to share
# memory with processes outside the pod.
AMD_IPC_FIX: Final = (
    "remove hostIPC: ROCm's processes in one pod share memory through the pod's own IPC namespace "
    "(mount an emptyDir with medium: Memory at /dev/shm for more)"
)
FIELDS: Final = (("hostPID", "the node's processes"), ("hostIPC", "the node's shared memory"))


def _detail(what: str) -> str:
    return f"is true in a GPU pod: it exposes {what}, including other GPU workloads"


def _fix(field: str, view: PodView, policy: Policy) -> str:
    if field == "hostIPC" and pod_vendor(view, policy).key == AMD.key:
        return AMD_IPC_FIX
    return f"remove {field}"


def check(view: PodView, policy: Policy) -> list[Violation]:
    flagged = [(field, what) for (field, what), on in zip(FIELDS, (view.host_pid, view.host_ipc), strict=True) if on]
    if not flagged or not gpu_pod(view, policy):
        return []
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.{field}",
            detail=_detail(what),
            fix=_fix(field, view, policy),
            value="true",
        )
        for field, what in flagged
    ]


# ---- The CEL twin (a ValidatingAdmissionPolicy): one validation per field, gpus.gpu_pod as in
# no-privileged-gpu (evaluated only where the field is set).
def _check(field: str, what: str) -> Check:
    fix = lit(f"remove {field}")
    if field == "hostIPC":
        fix = f"(variables.podVendor == {lit(AMD.name)} ? {lit(AMD_IPC_FIX)} : {fix})"
    head = f"{ID} (pod: @path@.{field} {_detail(what)}; fix: "
    return Check(
        f"(has(object.spec.{field}) && object.spec.{field}) ? !variables.gpuPod : true",
        f"@prefix@ + {lit(head)} + {cel.agent_lead()} + {fix} + ')'",
    )


NATIVE: Final = NativeRule(
    (("gpuPod", cel.GPU_POD), ("nodeAgent", cel.NODE_AGENT), ("podVendor", cel.pod_vendor())),
    tuple(_check(field, what) for field, what in FIELDS),
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="GPU pods do not set `hostPID` or `hostIPC`.",
    why="With the host PID namespace a pod sees and signals the processes of every other GPU workload on the "
    "node; with host IPC it reaches their shared memory (CUDA IPC and NCCL use it).",
    reads=("hostPID", "hostIPC", "containers[*].resources", "nodeSelector", "affinity"),
    triggers=GPU_POD,
    native=NATIVE,
    webhook_only="",
    example={"spec": {"hostPID": True, "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
)
