"""no-privileged-gpu: no privileged container in a pod that runs on GPU nodes.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].securityContext
  .privileged and .capabilities.add[*]
Allowed values: privileged false/absent; capabilities without SYS_ADMIN / CAP_SYS_ADMIN /
ALL (any case). Applies to GPU pods: any container with a GPU count above 0, or a pod
pinned to GPU nodes by the accelerator label (nodeSelector or required node affinity with
In/Exists). Ephemeral containers count: `kubectl debug --profile=sysadmin` adds a
privileged one to a running pod.
"""

from __future__ import annotations

from ..gpus import gpu_pod, pod_vendor, resource_hint
from ..nvidia import privileged_capability
from ..objects import PodView
from ..rule import GPU_POD, Rule
from ..types import Policy, Violation

ID = "no-privileged-gpu"


def _why_cap(view: PodView, policy: Policy) -> str:
    vendor = pod_vendor(view, policy)
    if vendor.key == "nvidia":
        return "the NVIDIA runtime treats it as privileged"
    return f"it reaches every {vendor.name} GPU of the node through its device files and driver interfaces"


def _fix(resource: str, policy: Policy) -> str:
    if resource == policy.resource_name:
        return "remove securityContext.privileged (request the GPUs you need instead)"
    return f"remove securityContext.privileged (request the {resource} you need instead)"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not any(c.privileged or c.added_capabilities for c in view.containers) or not gpu_pod(view, policy):
        return []
    out: list[Violation] = []
    for c in view.containers:
        if c.privileged:
            out.append(
                c.violation(
                    ID,
                    "securityContext.privileged",
                    "is true in a GPU pod: a privileged container sees every GPU on the node",
                    _fix(resource_hint(c, view, policy), policy),
                    "true",
                )
            )
        for i, cap in enumerate(c.added_capabilities):
            if privileged_capability(cap):
                out.append(
                    c.violation(
                        ID,
                        f"securityContext.capabilities.add[{i}]",
                        f'adds "{cap}" in a GPU pod: {_why_cap(view, policy)}',
                        f'drop "{cap}" from capabilities.add',
                        f'"{cap}"',
                    )
                )
    return out


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="In a GPU pod, no container of any kind sets `securityContext.privileged: true` or adds "
    "capability `SYS_ADMIN` (`CAP_SYS_ADMIN`, `ALL`, any case).",
    why="A privileged container sees every device on the node, so every GPU; the NVIDIA runtime treats "
    "SYS_ADMIN as privileged too.",
    reads=("containers[*].securityContext", "containers[*].resources", "nodeSelector", "affinity"),
    triggers=GPU_POD,
    example={
        "spec": {
            "containers": [
                {"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}, "securityContext": {"privileged": True}}
            ]
        }
    },
)
