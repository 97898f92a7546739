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

from typing import Final

from .. import cel
from ..cel import LISTS, Check, lit
from ..gpus import gpu_pod, pod_vendor, resource_hint
from ..nvidia import PRIVILEGED_CAPS, privileged_capability
from ..objects import PodView
from ..rule import GPU_POD, NativeRule, Rule
from ..types import Policy, Violation

ID = "no-privileged-gpu"
PRIVILEGED: Final = "is true in a GPU pod: a privileged container sees every GPU on the node"
NVIDIA_CAP: Final = "the NVIDIA runtime treats it as privileged"
VENDOR_CAP: Final = ("it reaches every ", " GPU of the node through its device files and driver interfaces")
FIX: Final = ("remove securityContext.privileged (request the ", " you need instead)")


def _why_cap(view: PodView, policy: Policy) -> str:
    vendor = pod_vendor(view, policy)
    if vendor.key == "nvidia":
        return NVIDIA_CAP
    return vendor.name.join(VENDOR_CAP)


def _fix(resource: str, policy: Policy) -> str:
    return ("GPUs" if resource == policy.resource_name else resource).join(FIX)


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
                    PRIVILEGED,
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


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container that is
# privileged or adds a privileged capability, in a pod gpus.gpu_pod calls a GPU pod (without the
# cluster view: every DRA claim may be a GPU, so the twin may be stricter, never looser).
_CAP: Final = lit(cel.upper_pattern(PRIVILEGED_CAPS))


def _privileged(c: str) -> str:
    return f"(has({c}.securityContext) && has({c}.securityContext.privileged) && {c}.securityContext.privileged)"


def _caps(c: str) -> str:
    return f"{c}.securityContext.capabilities.add"


def _bad_caps(c: str) -> str:
    return (
        f"(has({c}.securityContext) && has({c}.securityContext.capabilities) && "
        f"has({c}.securityContext.capabilities.add) && {_caps(c)}.exists(x, x.matches({_CAP})))"
    )


def _hint(c: str) -> str:
    """resource_hint: the device resource the container counts (the GPU resource first), else its
    companion, else the GPU resource."""
    devices, companions = cel.device_names(c), cel.device_names(c, "@companions@")
    return (
        f"('@resourceName@' in {devices} ? '@resourceName@' : (size({devices}) > 0 ? ({devices})[0] : "
        f"(size({companions}) > 0 ? ({companions})[0] : '@resourceName@')))"
    )


def _native() -> NativeRule:
    # Each computed once, where a validation or message reads it (variables are lazy).
    variables = [("gpuPod", cel.GPU_POD), ("nodeAgent", cel.NODE_AGENT), ("podVendor", cel.pod_vendor())]
    checks, lead = [], cel.agent_lead()
    for kind in LISTS:
        items, name = f"object.spec.{kind.field}", cel.list_name(kind)
        found = f"variables.privileged{name}"
        variables.append(
            (
                f"privileged{name}",
                f"{cel.present(kind.field)} ? lists.range(size({items})).filter(i, "
                f"{_privileged(f'{items}[i]')} || {_bad_caps(f'{items}[i]')}) : []",
            )
        )
        variables.append((f"first{name}", f"{items}[{found}[0]]"))
        c = f"variables.first{name}"
        variables.append((f"cap{name}", f"lists.range(size({_caps(c)})).filter(j, {_caps(c)}[j].matches({_CAP}))[0]"))
        variables.append((f"hint{name}", _hint(c)))
        cap, hint, why = f"{_caps(c)}[variables.cap{name}]", f"variables.hint{name}", "variables.podVendor"
        message = (
            f"@prefix@ + {lit(ID + ' (' + kind.label + ' ' + chr(34))} + {c}.name + '\": @path@.{kind.field}[' + "
            f"string({found}[0]) + '].securityContext.' + ({_privileged(c)} ? "
            f"('privileged ' + {lit(PRIVILEGED + '; fix: ')} + {lead} + {lit(FIX[0])} + "
            f"({hint} == '@resourceName@' ? 'GPUs' : "
            f"{hint}) + {lit(FIX[1])}) : "
            f"('capabilities.add[' + string(variables.cap{name}) + '] adds \"' + {cap} + '\" in a GPU pod: ' + "
            f"({why} == '' ? {lit(NVIDIA_CAP)} : {lit(VENDOR_CAP[0])} + {why} + {lit(VENDOR_CAP[1])}) + "
            f"'; fix: ' + {lead} + 'drop \"' + {cap} + '\" from capabilities.add')) + ')'"
        )
        # gpuPod only where a container is privileged: most pods never pay for it.
        checks.append(Check(f"size({found}) == 0 ? true : !variables.gpuPod", message))
    return NativeRule(tuple(variables), tuple(checks))


NATIVE: Final = _native()


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="In a GPU pod, no container of any kind sets `securityContext.privileged: true` or adds "
    "capability `SYS_ADMIN` (`CAP_SYS_ADMIN`, `ALL`, any case).",
    why="A privileged container sees every device on the node, so every GPU; the NVIDIA runtime treats "
    "SYS_ADMIN as privileged too.",
    reads=("containers[*].securityContext", "containers[*].resources", "nodeSelector", "affinity"),
    triggers=GPU_POD,
    native=NATIVE,
    webhook_only="",
    example={
        "spec": {
            "containers": [
                {"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}, "securityContext": {"privileged": True}}
            ]
        }
    },
)
