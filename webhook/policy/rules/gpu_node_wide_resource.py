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

from ..gpus import agent_account, node_wide
from ..objects import PodView
from ..quantity import describe
from ..rule import GPU_RESOURCE, Rule
from ..types import Policy, Violation

ID = "gpu-node-wide-resource"


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
        countable = " or ".join(vendor.workload)
        out.append(
            c.violation(
                ID,
                f'{c.resources_field}.{side}["{name}"]',
                f"asks for {name}, which gives the container every {vendor.name} GPU of the node (a node "
                "agent's resource, whoever else holds them)",
                f'if this is a trusted GPU node agent, the platform exempts it: "{agent_account(view)}" in '
                f"exemptServiceAccounts (or its namespace in exemptNamespaces); a workload requests {countable}",
                describe(value),
            )
        )
    return out


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
    example={
        "metadata": {"namespace": "team-a"},
        "spec": {"containers": [{"name": "t", "resources": {"limits": {"gpu.intel.com/monitoring": 1}}}]},
    },
)
