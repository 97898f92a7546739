"""gpu-node-agent (warn by default): a GPU node agent that isolation would blind says so.

Looked at: containers whose image starts with one of nodeAgentImages (default
"nvcr.io/nvidia/": dcgm-exporter, GPU feature discovery, validators), in a pod with hostPID
or one copy per node (a DaemonSet, or a Pod a DaemonSet made).
Flagged: such a container that gets no GPU and that isolation voids (or already voided: the
validating webhook sees the pod after the mutating one).

Agents such as dcgm-exporter legitimately need every GPU through their image's
NVIDIA_VISIBLE_DEVICES=all. Outside the exempt namespaces isolation gives them `void`, and
they silently report nothing. The fix is an exemption the platform grants in config
(exemptServiceAccounts or exemptNamespaces), never one a pod author can grant themselves.
"""

from __future__ import annotations

from ..gpus import node_agent, sees_no_gpu
from ..objects import PodView
from ..types import Mode, Policy, Rule, Trigger, Violation, Where

ID = "gpu-node-agent"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if node_agent(view, policy) is None:
        return []
    account = f"{view.namespace or '<namespace>'}/{view.service_account}"
    return [
        c.violation(
            ID,
            "image",
            f'is a GPU agent image but gets no GPU, so isolation voids it: if trusted, the platform adds "{account}" '
            "to exemptServiceAccounts",
            f'add "{account}" to exemptServiceAccounts in gpu-policy\'s config, or request the GPUs it needs',
            f'"{c.image}"',
        )
        for c in view.containers
        if c.image.startswith(policy.node_agent_images) and sees_no_gpu(c, view, policy)
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A container from a GPU agent image (`nodeAgentImages`) in a hostPID or per-node (DaemonSet) pod, "
    "which gets no GPU and which isolation voids, is reported with the exemption to configure.",
    why="Agents like dcgm-exporter need every GPU through their image's `NVIDIA_VISIBLE_DEVICES=all`; voided "
    "outside the exempt namespaces, they silently report nothing. Only the platform can exempt them.",
    reads=("containers[*].image", "containers[*].env", "containers[*].resources", "hostPID", "ownerReferences"),
    triggers=(Trigger(Where.CONTAINER_IMAGE, setting="nodeAgentImages"),),
    example={
        "metadata": {"namespace": "monitoring", "ownerReferences": [{"kind": "DaemonSet", "controller": True}]},
        "spec": {
            "serviceAccountName": "dcgm-exporter",
            "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"}],
        },
    },
    default_mode=Mode.WARN,
)
