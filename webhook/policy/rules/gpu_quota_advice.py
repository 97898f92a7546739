"""gpu-quota-advice (off by default; warn is its natural mode): a ResourceQuota that means to cap
GPUs names them the way quota counts them.

Restricted fields (ResourceQuota): spec.hard[<GPU resource>], spec.hard["limits.<GPU resource>"]
  for every device or companion resource of the GPU model.
Flagged: such a key. Quota counts extended resources only as `requests.<name>` (they cannot be
overcommitted, so requests are what is held): a plain `nvidia.com/gpu: 4` or
`limits.nvidia.com/gpu: 4` is accepted and caps nothing (kubeflow/website#2460,
NVIDIA/k8s-device-plugin#211), and the namespace finds out when it has run away.
"""

from __future__ import annotations

from typing import Any

from ..gpus import is_companion, is_device
from ..quantity import describe
from ..rule import GPU_RESOURCE, ObjectRule
from ..shapes import ShapeError
from ..types import Mode, Policy, Violation

ID = "gpu-quota-advice"


def check(obj: dict[str, Any], policy: Policy) -> list[Violation]:
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise ShapeError("spec", "must be an object")
    hard = spec.get("hard") or {}
    if not isinstance(hard, dict):
        raise ShapeError("spec.hard", "must be an object")
    out: list[Violation] = []
    for key, value in hard.items():
        if not isinstance(key, str):
            continue
        name = key.removeprefix("limits.")
        if "/" not in name or not (is_device(name, policy) or is_companion(name, policy)):
            continue
        out.append(
            Violation(
                rule=ID,
                path=f'spec.hard["{key}"]',
                detail=f"is {describe(value)}, but quota counts {name} only as requests.{name}: this caps nothing",
                fix=f'name it "requests.{name}" (GPUs cannot be overcommitted: what a pod requests, it holds)',
                value=describe(value),
                scope="ResourceQuota",
            )
        )
    return out


RULE: ObjectRule = ObjectRule(
    id=ID,
    kinds=(("", "ResourceQuota", "resourcequotas"),),
    check=check,
    summary="A ResourceQuota names GPU resources as `requests.<name>`, the only way quota counts extended resources "
    "(off by default; warn suits it).",
    why="A plain `nvidia.com/gpu` (or `limits.nvidia.com/gpu`) key is accepted and caps nothing: the namespace "
    "learns it has no GPU cap when it has taken every GPU.",
    reads=("spec.hard",),
    triggers=GPU_RESOURCE,
    example={"spec": {"hard": {"nvidia.com/gpu": "4"}}},
    default_mode=Mode.OFF,
)
