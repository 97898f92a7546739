"""gpu-node-name-advertised: a pod bound by spec.nodeName gets its GPU only if that node advertises it.

Looked at: Pods (not templates) that name their node in spec.nodeName, and the resources through
which their containers' GPUs would come from the node's environment (device-plugin and companion
resources), or a KAI fraction.
Denied: a resource the named node does not advertise (allocatable > 0), a node the cluster view has
not seen, no cluster view at all, or a KAI fraction pod.

Why: spec.nodeName skips the scheduler, and the kubelet's admission silently drops extended
resources its node does not advertise (pkg/kubelet/lifecycle/predicate.go,
`removeMissingExtendedResources`): no device plugin allocates, nothing sets
NVIDIA_VISIBLE_DEVICES, and the image's `all` stands in a container that isolation left alone
because it asked for a GPU. With the scheduler this cannot happen (it places pods only where the
resource is allocatable). A KAI fraction gets its devices from KAI's binder, which a pod bound
by nodeName never meets. Unknown fails closed: without the view this rule cannot tell.
An UPDATE of a bound pod is judged like any other: what the old object already had is not new.
"""

from __future__ import annotations

from decimal import Decimal

from ..containers import Container
from ..gpus import plugin_env_gpu, source
from ..objects import PodView
from ..rule import CLUSTER_VIEW, GPU_POD, Rule
from ..types import Policy, Violation

ID = "gpu-node-name-advertised"


def _advertised(view: PodView, policy: Policy) -> dict[str, Decimal] | None:
    """The named node's allocatable extended resources, or None when the view cannot say."""
    cluster = policy.cluster
    if cluster is None:
        return None
    for group in cluster.groups:
        if view.node_name in group.names:
            return dict(group.resources)
    return None


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not view.is_pod or not view.node_name:
        return []
    out: list[Violation] = []
    resources: list[tuple[Container, str, str]] = []  # (container, side, resource)
    for c in view.containers:
        found = source(c, view, policy)
        if found is None or not plugin_env_gpu(c, view, policy):
            continue
        if found.how == "kai":
            out.append(
                c.violation(
                    ID,
                    "name",
                    f'is a KAI fraction container bound to node "{view.node_name}" by spec.nodeName: KAI\'s '
                    "binder, which writes the devices it allocated, never runs for it",
                    "remove spec.nodeName and let KAI Scheduler bind the pod",
                )
            )
            continue
        side = "limits" if c.limits and found.name in c.limits else "requests"
        resources.append((c, side, found.name))
    if not resources:
        return out
    offered = _advertised(view, policy)
    for c, side, name in resources:
        if offered is not None:
            if offered.get(name, Decimal(0)) > 0:
                continue
            why = f'node "{view.node_name}" does not advertise {name}'
        elif policy.cluster is None:
            why = f'no cluster view says whether node "{view.node_name}" advertises {name}'
        else:
            why = f'the cluster view has not seen node "{view.node_name}"'
        out.append(
            c.violation(
                ID,
                c.resource_path(side, name),
                f"is requested by a pod bound with spec.nodeName, and {why}: the kubelet drops a resource its "
                "node lacks and the container would run with its image's GPUs",
                "remove spec.nodeName and let the scheduler place the pod, pinned by a nodeSelector on "
                "kubernetes.io/hostname if need be; or bind it to a node that advertises the resource",
                name,
            )
        )
    return out


RULE: Rule = Rule(
    webhook_only=CLUSTER_VIEW,
    id=ID,
    check=check,
    summary="A Pod that names its node in `spec.nodeName` asks only for GPU resources that node advertises "
    "(cluster view; unknown nodes and no view are denied), and is no KAI fraction pod.",
    why="`nodeName` skips the scheduler and the kubelet silently drops extended resources its node lacks: "
    "nothing allocates, and the container keeps its image's `NVIDIA_VISIBLE_DEVICES=all`.",
    reads=("nodeName", "containers[*].resources", "schedulerName", "metadata.annotations"),
    triggers=GPU_POD,
    example={
        "spec": {
            "nodeName": "cpu-node-1",
            "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/mig-7g.80gb": 1}}}],
        }
    },
    example_nodes=({"metadata": {"name": "cpu-node-1"}, "status": {"allocatable": {"cpu": "8"}}},),
)
