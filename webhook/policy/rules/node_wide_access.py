"""node-wide-access (warn by default): a pod that asks for no GPU but reaches every GPU of its node.

Looked at: pods (templates) that are no GPU pods (the GPU rules judge those: no-privileged-gpu,
no-host-namespaces-gpu, no-gpu-device-hostpath) and no GPU node agents (gpu-node-agent tells them
the exemption to ask for).
Flagged: a privileged container of any kind (a `kubectl debug --profile=sysadmin` ephemeral one
included), hostPID, and a hostPath that is, lies under or contains the container runtime's state
(`/run/containerd`, `/run/crio`, `/run/docker.sock`, `/run/docker`, `/run/k3s/containerd`,
`/run/cri-dockerd.sock`, `/var/lib/containerd`, `/var/lib/docker`; `/var/run` read as `/run`).

Why only a warning by default: this is Pod Security Admission's `baseline` domain, and node agents
outside the exempt namespaces legitimately need some of it. But many GPU clusters do not enforce
baseline, and a pod that needs no GPU request to land on an untainted GPU node (or names one with
nodeName) reaches every card there: a privileged container sees every device node, hostPID reaches
the GPU processes of every pod, the runtime's socket starts a container with any device. The
platform makes it a denial with `rules: {node-wide-access: deny}`.
"""

from __future__ import annotations

from typing import Final

from ..gpus import gpu_pod, node_agent
from ..hostpaths import normalise, overlaps
from ..objects import PodView
from ..rule import PATHS, Rule, Trigger, Where
from ..types import Mode, Policy, Violation

ID = "node-wide-access"
RUNTIME_STATE: Final = (
    "/run/containerd",
    "/run/crio",
    "/run/docker.sock",
    "/run/docker",
    "/run/k3s/containerd",
    "/run/cri-dockerd.sock",
    "/var/lib/containerd",
    "/var/lib/docker",
)
FIX = "drop it and enforce Pod Security Admission baseline on this namespace; node agents run in an exempt namespace"


def _reaches(path: str) -> str | None:
    norm = normalise(path)
    return next((root for root in RUNTIME_STATE if overlaps(norm, root)), None)


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    privileged = [c for c in view.containers if c.privileged]
    if not privileged and not view.host_pid and not view.raw_volumes:
        return out
    if gpu_pod(view, policy) or node_agent(view, policy):
        return out  # GPU pods: the GPU rules; GPU node agents: gpu-node-agent, with its exemption
    for c in privileged:
        out.append(
            c.violation(
                ID,
                "securityContext.privileged",
                "is true: a privileged container sees every device node, every GPU of the node it lands on included",
                FIX,
            )
        )
    if view.host_pid:
        out.append(
            Violation(
                rule=ID,
                path=f"{view.path}.hostPID",
                detail="is true: the pod sees and can enter every process of its node, GPU jobs of other pods included",
                fix=FIX,
            )
        )
    for volume in view.host_paths:
        root = _reaches(volume.path)
        if root:
            out.append(
                Violation(
                    rule=ID,
                    path=f"{view.path}.volumes[{volume.index}].hostPath.path",
                    detail=f'is "{volume.path}", which reaches the container runtime ({root}): it can start a '
                    "container with every GPU",
                    fix=FIX,
                    value=f'"{volume.path}"',
                )
            )
    return out


RULE: Rule = Rule(
    webhook_only=PATHS,
    id=ID,
    check=check,
    summary="A pod that asks for no GPU has no privileged container, no `hostPID` and no hostPath to the container "
    "runtime's state (`/run/containerd`, `/run/crio`, `/run/docker.sock`, ...): warn by default, deny by choice.",
    why="Each reaches every GPU of a node the pod lands on (untainted GPU nodes, or named by `nodeName`); this is "
    "Pod Security Admission's `baseline`, which many GPU clusters do not enforce.",
    reads=("containers[*].securityContext.privileged", "hostPID", "volumes[*].hostPath.path"),
    triggers=(
        Trigger(Where.PRIVILEGED, "privileged"),
        Trigger(Where.HOST_PID, "hostPID"),
        Trigger(Where.HOSTPATH_VOLUME, "hostPath"),
    ),
    example={"spec": {"containers": [{"name": "debug", "securityContext": {"privileged": True}}]}},
    default_mode=Mode.WARN,
)
