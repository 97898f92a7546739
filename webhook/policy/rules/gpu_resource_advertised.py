"""gpu-resource-advertised (warn by default; needs the cluster view): some node offers the
GPU resource a pod asks for.

Looked at: each device-plugin GPU resource the pod requests (not DRA-backed names, which come
from ResourceSlices, nor names a DeviceClass maps through DRA), against the nodes the pod may
land on.
Flagged: a resource none of those nodes advertises: plain `nvidia.com/gpu` on MIG-mixed nodes
(which advertise `nvidia.com/gpu: 0` and `nvidia.com/mig-*`), a MIG profile the nodes are not
partitioned into, `nvidia.com/gpu.shared` without renamed time-slicing. The message names what
those nodes (or, if none offer a GPU, the cluster) do advertise. Silent without a synced view.
"""

from __future__ import annotations

from ..objects import PodView
from ..preflight import Analysis, analyse, largest_container
from ..rule import CLUSTER_VIEW, GPU_POD, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-resource-advertised"


def check(view: PodView, policy: Policy) -> list[Violation]:
    found = analyse(view, policy)
    if found is None or not found.matched:
        return []  # no node at all: gpu-fits-some-node (or known-accelerator) says so
    out: list[Violation] = []
    for resource in found.requests:
        if any(g.resources.get(resource, 0) > 0 for g, _ in found.matched):
            continue
        near = found.offered(policy, found.matched)
        if near:
            offer = f"they offer {', '.join(near)}"
        else:
            everywhere = found.offered(policy)
            offer = f"GPU nodes offer {', '.join(everywhere)}" if everywhere else "no node offers a GPU"
        nodes = "matching node" + found.selector() if found.where.describe() else "node"
        where = largest_container(view, resource)
        if where is None:
            continue
        c, side = where
        fix = (
            f"request one of {', '.join(near)}"
            if near
            else "request a resource the GPU nodes advertise, or select the nodes that advertise this one"
        )
        vendor = _vendor_absent(resource, policy, found)
        if vendor is not None:  # another vendor's GPU on a fleet without one: not a naming slip
            offer = f"no node offers {vendor} GPUs ({offer})"
            fix = f"run it on a cluster with {vendor} GPU nodes (or add them), or port it to the GPUs offered"
        out.append(
            c.violation(ID, c.resource_path(side, resource), f"is advertised by no {nodes}; {offer}", fix, resource)
        )
    return out


def _vendor_absent(resource: str, policy: Policy, found: Analysis) -> str | None:
    """The vendor's name when `resource` is one of another vendor's (AMD's, Intel's) and no node of
    the cluster offers any resource of that vendor (the cluster's resources read only then)."""
    for vendor in policy.vendors[1:]:
        if resource.startswith(vendor.domains):
            return None if any(o.startswith(vendor.domains) for o in found.offered(policy)) else vendor.name
    return None


RULE: Rule = Rule(
    webhook_only=CLUSTER_VIEW,
    id=ID,
    check=check,
    summary="Some node the pod may land on advertises each GPU resource it requests (needs the cluster view).",
    why="MIG-mixed nodes advertise `nvidia.com/gpu: 0` and `nvidia.com/mig-*` instead; a resource no node has "
    "keeps the pod Pending with `Insufficient`. The message names what the nodes advertise.",
    reads=("containers[*].resources", "initContainers[*].resources", "nodeSelector", "affinity.nodeAffinity"),
    triggers=GPU_POD,
    example={
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A30"},
            "containers": [{"name": "infer", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        }
    },
    example_nodes=(
        {
            "metadata": {"name": "a30-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A30"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.6gb": "4", "nvidia.com/mig-2g.12gb": "2"}
            },
        },
    ),
    default_mode=Mode.WARN,
)
