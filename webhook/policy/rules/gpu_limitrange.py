"""gpu-limitrange: no LimitRange hands out GPUs by default.

Restricted fields (LimitRange): spec.limits[*].default[<GPU>], spec.limits[*].defaultRequest[<GPU>]
  for every device resource of the GPU model, every vendor's ("nvidia.com/gpu", "amd.com/gpu",
  "gpu.intel.com/i915", MIG and partition names)
"""

from __future__ import annotations

from typing import Any

from ..gpus import is_device
from ..quantity import describe
from ..rule import GPU_REQUEST, ObjectRule
from ..shapes import ShapeError
from ..types import Policy, Violation

ID = "gpu-limitrange"


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
        for field in ("default", "defaultRequest"):
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
                        detail=f"is {describe(values[resource])}: every container without its own "
                        f"{resource} would be given one",
                        fix=f"remove {resource} from default and defaultRequest; cap GPU use with a "
                        f"ResourceQuota on requests.{resource}",
                        value=describe(values[resource]),
                        scope="LimitRange",
                    )
                )
    return out


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
)
