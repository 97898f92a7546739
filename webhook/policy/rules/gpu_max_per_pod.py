"""gpu-max-per-pod (off by default): at most gpuMaxPerPod GPU devices in one pod.

Counted as the scheduler counts a pod's requests: the regular containers summed, or the largest
init container when that is more (init containers run one at a time, before the others); every
device-plugin resource of the GPU model counts (whole GPUs, MIG devices, shared slots: each
holds a device), a share below 1 counts as the card it sits on. Ephemeral containers ask for
nothing the scheduler counts.

Why: on a shared cluster one pod asking for a whole 8-GPU node (or several) starves every team
queued behind it, and GPU quota (`requests.nvidia.com/gpu` in a ResourceQuota) caps a
namespace, not a pod. Platform teams set the largest pod they schedule; bigger work is a
distributed job of several pods, which gang schedulers (Volcano, KAI) place together.

Per namespace: a namespace labelled `gpu-policy.io/max-gpus-per-pod: "<n>"` has its own cap (a
training team's 16, a notebook namespace's 1). The label comes from the cluster view's watch of
namespaces (on while this rule is); until the view has seen the namespace, gpuMaxPerPod holds.
"""

from __future__ import annotations

import math
from typing import Final

from .. import cel
from ..cel import Check, lit
from ..gpus import is_device
from ..namespaces import MAX_GPUS_LABEL, Unknown, facts, label
from ..objects import PodView
from ..quantity import QuantityError, parse_quantity
from ..rule import GPU_RESOURCE, NativeRule, Rule
from ..types import ContainerKind, Mode, Policy, Violation

ID = "gpu-max-per-pod"
CONFIG: Final = "gpuMaxPerPod"
LABELLED: Final = f"the namespace's label {MAX_GPUS_LABEL}"
NOT_WHOLE: Final = (f"gpuMaxPerPod; the namespace's {MAX_GPUS_LABEL}=\"", '" is no whole number')
INIT: Final = "its largest init container"
TOGETHER: Final = "its containers together"
DETAIL: Final = (" GPU devices (", "): more than the ", " one pod may have (", ")")
FIX: Final = ("split the work into pods of at most ", " GPUs (a distributed job), or ask the platform for more")


def devices(view: PodView, policy: Policy) -> tuple[int, int]:
    """(devices the pod asks for, as the scheduler counts them; of which the largest init container)."""
    regular = init = 0
    for c in view.containers:
        if c.kind is ContainerKind.EPHEMERAL:
            continue
        side = c.limits or c.requests  # limits decide what the device plugin allocates
        count = 0
        for name, value in (side or {}).items():
            if "/" not in name or not is_device(name, policy):
                continue
            try:
                count += math.ceil(parse_quantity(value))
            except (QuantityError, ValueError, OverflowError):
                continue  # gpu-quantity reports it
        if c.kind is ContainerKind.INIT:
            init = max(init, count)
        else:
            regular += count
    return max(regular, init), init


def cap(namespace: str, policy: Policy) -> tuple[int, str]:
    """The most GPU devices one pod of `namespace` may have, and what says so."""
    found = facts(namespace, policy)
    if isinstance(found, Unknown):
        return policy.gpu_max_per_pod, CONFIG
    value = label(found, MAX_GPUS_LABEL)
    if value is None:
        return policy.gpu_max_per_pod, CONFIG
    if value.isascii() and value.isdigit() and len(value) <= 4:
        return int(value), LABELLED
    return policy.gpu_max_per_pod, value.join(NOT_WHOLE)


def check(view: PodView, policy: Policy) -> list[Violation]:
    total, init = devices(view, policy)
    if total == 0:
        return []  # no namespace lookup for the pods without a GPU
    limit, source = cap(view.namespace, policy)
    if total <= limit:
        return []
    counted = INIT if init == total else TOGETHER
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.containers",
            detail=f"ask for {total}{DETAIL[0]}{counted}{DETAIL[1]}{limit}{DETAIL[2]}{source}{DETAIL[3]}",
            fix=str(limit).join(FIX),
            value=str(total),
        )
    ]


# ---- The CEL twin (a ValidatingAdmissionPolicy): devices() and cap() over the namespace the API
# server hands the policy (namespaceObject: its labels as they are now, where the webhook has the
# cluster view's copy). A count is ceil(quantity): asInteger when whole, else the truncated float
# plus one (for a huge non-whole count the float may round up to a whole number, one more: stricter).
def _count(v: str) -> str:
    q = f"quantity({v})"
    return f"({q}.isInteger() ? {q}.asInteger() : int({q}.asApproximateFloat()) + 1)"


def _devices(c: str) -> str:
    """The GPU devices container `c` asks for: its limits when it has any, else its requests."""
    side = (
        f"(has({c}.resources.limits) && size({c}.resources.limits) > 0 ? {c}.resources.limits : {c}.resources.requests)"
    )
    return (
        f"(has({c}.resources) && (has({c}.resources.limits) || has({c}.resources.requests)) ? "
        f"{side}.filter(k, k.contains('/') && {cel.named('k', '@devices@')}).map(k, {_count(f'{side}[k]')}).sum() : 0)"
    )


def _counts(field: str) -> str:
    return f"({cel.present(field)} ? object.spec.{field}.map(c, {_devices('c')}) : [])"


_LABEL: Final = f"namespaceObject.metadata.labels[{lit(MAX_GPUS_LABEL)}]"
_LABELLED: Final = f"(has(namespaceObject.metadata.labels) && {lit(MAX_GPUS_LABEL)} in namespaceObject.metadata.labels)"
_WHOLE: Final = f"({_LABELLED} && {_LABEL}.matches('^[0-9]{{1,4}}$'))"
NATIVE: Final = NativeRule(
    (
        ("nodeAgent", cel.NODE_AGENT),
        ("regular", f"{_counts('containers')}.sum()"),
        ("init", f"({_counts('initContainers')} + [0]).max()"),
        ("total", "variables.init > variables.regular ? variables.init : variables.regular"),
        ("cap", f"{_WHOLE} ? int({_LABEL}) : @maxPerPod@"),
    ),
    (
        Check(
            "variables.total <= variables.cap",
            f"@prefix@ + {lit(ID + ' (pod: @path@.containers ask for ')} + string(variables.total) + "
            f"{lit(DETAIL[0])} + (variables.init == variables.total ? {lit(INIT)} : {lit(TOGETHER)}) + "
            f"{lit(DETAIL[1])} + string(variables.cap) + {lit(DETAIL[2])} + ({_WHOLE} ? {lit(LABELLED)} : "
            f"({_LABELLED} ? {lit(NOT_WHOLE[0])} + {_LABEL} + {lit(NOT_WHOLE[1])} : {lit(CONFIG)})) + "
            f"{lit(DETAIL[3] + '; fix: ')} + {cel.agent_lead()} + {lit(FIX[0])} + string(variables.cap) + "
            f"{lit(FIX[1])} + ')'",
        ),
    ),
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A pod asks for at most `gpuMaxPerPod` (default 8) GPU devices, or its namespace's "
    "`gpu-policy.io/max-gpus-per-pod` label, counted as the scheduler counts: the containers summed, or the largest "
    "init container (off by default).",
    why="One pod holding a whole node or more starves every team queued behind it; quota caps a namespace, not a "
    "pod. Bigger work is a distributed job, placed together by a gang scheduler.",
    reads=("containers[*].resources", "initContainers[*].resources"),
    triggers=GPU_RESOURCE,
    native=NATIVE,
    webhook_only="",
    example={
        "spec": {
            "containers": [
                {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": 8}}},
                {"name": "eval", "resources": {"limits": {"nvidia.com/gpu": 2}}},
            ]
        }
    },
    default_mode=Mode.OFF,
    watches_namespaces=True,
)
