"""node-wide-access (warn by default): a pod outside the boundary the GPU guarantee covers.

The guarantee (no container sees a device it was not allocated) holds for node-isolated pods:
docs/policy.md, "The boundary". A pod leaves that ground with what Pod Security Admission's
baseline forbids and that reaches the node's device channels:
- a privileged container (every device node; a `kubectl debug --profile=sysadmin` one included),
  or a capability outside baseline that reaches devices or the kernel (`SYS_ADMIN` rewrites the
  container's own device cgroup, measured under the RuntimeDefault seccomp profile; `ALL`,
  `SYS_MODULE`, `SYS_RAWIO`, `BPF`, `DAC_READ_SEARCH`: NODE_CAPS);
- hostPID together with CAP_SYS_PTRACE: ptrace and pidfd_getfd take the open GPU file
  descriptors of other pods' processes, which no device cgroup checks again. hostPID alone gives
  none: a descriptor reopened through /proc is opened under the pod's own device cgroup, and
  taking one needs ptrace rights over the GPU job (another user, or CAP_SYS_PTRACE). hostIPC shares
  memory, not devices. Neither is reported alone: node-exporter's hostPID is no GPU risk;
- a hostPath that reaches a device channel (hostpaths.CHANNELS: the kubelet's plugin sockets, the
  runtimes' and NRI's sockets, CDI specs, the NVIDIA runtime's files, /proc and /sys writable).

Every pod is looked at, GPU or not, whatever its images: an image prefix is no identity (an image
under nvcr.io/nvidia made a privileged pod a "node agent" and skipped this rule). In a GPU pod the
GPU rules deny privilege, SYS_ADMIN, host namespaces and channel hostPaths themselves
(no-privileged-gpu, no-host-namespaces-gpu, no-gpu-device-hostpath): this rule reports the rest.

Why only a warning by default: node agents (CNI, CSI, monitoring, logging, security) need exactly
this, and where they run is the platform's to say. The fix names the exemption that fits a node
agent (its namespace, or its service account) and Pod Security Admission for everything else; the
platform makes it a denial with `rules: {node-wide-access: deny}`, which holds the guarantee on
every node (a pod outside the boundary can otherwise change what other pods get).
"""

from __future__ import annotations

from typing import Final

from ..gpus import agent_account, gpu_pod
from ..hostpaths import reached
from ..nvidia import privileged_capability
from ..objects import PodView
from ..rule import PATHS, Rule, Trigger, Where
from ..types import Mode, Policy, Violation

ID = "node-wide-access"


def _fix(view: PodView) -> str:
    return (
        "a node agent runs in an exempt namespace (exemptNamespaces; the chart's webhook.excludedNamespaces) or under "
        f'an exempt service account (exemptServiceAccounts: ["{agent_account(view)}"]); anything else drops it, and '
        "Pod Security Admission baseline on its namespace keeps it out"
    )


# Of the capabilities outside baseline, those that reach devices or the node's kernel (the rest,
# NET_ADMIN, NET_RAW, IPC_LOCK, SYS_PTRACE without hostPID, reach no device: not this rule's to say).
PTRACE: Final = "SYS_PTRACE"
NODE_CAPS: Final = {
    "ALL": "every capability, SYS_ADMIN among them",
    "SYS_ADMIN": "it rewrites the container's own device cgroup, every GPU included (measured)",
    "SYS_MODULE": "it loads kernel modules into the node",
    "SYS_RAWIO": "raw I/O ports and memory of the node",
    "BPF": "eBPF programs, the device cgroup's filter on cgroup v2 among them",
    "DAC_READ_SEARCH": "open_by_handle_at reads any file of the node",
}


def _name(cap: str) -> str:
    """A capability as the runtime reads it: trimmed, upper case, without CAP_."""
    name = cap.strip().upper()
    return name[4:] if name.startswith("CAP_") else name


def _node_cap(cap: str) -> str | None:
    """Why an added capability reaches devices or the node, or None."""
    return NODE_CAPS.get(_name(cap))


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    caps = any(c.added_capabilities for c in view.containers)
    privileged = any(c.privileged for c in view.containers)
    if not (privileged or caps or view.raw_volumes):
        return out
    gpu = gpu_pod(view, policy)  # the GPU rules deny privilege, namespaces and channels there
    fix = ""
    for c in view.containers:
        if c.privileged and not gpu:
            fix = fix or _fix(view)
            out.append(
                c.violation(
                    ID,
                    "securityContext.privileged",
                    "is true: a privileged container opens every device node, every GPU of its node included",
                    fix,
                    "true",
                )
            )
        for i, cap in enumerate(c.added_capabilities):
            why = _node_cap(cap)
            if why and not (gpu and privileged_capability(cap)):
                fix = fix or _fix(view)
                out.append(
                    c.violation(
                        ID,
                        f"securityContext.capabilities.add[{i}]",
                        f'adds "{cap}", outside Pod Security Admission baseline: {why}',
                        fix,
                        f'"{cap}"',
                    )
                )
    if not gpu:
        if view.host_pid and any(_name(cap) == PTRACE for c in view.containers for cap in c.added_capabilities):
            out.append(
                Violation(
                    rule=ID,
                    path=f"{view.path}.hostPID",
                    detail="is true with SYS_PTRACE added: the pod can take the open GPU file descriptors of other "
                    "pods' processes (ptrace, pidfd_getfd), which no device cgroup checks again",
                    fix=fix or _fix(view),
                    value="true",
                )
            )
        found = reached(view)
        if found:  # one finding: a node agent's dozen mounts need one exemption, not a dozen lines
            volume, channel = found[0]
            more = f" (and {len(found) - 1} more hostPaths that reach device channels)" if len(found) > 1 else ""
            out.append(
                Violation(
                    rule=ID,
                    path=f"{view.path}.volumes[{volume.index}].hostPath.path",
                    detail=f'is "{volume.path}", which reaches {channel.root} on the node ({channel.what}){more}',
                    fix=fix or _fix(view),
                    value=f'"{volume.path}"',
                )
            )
    return out


RULE: Rule = Rule(
    webhook_only=PATHS,
    id=ID,
    check=check,
    summary="No pod leaves the ground the GPU guarantee covers: a privileged container, an added `SYS_ADMIN`, "
    "`ALL`, `SYS_MODULE`, `SYS_RAWIO`, `BPF` or `DAC_READ_SEARCH`, `hostPID` with `SYS_PTRACE`, or a hostPath reaching "
    "a device channel of the node "
    "(plugin and runtime sockets through any mount; CDI specs, NVIDIA runtime files, runtime state, `/proc`, `/sys` "
    "through a writable one). GPU pods' privilege, namespaces and channels are the GPU rules' to deny. Warn by "
    "default, with the exemption a node agent takes; deny by choice.",
    why="Each lets a container reach devices it was not allocated, or change what other containers get; node "
    "agents need it, so where they may run is the platform's choice (Pod Security Admission's ground).",
    reads=(
        "containers[*].securityContext",
        "hostPID",
        "volumes[*].hostPath.path",
        "containers[*].volumeMounts[*]",
    ),
    triggers=(
        Trigger(Where.PRIVILEGED, "privileged"),
        Trigger(Where.CAPABILITIES, "capabilities"),
        Trigger(Where.HOSTPATH_VOLUME, "hostPath"),
    ),
    example={"spec": {"containers": [{"name": "debug", "securityContext": {"privileged": True}}]}},
    default_mode=Mode.WARN,
)
