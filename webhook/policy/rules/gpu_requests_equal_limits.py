"""gpu-requests-equal-limits: a GPU request, when given, equals the GPU limit.

Restricted fields: spec.{initContainers,containers}[*].resources.requests[<device resource>]
  (the GPU resource, MIG slices, shared slots: every device resource of the GPU model)
Allowed values: absent, or numerically equal to limits["nvidia.com/gpu"] ("1" == "1000m").
Limits without requests are fine (Pods get the request copied from the limit by defaulting;
templates legitimately omit it).
"""

from __future__ import annotations

from typing import Final

from ..gpus import is_device
from ..objects import PodView
from ..quantity import QuantityError, describe, parse_quantity
from ..rule import GPU_RESOURCE, Rule
from ..shapes import quote_key
from ..types import Policy, Violation

ID = "gpu-requests-equal-limits"
UNSET: Final = ("but limits", " is not set")
UNSET_FIX: Final = ("set ", " (GPUs are requested through limits; requests may be dropped)")
UNEQUAL: Final = ("but the limit is ", ": they must be equal")


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        if not c.requests:
            continue
        for resource, value in c.requests.items():
            if "/" not in resource or not is_device(resource, policy):
                continue
            limits = c.limits
            if limits is not None and resource in limits:
                limit = limits[resource]
                try:
                    if parse_quantity(value) == parse_quantity(limit):
                        continue  # the common case: no text is built
                except QuantityError:
                    continue  # gpu-quantity reports values that do not parse
            # Messages only from here on.
            key = quote_key(resource)
            field = c.resource_path("requests", resource)
            requested = describe(value)
            if limits is None or resource not in limits:
                detail = f"is {requested} {key.join(UNSET)}"
                fix = f"{c.resources_field}.limits{key}".join(UNSET_FIX)
            else:
                detail = f"is {requested} {describe(limits[resource]).join(UNEQUAL)}"
                fix = f"drop requests{key} or set it to {describe(limits[resource])}"
            out.append(c.violation(ID, field, detail, fix, requested))
    return out


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="Where requests set a GPU device resource (MIG and shared included) it numerically equals the "
    "limit; a request without a limit "
    "is a violation, a limit without a request is fine.",
    why="GPUs cannot be overcommitted: the device plugin allocates the limit. Custom resources that embed pod "
    "templates get no upstream validation, nor do clusters whose validation was relaxed for GPU sharing.",
    reads=("containers[*].resources.limits", "containers[*].resources.requests"),
    triggers=GPU_RESOURCE,
    webhook_only="the API server's own validation already refuses it on Pods and built-in controllers' templates "
    "(an extended resource's request must equal its limit); only custom resources' templates need it, and the "
    "workloads webhook judges those",
    example={
        "spec": {
            "containers": [
                {"name": "t", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}}
            ]
        }
    },
)
