"""gpu-controller-owned (off by default): a Pod that gets a GPU is created by a controller.

Looked at: Pod objects (templates are a controller's by definition) with any GPU source the
model knows (a device or companion resource, a DRA claim, a KAI fraction). Flagged: no
ownerReferences entry with controller: true, or one of a kind not in gpuControllerKinds (Jobs,
the training operators' kinds, ReplicaSets under Deployments, StatefulSets, LeaderWorkerSets,
Argo Workflows: default list in webhook.config).

Why: bare pods that run until someone deletes them hold GPUs nobody uses (kyverno#13879 asks
for exactly this rule). A Job ends and frees its GPUs; a Deployment is an inference service
someone owns. The owner kind comes from a list, not from "any controller", because a pod author
can name any object they own as its controller.
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import Check, lit
from ..gpus import gets_gpu
from ..objects import PodView
from ..rule import GPU_POD, NativeRule, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-controller-owned"
FIX: Final = "run it as a Job (or a training job, e.g. a PyTorchJob) that ends, or a Deployment someone owns"
BARE: Final = "names no controller: a bare pod with a GPU holds it until someone deletes the pod"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if view.kind != "Pod" or view.owner_kind in policy.gpu_controller_kinds:
        return []
    if not gets_gpu(view, policy):
        return []
    meta = view.meta_path or "metadata"
    detail = f"names no controller ({view.owner_kind} is not one of gpuControllerKinds)" if view.owner_kind else BARE
    return [
        Violation(
            rule=ID,
            path=f"{meta}.ownerReferences",
            detail=detail,
            fix=FIX,
            value=f'"{view.owner_kind}"' if view.owner_kind else None,
        )
    ]


# ---- The CEL twin (a ValidatingAdmissionPolicy on Pods only): the controller's kind as
# objects._controller_kind reads it (the first ownerReference with controller: true; the API server
# allows one), gpus.gets_gpu without the cluster view (any DRA claim may be a GPU: stricter, never
# looser).
_OWNER: Final = (
    "has(object.metadata.ownerReferences) && "
    "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller) ? "
    "object.metadata.ownerReferences.filter(r, has(r.controller) && r.controller)[0].kind : ''"
)
_DETAIL: Final = (
    f"(variables.ownerKind != '' ? 'names no controller (' + variables.ownerKind + "
    f"' is not one of gpuControllerKinds)' : {lit(BARE)})"
)

NATIVE: Final = NativeRule(
    (("getsGpu", cel.GETS_GPU), ("ownerKind", _OWNER), ("nodeAgent", cel.NODE_AGENT)),
    (
        Check(
            "!variables.getsGpu || variables.ownerKind in @controllerKinds@",
            f"@prefix@ + {lit(ID + ' (pod: metadata.ownerReferences ')} + {_DETAIL} + '; fix: ' + "
            f"{cel.agent_lead()} + {lit(FIX)} + ')'",
        ),
    ),
    roots=("pod",),
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A Pod that gets a GPU is owned by a controller of a `gpuControllerKinds` kind (Job, ReplicaSet, "
    "StatefulSet, the training operators' jobs, RayCluster, ...), not created bare (off by default).",
    why="Bare pods run until someone deletes them and hold GPUs nobody uses; a Job ends and a Deployment has an "
    "owner. A list, not any controller: a pod can name any object its author owns as its controller.",
    reads=("ownerReferences", "containers[*].resources", "resourceClaims"),
    triggers=GPU_POD,
    example={"spec": {"containers": [{"name": "notebook", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
    default_mode=Mode.OFF,
    native=NATIVE,
    webhook_only="",
)
