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
"""

from __future__ import annotations

import math

from ..gpus import is_device
from ..objects import PodView
from ..quantity import QuantityError, parse_quantity
from ..types import GPU_RESOURCE, ContainerKind, Mode, Policy, Rule, Violation

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


def check(view: PodView, policy: Policy) -> list[Violation]:
    limit = policy.gpu_max_per_pod
    total, init = devices(view, policy)
    if total <= limit:
        return []
    counted = "its largest init container" if init == total else "its containers together"
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.containers",
            detail=f"ask for {total} GPU devices ({counted}): more than the {limit} one pod may have (gpuMaxPerPod)",
            fix=f"split the work into pods of at most {limit} GPUs (a distributed job), or ask the platform for more",
            value=str(total),
        )
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A pod asks for at most `gpuMaxPerPod` (default 8) GPU devices, counted as the scheduler counts: the "
    "containers summed, or the largest init container (off by default).",
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
)
