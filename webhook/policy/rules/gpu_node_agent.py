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

from typing import Final

from .. import cel
from ..cel import lit
from ..gpus import agent_account, node_agent, pinned_to_gpu_nodes, sees_no_gpu, zero_request
from ..objects import PodView
from ..rule import GPU_RESOURCE, NativeRule, Rule, Trigger, Where
from ..types import Mode, Policy, Violation
from ..vendors import OTHER_AGENT_IMAGES

ID = "gpu-node-agent"
BLIND: Final = ('isolation voids it unless exemptServiceAccounts lists "', '"')
FIX: Final = ('a trusted agent: add "', "\" to exemptServiceAccounts in gpu-policy's config; else ask for a GPU")
IMAGE: Final = "is a GPU agent image that gets no GPU: "
ZERO: Final = "is 0, as for an agent reaching every GPU: "
PINNED: Final = "runs in a per-node pod on GPU nodes and gets no GPU: "


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not node_agent(view, policy):
        return []
    account = agent_account(view)
    # The exemption comes early: a warning is cut at 256 characters, the fix first.
    blind, fix = account.join(BLIND), account.join(FIX)
    pinned = pinned_to_gpu_nodes(view, policy)
    out: list[Violation] = []
    for c in view.containers:
        if not sees_no_gpu(c, view, policy):
            continue
        if OTHER_AGENT_IMAGES and c.image.startswith(OTHER_AGENT_IMAGES):
            continue  # AMD's and Intel's agents reach GPUs through device files: isolation blinds none
        zero = zero_request(c, policy)
        if c.image.startswith(policy.node_agent_images):
            detail = IMAGE + blind
            out.append(c.violation(ID, "image", detail, fix, f'"{c.image}"'))
        elif zero is not None:
            side, name = zero
            detail = ZERO + blind
            out.append(c.violation(ID, f'resources.{side}["{name}"]', detail, fix, '"0"'))
        elif pinned:
            detail = PINNED + blind
            out.append(c.violation(ID, "image", detail, fix, f'"{c.image}"'))
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy): in a pod cel.NODE_AGENT calls a node agent, per
# container list the first container that sees no GPU (no GPU through its environment, and voided
# by isolation or already void) and is an agent image (not another vendor's), asks for 0 of a GPU
# resource, or sits in a pod pinned to GPU nodes; its message says which, as the loop above does.
_OTHER_IMAGES: Final = cel.literals(OTHER_AGENT_IMAGES)


def _image(c: str) -> str:
    return f"(has({c}.image) ? {c}.image : '')"


def _agent_image(c: str) -> str:
    return f"@agentImages@.exists(a, {_image(c)}.startsWith(a))"


def _flagged(c: str) -> str:
    return (
        f"(!{cel.plugin_env_gpu(c)} && (@isolate@ || {cel.grants_nothing(c)}) && "
        f"!{_OTHER_IMAGES}.exists(a, {_image(c)}.startsWith(a)) && "
        f"({_agent_image(c)} || size({cel.zero_requests(c)}) > 0 || variables.pinned))"
    )


def _then(c: str, _name: str) -> tuple[tuple[tuple[str, str], ...], str]:
    account, zero = cel.AGENT_ACCOUNT, f"({cel.zero_requests(c)})[0]"
    where = (
        f"({_agent_image(c)} ? ('.image ' + {lit(IMAGE)}) : (size({cel.zero_requests(c)}) > 0 ? "
        f"('.resources.' + {zero}[0] + '[\"' + {zero}[1] + '\"] ' + {lit(ZERO)}) : ('.image ' + {lit(PINNED)})))"
    )
    tail = f"{where} + {lit(BLIND[0])} + {account} + {lit(BLIND[1] + '; fix: ' + FIX[0])} + {account} + {lit(FIX[1])}"
    return (), tail


NATIVE: Final = NativeRule(
    *cel.first_container_checks(
        ID,
        cel.First("agent", _flagged, _then, guard="variables.nodeAgent"),
        (("kaiContainer", cel.KAI_CONTAINER_NAME), ("pinned", cel.PINNED_TO_GPU_NODES)),
    )
)


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
    native=NATIVE,
    webhook_only="",
    example={
        "metadata": {
            "namespace": "monitoring",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "dcgm-exporter",
                    "uid": "6f1c2d4e-9a3b-4c5d-8e7f-0a1b2c3d4e5f",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "serviceAccountName": "dcgm-exporter",
            "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"}],
        },
    },
    default_mode=Mode.WARN,
)
