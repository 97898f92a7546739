"""gpu-shared-slots (warn by default): at most one time-sliced or MPS slot per container.

Restricted fields: spec.{initContainers,containers}[*].resources.{limits,requests}[<shared resource>]
  for the resources gpuSharedResources names (default nvidia.com/*.shared: the names the
  device plugin gives shared GPUs with renameByDefault).
Flagged: a count above 1. A slot is a turn on a shared card, not a card: two slots may be the
same GPU; and under MPS (or with failRequestsGreaterThanOne) the device plugin refuses the
request at the kubelet ("maximum request size for shared resources is 1"), long after
admission, so the pod fails to start instead of being told now. Set the rule to deny on
clusters that run MPS.
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import lit
from ..gpus import is_shared
from ..objects import PodView
from ..quantity import QuantityError, describe, parse_quantity
from ..rule import GPU_RESOURCE, NativeRule, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-shared-slots"
DETAIL: Final = (
    ': under MPS the kubelet refuses it ("maximum request size for shared resources is 1"); time-sliced slots may '
    "be one card"
)
FIX: Final = ("request 1 ", ", or whole GPUs from nodes without sharing")


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        # Limits decide what the device plugin allocates; a template may carry only requests.
        side_name, side = ("limits", c.limits) if c.limits else ("requests", c.requests)
        for name, value in (side or {}).items():
            if "/" not in name or not is_shared(name, policy):
                continue
            try:
                if parse_quantity(value) <= 1:
                    continue
            except QuantityError:
                continue  # gpu-quantity reports it
            out.append(
                c.violation(
                    ID,
                    c.resource_path(side_name, name),
                    f"is {describe(value)}{DETAIL}",
                    name.join(FIX),
                    describe(value),
                )
            )
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container with more
# than 1 of a shared resource on the side the loop above reads (limits when it has any, else
# requests), and of its resources the first such: the smallest name, the first in the map the API
# server serialises sorted by key (CEL ranges over a map in no fixed order).
def _side(c: str) -> str:
    return f"(has({c}.resources.limits) && size({c}.resources.limits) > 0 ? 'limits' : 'requests')"


def _values(c: str) -> str:
    return f"({_side(c)} == 'limits' ? {c}.resources.limits : {c}.resources.requests)"


def _over(c: str) -> str:
    """The shared resources container `c` asks for more than 1 of (needs has(c.resources))."""
    values = _values(c)
    return (
        f"(({_side(c)} == 'limits' || has({c}.resources.requests)) ? {values}.filter(k, k.contains('/') && "
        f"{cel.named('k', '@shared@')} && quantity({values}[k]).compareTo(quantity('1')) > 0) : [])"
    )


def _then(c: str, name: str) -> tuple[tuple[tuple[str, str], ...], str]:
    k = f"variables.shared{name}"
    tail = (
        f"'.resources.' + {_side(c)} + '[\"' + {k} + '\"] is ' + {cel.described(f'{_values(c)}[{k}]')} + "
        f"{lit(DETAIL + '; fix: ')} + {cel.agent_lead()} + {lit(FIX[0])} + {k} + {lit(FIX[1])}"
    )
    return ((f"shared{name}", f"{_over(c)}.min()"),), tail


def _picks(c: str) -> str:
    return f"has({c}.resources) && size({_over(c)}) > 0"


NATIVE: Final = NativeRule(*cel.first_container_checks(ID, cel.First("over", _picks, _then)))


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A container asks for at most 1 of a shared GPU resource (`gpuSharedResources`, default "
    "`nvidia.com/*.shared`).",
    why="Time-slicing hands out turns, not cards: 2 slots may be the same GPU. Under MPS the device plugin "
    "refuses more than 1 at the kubelet (`maximum request size for shared resources is 1`), after admission.",
    reads=("containers[*].resources.limits", "containers[*].resources.requests"),
    triggers=GPU_RESOURCE,
    native=NATIVE,
    webhook_only="",
    example={"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu.shared": 2}}}]}},
    default_mode=Mode.WARN,
)
