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

from typing import Any, Final

from ..cel import Check, described, lit, named
from ..gpus import is_companion, is_device
from ..quantity import describe
from ..rule import GPU_RESOURCE, NativeRule, ObjectRule
from ..shapes import ShapeError
from ..types import Mode, Policy, Violation

ID = "gpu-quota-advice"
LIMITS: Final = "limits."  # the prefix quota ignores for extended resources

# The sentence's pieces, shared by the rule and its twin: detail = DETAIL[0] + value + DETAIL[1]
# + name + DETAIL[2] + name + DETAIL[3]; fix = FIX[0] + name + FIX[1].
DETAIL: Final = ("is ", ", but quota counts ", " only as requests.", ": this caps nothing")
FIX: Final = ('name it "requests.', '" (GPUs cannot be overcommitted: what a pod requests, it holds)')


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
        name = key.removeprefix(LIMITS)
        if "/" not in name or not (is_device(name, policy) or is_companion(name, policy)):
            continue
        out.append(
            Violation(
                rule=ID,
                path=f'spec.hard["{key}"]',
                detail=f"{DETAIL[0]}{describe(value)}{DETAIL[1]}{name}{DETAIL[2]}{name}{DETAIL[3]}",
                fix=f"{FIX[0]}{name}{FIX[1]}",
                value=describe(value),
                scope="ResourceQuota",
            )
        )
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy on ResourceQuotas): the spec.hard keys that name a
# GPU device or companion resource plainly or as limits.<name>; the message names the smallest, the
# webhook's first finding (the API server serialises the map sorted by key; CEL ranges over it in
# no fixed order).
def _bare(k: str) -> str:
    return f"({k}.startsWith({lit(LIMITS)}) ? {k}.substring({len(LIMITS)}) : {k})"


_KEY: Final = "variables.keys.min()"
_NAME: Final = "variables.name"
NATIVE: Final = NativeRule(
    (
        (
            "keys",
            "has(object.spec.hard) ? object.spec.hard.filter(k, "
            f"{_bare('k')}.contains('/') && ({named(_bare('k'), '@devices@')} || {named(_bare('k'), '@companions@')}))"
            " : []",
        ),
        ("name", _bare(_KEY)),
    ),
    (
        Check(
            "size(variables.keys) == 0",
            f"@prefix@ + {lit(ID + ' (ResourceQuota: spec.hard[' + chr(34))} + {_KEY} + "
            f"{lit(chr(34) + '] ' + DETAIL[0])} + "
            f"{described(f'object.spec.hard[{_KEY}]')} + {lit(DETAIL[1])} + {_NAME} + {lit(DETAIL[2])} + {_NAME} + "
            f"{lit(DETAIL[3])} + '; fix: ' + {lit(FIX[0])} + {_NAME} + {lit(FIX[1])} + ')'",
        ),
    ),
)


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
    native=NATIVE,
    webhook_only="",
)
