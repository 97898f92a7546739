"""gpu-requests-equal-limits: a GPU request, when given, equals the GPU limit.

Restricted fields: spec.{initContainers,containers}[*].resources.requests[<device resource>]
  (the GPU resource, MIG slices, shared slots: every device resource of the GPU model)
Allowed values: absent, or numerically equal to limits["nvidia.com/gpu"] ("1" == "1000m").
Limits without requests are fine (Pods get the request copied from the limit by defaulting;
templates legitimately omit it).
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import LISTS, Check, lit
from ..gpus import is_device
from ..objects import PodView
from ..quantity import QuantityError, describe, parse_quantity
from ..rule import GPU_RESOURCE, NativeRule, Rule
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


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container with a
# request of a device resource that limits lacks or holds another quantity of (compareTo: "1" and
# "1000m" are equal). The API server has parsed every quantity of a Pod or built-in template before
# validating admission, so the rule's "does not parse" (left to gpu-quantity) never reaches it.
def _unequal(c: str, k: str) -> str:
    requests, limits = f"{c}.resources.requests", f"{c}.resources.limits"
    return (
        f"({k}.contains('/') && {cel.named(k, '@devices@')} && !(has({limits}) && {k} in {limits} && "
        f"quantity({requests}[{k}]).compareTo(quantity({limits}[{k}])) == 0))"
    )


def _native() -> NativeRule:
    variables = [("nodeAgent", cel.NODE_AGENT)]
    checks = []
    for kind in LISTS:
        items, name = f"object.spec.{kind.field}", cel.list_name(kind)
        found = f"variables.unequal{name}"
        each = f"{items}[i]"
        variables.append(
            (
                f"unequal{name}",
                f"{cel.present(kind.field)} ? lists.range(size({items})).filter(i, has({each}.resources) && "
                f"has({each}.resources.requests) && {each}.resources.requests.exists(k, {_unequal(each, 'k')})) : []",
            )
        )
        c = f"{items}[{found}[0]]"
        variables.append((f"key{name}", f"{c}.resources.requests.filter(k, {_unequal(c, 'k')})[0]"))
        k = f"variables.key{name}"
        requested, limit = (
            cel.quoted(f"string({c}.resources.requests[{k}])"),
            cel.quoted(f"string({c}.resources.limits[{k}])"),
        )
        key = f"'[\"' + {k} + '\"]'"
        message = (
            f"@prefix@ + {lit(ID + ' (' + kind.label + ' ' + chr(34))} + {c}.name + '\": @path@.{kind.field}[' + "
            f"string({found}[0]) + '].resources.requests' + {key} + ' is ' + {requested} + ' ' + "
            f"((has({c}.resources.limits) && {k} in {c}.resources.limits) ? "
            f"({lit(UNEQUAL[0])} + {limit} + {lit(UNEQUAL[1] + '; fix: ')} + {cel.agent_lead()} + "
            f"'drop requests' + {key} + ' or set it to ' + {limit}) : "
            f"({lit(UNSET[0])} + {key} + {lit(UNSET[1] + '; fix: ')} + {cel.agent_lead()} + {lit(UNSET_FIX[0])} + "
            f"'resources.limits' + {key} + {lit(UNSET_FIX[1])})) + ')'"
        )
        checks.append(Check(f"size({found}) == 0", message))
    return NativeRule(tuple(variables), tuple(checks))


NATIVE: Final = _native()


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
    native=NATIVE,
    webhook_only="",
    example={
        "spec": {
            "containers": [
                {"name": "t", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}}
            ]
        }
    },
)
