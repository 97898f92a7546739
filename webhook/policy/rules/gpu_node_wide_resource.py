"""gpu-node-wide-resource: a resource that gives one container every GPU of its node is a node
agent's, and only the platform hands it out.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].resources.{limits,requests}
  keys of a vendor's node-wide resources (webhook.policy.vendors: Intel's gpu.intel.com/monitoring,
  and the deprecated i915_monitoring / xe_monitoring of the plugin's -monitoring-mode=split)
Allowed values: absent or 0. Agents that need it (XPU Manager, exporters) run in an exempt
namespace or as an exempt service account, which the rules never see.

Why deny: the Intel GPU plugin answers one such request per node with every GPU's device nodes (and
/dev/mei*), however many other pods hold them (cmd/gpu_plugin/monitoring.md); a workload asking for
it reads and disturbs other pods' GPUs. The fix names the exemption first: an agent needs it; a
workload wants a countable resource (gpu.intel.com/i915 or xe).
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import lit
from ..gpus import agent_account, node_wide
from ..objects import PodView
from ..quantity import describe
from ..rule import GPU_RESOURCE, NativeRule, Rule
from ..types import Policy, Violation
from ..vendors import VENDORS, Vendor

ID = "gpu-node-wide-resource"
DETAIL: Final = (
    "asks for ",
    ", which gives the container every ",
    " GPU of the node (a node agent's resource, whoever else holds them)",
)
FIX: Final = (
    'if this is a trusted GPU node agent, the platform exempts it: "',
    '" in exemptServiceAccounts (or its namespace in exemptNamespaces); a workload requests ',
)


def _countable(vendor: Vendor) -> str:
    return " or ".join(vendor.workload)


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    if len(policy.vendors) == 1:
        return out  # NVIDIA has no node-wide resource
    for c in view.containers:
        found = node_wide(c, policy)
        if found is None:
            continue
        side, name, vendor = found
        values = c.limits if side == "limits" else c.requests
        value = values.get(name) if values else None
        out.append(
            c.violation(
                ID,
                f'{c.resources_field}.{side}["{name}"]',
                DETAIL[0] + name + DETAIL[1] + vendor.name + DETAIL[2],
                agent_account(view).join(FIX) + _countable(vendor),
                describe(value),
            )
        )
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container with a
# count other than 0 of a node-wide resource of a vendor that is on (@nodeWide@), named as
# gpus.node_wide finds it: limits before requests, and within a side the first name in the order
# the API server sends a map (sorted: encoding/json), which is the order of _NAMES.
_NAMES: Final = cel.literals(n for v in VENDORS for n in v.node_wide)
_VENDOR: Final = "{" + ", ".join(f"{lit(n)}: {lit(v.name)}" for v in VENDORS for n in v.node_wide) + "}"
_COUNTABLE: Final = "{" + ", ".join(f"{lit(n)}: {lit(_countable(v))}" for v in VENDORS for n in v.node_wide) + "}"


def _wide(c: str) -> str:
    """[side, name] of each node-wide resource `c` asks for, limits first."""
    return " + ".join(
        f"((has({c}.resources) && has({c}.resources.{side})) ? {_NAMES}.filter(k, k in @nodeWide@ && "
        f"k in {c}.resources.{side} && sign(quantity({c}.resources.{side}[k])) != 0).map(k, [{lit(side)}, k]) : [])"
        for side in ("limits", "requests")
    )


def _then(c: str, name: str) -> tuple[tuple[tuple[str, str], ...], str]:
    side, resource = f"variables.first{name}[0]", f"variables.first{name}[1]"
    tail = (
        f"'.resources.' + {side} + '[\"' + {resource} + '\"] ' + {lit(DETAIL[0])} + "
        f"{resource} + {lit(DETAIL[1])} + {_VENDOR}[{resource}] + {lit(DETAIL[2] + '; fix: ' + FIX[0])} + "
        f"{cel.AGENT_ACCOUNT} + {lit(FIX[1])} + {_COUNTABLE}[{resource}]"
    )
    return ((f"first{name}", f"({_wide(c)})[0]"),), tail


def _picks(c: str) -> str:
    return f"size({_wide(c)}) > 0"


NATIVE: Final = NativeRule(*cel.first_container_checks(ID, cel.First("wide", _picks, _then)))


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="No container outside the exemptions asks for a vendor's node-wide resource: Intel's "
    "`gpu.intel.com/monitoring` (and the deprecated `i915_monitoring`, `xe_monitoring`), which the Intel GPU "
    "plugin answers with every GPU of the node. The fix offers the exemption a node agent needs.",
    why="One such request reaches every card of the node, those other pods were given included; it is meant "
    "for monitoring agents (XPU Manager), which the platform exempts by namespace or service account.",
    reads=("containers[*].resources",),
    triggers=GPU_RESOURCE,
    native=NATIVE,
    webhook_only="",
    example={
        "metadata": {"namespace": "team-a"},
        "spec": {"containers": [{"name": "t", "resources": {"limits": {"gpu.intel.com/monitoring": 1}}}]},
    },
)
