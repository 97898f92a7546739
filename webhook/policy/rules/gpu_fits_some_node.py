"""gpu-fits-some-node (warn by default; needs the cluster view): a GPU pod fits on some node.

Looked at: the pod's GPU requests counted the way the scheduler counts them (app containers
and sidecars summed, each init container at its own size: webhook.policy.nodes.pod_requests),
against the allocatable of every node its nodeName, nodeSelector, required node affinity and
(for Pods) tolerations and cordons let it onto.
Flagged: a request larger than every such node's allocatable, or a GPU pod that no node lets
on at all. Such a pod sits Pending with `Insufficient nvidia.com/gpu` (or `didn't match Pod's
node affinity/selector`) until someone reads the events; the author is told at apply time,
with what the cluster offers. Silent without a synced view; an autoscaler that adds nodes on
demand (cluster-autoscaler from zero, Karpenter) is why the default is warn, not deny.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from ..objects import PodView
from ..preflight import analyse, count, largest_container
from ..rule import CLUSTER_VIEW, GPU_POD, Rule
from ..types import Mode, NodeGroup, Policy, Violation

ID = "gpu-fits-some-node"
ZERO: Final = Decimal(0)


def check(view: PodView, policy: Policy) -> list[Violation]:
    found = analyse(view, policy)
    if found is None or not found.requests:
        return []
    if not found.matched:
        if found.unknown:
            return []  # known-accelerator names the label value that matches nothing
        cluster = found.cluster
        offered = ", ".join(found.offered(policy)) or "no GPU resources"
        return [
            _at(
                view,
                next(iter(found.requests)),
                f"matches no schedulable node{found.selector()}: {cluster.nodes} nodes, offering {offered}",
                "select labels that GPU nodes carry, tolerate their taints (kubectl describe nodes), or wait for "
                "cordoned nodes; with nodes added on demand (autoscaling from zero) this can be expected",
                found.where.describe() or None,
            )
        ]
    out: list[Violation] = []
    for resource, need in found.requests.items():
        largest, group, names = max(
            ((g.resources.get(resource, ZERO), g, names) for g, names in found.matched), key=lambda s: s[0]
        )
        if largest <= 0 or need <= largest:
            continue  # not advertised at all: gpu-resource-advertised says so
        pool = "" if found.where.describe() else _gpu_labels(group, policy)
        out.append(
            _at(
                view,
                resource,
                f"requests {count(need)} in all, but the largest matching node{found.selector()} "
                f"has {count(largest)} ({names[0]}{', ' + pool if pool else ''})",
                f"ask for at most {count(largest)} per pod and spread the work over more pods (a multi-node "
                "job), or select a node pool with more GPUs per node",
                count(need),
            )
        )
    return out


def _gpu_labels(group: NodeGroup, policy: Policy) -> str:
    """The first GPU node label the group carries, to name the pool: "accelerator=nvidia-t4"."""
    for key in (policy.accelerator_label, *policy.gpu_node_labels):
        if key in group.labels:
            return f"{key}={group.labels[key]}"
    return ""


def _at(view: PodView, resource: str, detail: str, fix: str, value: str | None) -> Violation:
    where = largest_container(view, resource)
    if where is None:  # requests come from containers: unreachable, kept total
        return Violation(ID, view.path, detail, fix, value=value)
    c, side = where
    return c.violation(ID, c.resource_path(side, resource), detail, fix, value)


RULE: Rule = Rule(
    webhook_only=CLUSTER_VIEW,
    id=ID,
    check=check,
    summary="A GPU pod's request fits on at least one node it may land on (needs the cluster view).",
    why="Otherwise it sits Pending with `Insufficient nvidia.com/gpu` until someone reads its events. Counted as "
    "the scheduler counts: app containers summed, init containers at their largest; nodeSelector, required "
    "affinity, tolerations and cordons decide which nodes count.",
    reads=(
        "containers[*].resources",
        "initContainers[*].resources",
        "nodeName",
        "nodeSelector",
        "affinity.nodeAffinity",
        "tolerations",
    ),
    triggers=GPU_POD,
    example={
        "spec": {
            "nodeSelector": {"accelerator": "nvidia-t4"},
            "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
        }
    },
    example_nodes=(
        {
            "metadata": {"name": "t4-pool-1", "labels": {"accelerator": "nvidia-t4"}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}},
        },
    ),
    default_mode=Mode.WARN,
)
