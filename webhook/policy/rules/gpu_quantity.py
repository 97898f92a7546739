"""gpu-quantity: every GPU count is a whole number of cards or a share of one.

Restricted fields: spec.{initContainers,containers}[*].resources.{limits,requests}["nvidia.com/gpu"]
Allowed values: 0; positive integers (1, "1", "1000m", 1e0); with sharedGpu, decimals
strictly between 0 and 1 (0.5, "500m").
"""

from __future__ import annotations

from decimal import Decimal

from ..objects import PodView, quote_key
from ..quantity import QuantityError, describe, parse_quantity
from ..types import GPU_REQUEST, Policy, Rule, Violation

ID = "gpu-quantity"
_ONE = Decimal(1)
_MISSING = object()


def problem(value: object, policy: Policy) -> tuple[str, str] | None:
    """(detail, fix) when `value` is not an acceptable GPU quantity."""
    shown = describe(value)
    whole = "use a whole number of GPUs such as 1 or 2"
    if policy.shared_gpu:
        whole += ", or a share of one GPU below 1 such as 0.5"
    try:
        q = parse_quantity(value)
    except QuantityError:
        return f"is {shown}: not a valid Kubernetes quantity", whole
    if q < 0:
        return f"is {shown}: must not be negative", whole
    if q == q.to_integral_value():
        return None
    if q > _ONE:
        return f"is {shown}: more than one GPU must be a whole number (a share is always of one card)", whole
    if not policy.shared_gpu:
        return f"is {shown}: GPU shares (values below 1) are not enabled on this cluster", whole
    return None


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    resource = policy.resource_name
    for c in view.containers:
        seen: object = _MISSING
        for side_name, side in (("limits", c.limits), ("requests", c.requests)):
            if side is None or resource not in side:
                continue
            value = side[resource]
            if value == seen and type(value) is type(seen):
                continue  # requests defaulted from limits: report the mistake once
            seen = value
            found = problem(value, policy)
            if found:
                detail, fix = found
                out.append(c.violation(ID, f"resources.{side_name}{quote_key(resource)}", detail, fix, describe(value)))
    return out


RULE = Rule(
    id=ID,
    check=check,
    summary="Every GPU count in limits and requests is a valid quantity that is 0, a whole number, or "
    "(with `sharedGpu`) a share strictly between 0 and 1; `1.5`, `1500m`, negatives and garbage are not.",
    why="A whole number is an exclusive card; a decimal below 1 is a share of one card on clusters with GPU "
    "sharing. 1.5 means nothing to the device plugin, and clusters that allow shares patch upstream "
    "validation away, so we check ourselves.",
    reads=("containers[*].resources.limits", "containers[*].resources.requests"),
    triggers=GPU_REQUEST,
    example={"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}},
)
