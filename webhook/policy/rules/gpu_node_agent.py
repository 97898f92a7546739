"""gpu-node-agent (warn by default): a GPU node agent that isolation would blind says so.

Looked at: pods with one copy per node (a DaemonSet, or a Pod a DaemonSet made) or hostPID that
are there for the GPUs (webhook.policy.gpus.node_agent): a container image under nodeAgentImages
(default "nvcr.io/nvidia/": dcgm-exporter, GPU feature discovery, validators), pinned to GPU
nodes, or a container asking for 0 of a GPU device resource (health checkers and exporters from
any registry reach every GPU that way, without the device plugin).
Flagged: each such container (the agent image, the one asking for 0, or any container of a pod
pinned to GPU nodes) that gets no GPU and that isolation voids (or already voided: the validating
webhook sees the pod after the mutating one).

Agents such as dcgm-exporter legitimately need every GPU through their image's
NVIDIA_VISIBLE_DEVICES=all. Outside the exempt namespaces isolation gives them `void`, and
they silently report nothing. The fix is an exemption the platform grants in config
(exemptServiceAccounts or exemptNamespaces), never one a pod author can grant themselves.
"""

from __future__ import annotations

from ..gpus import agent_account, node_agent, pinned_to_gpu_nodes, sees_no_gpu, zero_request
from ..objects import PodView
from ..rule import GPU_RESOURCE, Rule, Trigger, Where
from ..types import Mode, Policy, Violation
from ..vendors import OTHER_AGENT_IMAGES

ID = "gpu-node-agent"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not node_agent(view, policy):
        return []
    account = agent_account(view)
    # The exemption comes early: a warning is cut at 256 characters, the fix first.
    blind = f'isolation voids it unless exemptServiceAccounts lists "{account}"'
    fix = f'a trusted agent: add "{account}" to exemptServiceAccounts in gpu-policy\'s config; else ask for a GPU'
    pinned = pinned_to_gpu_nodes(view, policy)
    out: list[Violation] = []
    for c in view.containers:
        if not sees_no_gpu(c, view, policy):
            continue
        if OTHER_AGENT_IMAGES and c.image.startswith(OTHER_AGENT_IMAGES):
            continue  # AMD's and Intel's agents reach GPUs through device files: isolation blinds none
        zero = zero_request(c, policy)
        if c.image.startswith(policy.node_agent_images):
            detail = f"is a GPU agent image that gets no GPU: {blind}"
            out.append(c.violation(ID, "image", detail, fix, f'"{c.image}"'))
        elif zero is not None:
            side, name = zero
            detail = f"is 0, as for an agent reaching every GPU: {blind}"
            out.append(c.violation(ID, f'resources.{side}["{name}"]', detail, fix, '"0"'))
        elif pinned:
            detail = f"runs in a per-node pod on GPU nodes and gets no GPU: {blind}"
            out.append(c.violation(ID, "image", detail, fix, f'"{c.image}"'))
    return out


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A GPU node agent (a hostPID or per-node DaemonSet pod with an image under `nodeAgentImages`, pinned "
    "to GPU nodes, or asking for 0 of a GPU resource) whose container gets no GPU and which isolation voids is "
    "reported with the exemption to configure.",
    why="Agents like dcgm-exporter need every GPU through their image's `NVIDIA_VISIBLE_DEVICES=all`; voided "
    "outside the exempt namespaces, they silently report nothing. Only the platform can exempt them.",
    reads=(
        "containers[*].image",
        "containers[*].env",
        "containers[*].resources",
        "hostPID",
        "ownerReferences",
        "nodeSelector",
        "affinity",
    ),
    # Agent images; GPU node labels and instance types (pinned); a GPU resource (asking for 0).
    triggers=(
        Trigger(Where.CONTAINER_IMAGE, setting="nodeAgentImages"),
        Trigger(Where.NODE_LABEL, setting="gpuNodeLabels"),
        Trigger(Where.NODE_LABEL, "node.kubernetes.io/instance-type"),
        *GPU_RESOURCE,
    ),
    example={
        "metadata": {"namespace": "monitoring", "ownerReferences": [{"kind": "DaemonSet", "controller": True}]},
        "spec": {
            "serviceAccountName": "dcgm-exporter",
            "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"}],
        },
    },
    default_mode=Mode.WARN,
)
