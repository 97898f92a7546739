"""gpu-quantity: every count of a GPU resource is a number its device plugin can hand out.

Restricted fields: spec.{initContainers,containers}[*].resources.{limits,requests}[<name>] for
every resource of the GPU model (webhook.policy.gpus).
Allowed values:
- the GPU resource (gpuResourceName): 0; positive integers (1, "1", "1000m", 1e0); with
  sharedGpu, decimals strictly between 0 and 1 (0.5, "500m"): only it can be a share;
- other device resources (MIG slices, shared slots, DRA extended resources): whole numbers;
  a MIG slice or a time-sliced slot is already a share, and their plugins count whole devices;
- with integrations.hami: nvidia.com/gpucores and nvidia.com/gpumem-percentage whole 0-100,
  nvidia.com/gpumem a whole number of MiB above 0;
- with integrations.xgpu: volcano.sh/gpu-mem.128Mi a whole number of 128 MiB blocks above 0,
  volcano.sh/gpu-core.percentage a multiple of 5 from 5 to 100, and no pod mixing them with the
  GPU resource (no node serves both).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Final

from ..gpus import is_device, whole
from ..objects import PodView
from ..quantity import QuantityError, describe, parse_quantity
from ..rule import GPU_RESOURCE, Rule
from ..shapes import quote_key
from ..types import Policy, Violation
from ..vendors import OTHER_DOMAINS

ID = "gpu-quantity"
_ONE = Decimal(1)
_HUNDRED = Decimal(100)
_MISSING = object()

# (detail, fix) for a parsed value that breaks a resource's constraint, or None. The value as
# given is passed too, and turned into text (describe) only for a message: most values are fine.
Constraint = Callable[[Decimal, object, Policy], tuple[str, str] | None]


def _gpu_fix(policy: Policy) -> str:
    fix = "use a whole number of GPUs such as 1 or 2"
    return fix + ", or a share of one GPU below 1 such as 0.5" if policy.shared_gpu else fix


def _gpu(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
    if whole(q):
        return None
    shown = describe(value)
    if q > _ONE:
        return f"is {shown}: more than one GPU must be a whole number (a share is always of one card)", _gpu_fix(policy)
    if not policy.shared_gpu:
        return f"is {shown}: GPU shares (values below 1) are not enabled on this cluster", _gpu_fix(policy)
    return None


def _device(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
    if whole(q):
        return None
    return (
        f"is {describe(value)}: this resource hands out whole devices (a MIG slice or a shared slot is already a "
        f"share of a GPU; only {policy.resource_name} takes decimals)",
        "use a whole number such as 1",
    )


def _bounded(low: int, high: int | None, step: int, unit: str) -> Constraint:
    def check(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
        ok = whole(q) and q >= low and (high is None or q <= high) and int(q) % step == 0
        if ok:
            return None
        shown = describe(value)
        span = f"from {low} to {high}" if high is not None else f"of at least {low}"
        every = f" in steps of {step}" if step > 1 else ""
        return f"is {shown}: must be a whole number {span}{every} ({unit})", f"use a whole number {span}{every}"

    return check


# Companion resources whose values the integrations know.
HAMI: Final[dict[str, Constraint]] = {
    "nvidia.com/gpucores": _bounded(0, 100, 1, "percent of the GPU's cores"),
    "nvidia.com/gpumem-percentage": _bounded(0, 100, 1, "percent of the GPU's memory"),
    "nvidia.com/gpumem": _bounded(1, None, 1, "MiB of GPU memory"),
}
XGPU: Final[dict[str, Constraint]] = {
    "volcano.sh/gpu-mem.128Mi": _bounded(1, None, 1, "blocks of 128 MiB"),
    "volcano.sh/gpu-core.percentage": _bounded(5, 100, 5, "percent of the GPU's compute"),
}


def _vendor_device(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
    """AMD's and Intel's device plugins count whole cards or partitions: no decimal is a share."""
    if whole(q):
        return None
    return (
        f"is {describe(value)}: AMD and Intel GPUs (and their partitions) are handed out whole; a share of a "
        "card is a partition resource",
        "use a whole number such as 1",
    )


def _constraint(name: str, policy: Policy) -> Constraint | None:
    if name == policy.resource_name:
        return _gpu
    if is_device(name, policy):
        return _vendor_device if name.startswith(OTHER_DOMAINS) else _device
    if policy.hami and name in HAMI:
        return HAMI[name]
    if policy.xgpu and name in XGPU:
        return XGPU[name]
    return None


def problem(value: object, policy: Policy, name: str | None = None) -> tuple[str, str] | None:
    """(detail, fix) when `value` is not an acceptable quantity of `name` (the GPU resource by default)."""
    constraint = _constraint(name or policy.resource_name, policy)
    if constraint is None:
        return None
    if (constraint is _gpu or constraint is _device or constraint is _vendor_device) and _plain_count(value):
        return None  # "1", 2: a whole number of devices, what nearly every pod asks for
    try:
        q = parse_quantity(value)
    except QuantityError:
        return f"is {describe(value)}: not a valid Kubernetes quantity", _fix(constraint, policy)
    if q < 0:
        return f"is {describe(value)}: must not be negative", _fix(constraint, policy)
    return constraint(q, value, policy)


def _plain_count(value: object) -> bool:
    """A non-negative whole number written plainly: ASCII digits (no sign, suffix or exponent) or a
    JSON integer. Always valid for the GPU resource and any device resource, so not parsed."""
    if type(value) is str:
        return value.isascii() and value.isdigit() and len(value) <= 18
    return type(value) is int and value >= 0


def _fix(constraint: Constraint, policy: Policy) -> str:
    return _gpu_fix(policy) if constraint is _gpu else "use a whole number such as 1"


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        limits = c.limits or {}
        for side_name, side in [("limits", limits), ("requests", c.requests)]:
            if not side:
                continue
            for name, value in side.items():
                if "/" not in name:
                    continue  # cpu, memory: not ours (and the common case)
                if side is c.requests and limits.get(name, _MISSING) == value and type(limits[name]) is type(value):
                    continue  # requests defaulted from limits: report the mistake once
                found = problem(value, policy, name)
                if found:
                    detail, fix = found
                    out.append(c.violation(ID, c.resource_path(side_name, name), detail, fix, describe(value)))
    if policy.xgpu:
        out.extend(_xgpu_mixed(view, policy))
    return out


def _xgpu_mixed(view: PodView, policy: Policy) -> list[Violation]:
    """CCE: "Pods requesting GPUs under different resource names cannot share a node"; a pod that
    asks for both nvidia.com/gpu and xGPU resources fits no node and stays Pending."""
    if not view.requests_gpu:
        return []
    for c in view.containers:
        for name in c.limits or {}:
            if name in XGPU:
                return [
                    c.violation(
                        ID,
                        f"{c.resources_field}.limits{quote_key(name)}",
                        f"is set in a pod that also requests {policy.resource_name}: xGPU nodes serve one or the "
                        "other, so the pod fits no node",
                        f"request either {policy.resource_name} or the volcano.sh/gpu-* resources in one pod",
                        name,
                    )
                ]
    return []


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="Every count of a GPU-model resource is a valid quantity: the GPU resource 0, a whole number, or "
    "(with `sharedGpu`) a share strictly between 0 and 1; MIG slices, shared slots and DRA extended resources "
    "whole numbers; HAMi and xGPU companions within their ranges when their integration is on.",
    why="A whole number is an exclusive card; a decimal below 1 is a share of one card on clusters with GPU "
    "sharing. 1.5 means nothing to the device plugin, and clusters that allow shares patch upstream "
    "validation away, so we check ourselves.",
    reads=("containers[*].resources.limits", "containers[*].resources.requests"),
    triggers=GPU_RESOURCE,
    example={"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}},
)
