"""gpu-limitrange: no LimitRange hands out GPUs by default.

Restricted fields (LimitRange): spec.limits[*].default[<GPU>], spec.limits[*].defaultRequest[<GPU>]
  for every device resource of the GPU model, every vendor's ("nvidia.com/gpu", "amd.com/gpu",
  "gpu.intel.com/i915", MIG and partition names)
"""

from __future__ import annotations

from typing import Any, Final

from ..cel import Check, described, lit, named
from ..gpus import is_device
from ..quantity import describe
from ..rule import GPU_REQUEST, NativeRule, ObjectRule
from ..shapes import ShapeError
from ..types import Policy, Violation

ID = "gpu-limitrange"
FIELDS: Final = ("default", "defaultRequest")  # the two maps LimitRanger copies into containers

# The sentence's pieces, shared by the rule and its twin: detail = DETAIL[0] + value + DETAIL[1]
# + resource + DETAIL[2]; fix = FIX[0] + resource + FIX[1] + resource.
DETAIL: Final = ("is ", ": every container without its own ", " would be given one")
FIX: Final = ("remove ", " from default and defaultRequest; cap GPU use with a ResourceQuota on requests.")


def check(obj: dict[str, Any], policy: Policy) -> list[Violation]:
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise ShapeError("spec", "must be an object")
    limits = spec.get("limits") or []
    if not isinstance(limits, list):
        raise ShapeError("spec.limits", "must be a list")
    out: list[Violation] = []
    for i, item in enumerate(limits):
        if not isinstance(item, dict):
            raise ShapeError(f"spec.limits[{i}]", "must be an object")
        for field in FIELDS:
            values = item.get(field)
            if values is not None and not isinstance(values, dict):
                raise ShapeError(f"spec.limits[{i}].{field}", "must be an object")
            if not values:
                continue
            for resource in values:
                if not isinstance(resource, str) or "/" not in resource or not is_device(resource, policy):
                    continue
                out.append(
                    Violation(
                        rule=ID,
                        path=f'spec.limits[{i}].{field}["{resource}"]',
                        detail=f"{DETAIL[0]}{describe(values[resource])}{DETAIL[1]}{resource}{DETAIL[2]}",
                        fix=f"{FIX[0]}{resource}{FIX[1]}{resource}",
                        value=describe(values[resource]),
                        scope="LimitRange",
                    )
                )
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy on LimitRanges). Per item of spec.limits, the GPU
# device names of default and defaultRequest; the message names the first item with one, default
# before defaultRequest, and its smallest name: the webhook's first finding, since the API server
# serialises a map sorted by key (CEL ranges over a map in no fixed order).
def _gpu_names(field: str) -> str:
    m = f"object.spec.limits[i].{field}"
    return f"(has({m}) ? {m}.filter(k, k.contains('/') && {named('k', '@devices@')}) : [])"


_ITEM: Final = "variables.found[0]"
NATIVE: Final = NativeRule(
    (
        (
            "hits",
            "has(object.spec.limits) ? lists.range(size(object.spec.limits))"
            f".map(i, [{_gpu_names(FIELDS[0])}, {_gpu_names(FIELDS[1])}]) : []",
        ),
        ("found", "lists.range(size(variables.hits)).filter(i, size(variables.hits[i][0] + variables.hits[i][1]) > 0)"),
        ("field", f"size(variables.hits[{_ITEM}][0]) > 0 ? 0 : 1"),  # index into FIELDS
        ("name", f"variables.hits[{_ITEM}][variables.field].min()"),
        (
            "values",
            f"variables.field == 0 ? object.spec.limits[{_ITEM}].{FIELDS[0]} : object.spec.limits[{_ITEM}].{FIELDS[1]}",
        ),
    ),
    (
        Check(
            "size(variables.found) == 0",
            f"@prefix@ + {lit(ID + ' (LimitRange: spec.limits[')} + string({_ITEM}) + '].' + "
            f"(variables.field == 0 ? {lit(FIELDS[0])} : {lit(FIELDS[1])}) + {lit('[' + chr(34))} + variables.name + "
            f"{lit(chr(34) + '] ')} + "
            f"{lit(DETAIL[0])} + {described('variables.values[variables.name]')} + {lit(DETAIL[1])} + variables.name + "
            f"{lit(DETAIL[2])} + '; fix: ' + {lit(FIX[0])} + variables.name + {lit(FIX[1])} + variables.name + ')'",
        ),
    ),
)


RULE: ObjectRule = ObjectRule(
    id=ID,
    kinds=(("", "LimitRange", "limitranges"),),
    check=check,
    summary="LimitRange objects set no GPU resource in `default` or `defaultRequest`.",
    why="The LimitRanger admission plugin runs before webhooks and copies these defaults into every container "
    "that sets none, so every pod in the namespace would request (and hold) a GPU. Cap GPU use with a "
    "ResourceQuota on `requests.nvidia.com/gpu` instead.",
    reads=("spec.limits[*].default", "spec.limits[*].defaultRequest"),
    triggers=GPU_REQUEST,
    example={"spec": {"limits": [{"type": "Container", "default": {"nvidia.com/gpu": "1"}}]}},
    native=NATIVE,
    webhook_only="",
)
