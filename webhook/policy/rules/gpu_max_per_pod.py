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

from ..gpus import is_device
from ..namespaces import MAX_GPUS_LABEL, Unknown, facts, label
from ..objects import PodView
from ..quantity import QuantityError, parse_quantity
from ..rule import GPU_RESOURCE, Rule
from ..types import ContainerKind, Mode, Policy, Violation

ID = "gpu-max-per-pod"


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
        return policy.gpu_max_per_pod, "gpuMaxPerPod"
    value = label(found, MAX_GPUS_LABEL)
    if value is None:
        return policy.gpu_max_per_pod, "gpuMaxPerPod"
    if value.isascii() and value.isdigit() and len(value) <= 4:
        return int(value), f"the namespace's label {MAX_GPUS_LABEL}"
    return policy.gpu_max_per_pod, f'gpuMaxPerPod; the namespace\'s {MAX_GPUS_LABEL}="{value}" is no whole number'


def check(view: PodView, policy: Policy) -> list[Violation]:
    total, init = devices(view, policy)
    if total == 0:
        return []  # no namespace lookup for the pods without a GPU
    limit, source = cap(view.namespace, policy)
    if total <= limit:
        return []
    counted = "its largest init container" if init == total else "its containers together"
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.containers",
            detail=f"ask for {total} GPU devices ({counted}): more than the {limit} one pod may have ({source})",
            fix=f"split the work into pods of at most {limit} GPUs (a distributed job), or ask the platform for more",
            value=str(total),
        )
    ]


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
