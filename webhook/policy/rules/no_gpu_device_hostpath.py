"""no-gpu-device-hostpath: no GPU pod reaches the node's device channels through a hostPath, and no
pod mounts a volume where the NVIDIA runtime reads device grants.

Restricted fields: spec.volumes[*].hostPath.path with the volumeMounts that mount it;
  spec.{initContainers,containers,ephemeralContainers}[*].volumeMounts[*].mountPath
Denied: in a GPU pod (webhook.policy.gpus.gpu_pod), a hostPath that is, lies under or contains one
  of hostpaths.CHANNELS: a socket (device plugins, plugin registry, DRA drivers, runtimes, NRI)
  through any mount, a file channel (CDI specs, the NVIDIA driver, runtime binaries and config,
  runtime state and config, /proc, /sys) through a writable one. In every pod, a volumeMount whose
  mountPath starts with /var/run/nvidia-container-devices or /run/nvidia-container-devices (no
  slash needed: the toolkit compares the text).

Why GPU pods only for hostPaths: the same paths are what node agents mount (CSI node plugins the
plugin registry, SR-IOV and RDMA device plugins the device-plugin folder, Falco and Datadog the
runtime's socket, node-exporter the whole root read-only). That is node access, outside the pods
the GPU guarantee covers; node-wide-access reports it for every pod, and denies it where the
platform chooses. A host device node is no channel at all: the device cgroup refuses it
(hostpaths.Channel). The mount destination is a channel inside the boundary: any volume there
(an emptyDir, a ConfigMap, a host file that is a symlink to /dev/null) is read by the toolkit
(internal/config/image: `DevicesFromMounts`, a HasPrefix on the destination) as a device list,
under the volume-mounts strategy NVIDIA recommends.
"""

from __future__ import annotations

from typing import Final

from ..gpus import gpu_pod
from ..hostpaths import normalise, reached
from ..objects import PodView
from ..rule import GPU_POD, PATHS, Rule, Trigger, Where
from ..types import Policy, Violation

ID = "no-gpu-device-hostpath"
DEVICE_LIST_NAME = "nvidia-container-devices"
# The toolkit's own spelling (a string prefix, no trailing slash), and the same after /var/run
# is read as /run (a symlink in images, and how hostpaths.normalise spells it).
DEVICE_LIST_PREFIXES: Final = (f"/var/run/{DEVICE_LIST_NAME}", f"/run/{DEVICE_LIST_NAME}")
FIX: Final = (
    "a GPU pod gets its devices from the device plugin or a DRA claim: drop the hostPath (an emptyDir or a PVC "
    "holds files); a node agent runs in an exempt namespace or under an exempt service account"
)


def device_list_mount(mount_path: str) -> bool:
    """A mount destination the NVIDIA runtime reads as a device request."""
    return mount_path.startswith(DEVICE_LIST_PREFIXES) or normalise(mount_path).startswith(DEVICE_LIST_PREFIXES)


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    if view.raw_volumes is not None and gpu_pod(view, policy):
        for volume, channel in reached(view):
            out.append(
                Violation(
                    rule=ID,
                    path=f"{view.path}.volumes[{volume.index}].hostPath.path",
                    detail=f'is "{volume.path}", which reaches {channel.root} on the node ({channel.what}): a GPU pod '
                    "that can change which devices containers get",
                    fix=FIX,
                    value=f'"{volume.path}"',
                )
            )
    for c in view.containers:
        if c.raw_mounts is None:
            continue
        for i, mount_path in enumerate(c.mount_paths):
            if DEVICE_LIST_NAME in mount_path and device_list_mount(mount_path):
                out.append(
                    c.violation(
                        ID,
                        f"volumeMounts[{i}].mountPath",
                        f'is "{mount_path}": the NVIDIA runtime reads every mount whose path starts with '
                        "/var/run/nvidia-container-devices as a GPU device list",
                        "mount the volume somewhere else",
                        f'"{mount_path}"',
                    )
                )
    return out


RULE: Rule = Rule(
    webhook_only=PATHS,
    id=ID,
    check=check,
    summary="A GPU pod mounts no hostPath that is, lies under or contains a device channel of the node: the "
    "kubelet's `device-plugins`, `plugins_registry` and `plugins` folders, the runtimes' and NRI's sockets (through "
    "any mount), CDI spec folders, the NVIDIA driver, runtime and toolkit folders, runtime state and config, `/proc`, "
    "`/sys` (through a writable mount); paths normalised (`//`, `.`, `..`; `/var/run` read as `/run`). No pod mounts "
    "a volume at a path starting with `/var/run/nvidia-container-devices` (no slash needed).",
    why="Those are where the node decides which devices a container gets (a host device node is not: the device "
    "cgroup refuses it); the NVIDIA runtime reads any mount under that prefix as a device grant. Non-GPU pods "
    "that mount node paths are node agents: `node-wide-access` reports them.",
    reads=("volumes[*].hostPath.path", "containers[*].volumeMounts[*]"),
    triggers=(*GPU_POD, Trigger(Where.CONTAINER_MOUNT, DEVICE_LIST_NAME)),
    example={
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "volumeMounts": [{"name": "d", "mountPath": "/plugins"}],
                }
            ],
            "volumes": [{"name": "d", "hostPath": {"path": "//var/lib/kubelet/device-plugins/"}}],
        },
    },
)
