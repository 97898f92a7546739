"""no-gpu-device-hostpath: no hostPath into device nodes, device-plugin or CDI state.

Restricted fields: spec.volumes[*].hostPath.path; spec.{initContainers,containers,
  ephemeralContainers}[*].volumeMounts[*].mountPath
Denied: a hostPath whose normalised path is, lies under, or contains one of
  /dev, /proc, /sys, /var/lib/kubelet/device-plugins, /run/cdi, /etc/cdi, /run/nvidia,
  /run/nvidia-container-devices (and "/" itself), except /dev/shm and below (shared memory: rule host-shm);
  any volumeMount under
  /run/nvidia-container-devices. /var/run is /run on every node, so both spellings count.
"""

from __future__ import annotations

from typing import Final

from ..gpus import pod_resource
from ..hostpaths import SHM, normalise, overlaps, under
from ..objects import PodView
from ..rule import PATHS, Rule, Trigger, Where
from ..types import Policy, Violation

ID = "no-gpu-device-hostpath"
DEVICE_LIST_NAME = "nvidia-container-devices"
DEVICE_LIST_DIR = f"/run/{DEVICE_LIST_NAME}"
PROTECTED: Final[tuple[str, ...]] = (
    "/dev",
    "/proc",
    "/sys",
    "/var/lib/kubelet/device-plugins",
    "/run/cdi",
    "/etc/cdi",
    "/run/nvidia",
    DEVICE_LIST_DIR,
)


def exposes(path: str) -> str | None:
    """The protected location a hostPath of `path` reaches, if any (/dev/shm and below: none)."""
    norm = normalise(path)
    if under(norm, SHM):
        return None
    for protected in PROTECTED:
        if overlaps(norm, protected):
            return protected
    return None


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    resource = ""  # the vendor's GPU resource the fix names: looked up once, at the first finding
    for volume in view.host_paths:
        reached = exposes(volume.path)
        if reached:
            resource = resource or pod_resource(view, policy)
            shown = "/" if normalise(volume.path) == "/" else reached
            out.append(
                Violation(
                    rule=ID,
                    path=f"{view.path}.volumes[{volume.index}].hostPath.path",
                    detail=f'is "{volume.path}", which reaches {shown} on the node: GPU devices or device-plugin '
                    "state outside the device plugin's control",
                    fix=f'request GPUs with resources.limits["{resource}"]; use an emptyDir or a PVC for files',
                    value=f'"{volume.path}"',
                )
            )
    for c in view.containers:
        for i, mount_path in enumerate(c.mount_paths):
            # Normalising only drops segments, so a path under the folder spells its name.
            if DEVICE_LIST_NAME in mount_path and under(normalise(mount_path), DEVICE_LIST_DIR):
                out.append(
                    c.violation(
                        ID,
                        f"volumeMounts[{i}].mountPath",
                        f'is "{mount_path}": files there are read as a GPU device list by the NVIDIA runtime',
                        "mount the volume somewhere else",
                        f'"{mount_path}"',
                    )
                )
    return out


RULE: Rule = Rule(
    webhook_only=PATHS,
    id=ID,
    check=check,
    summary="No hostPath whose normalised path (`//`, `.`, `..`, trailing `/` collapsed; `/var/run` read as "
    "`/run`) is `/`, lies under, or contains `/dev`, `/proc`, `/sys`, `/var/lib/kubelet/device-plugins`, "
    "`/run/cdi`, `/etc/cdi`, `/run/nvidia` or `/run/nvidia-container-devices` (host `/dev/shm` is shared memory, "
    "not a device: rule `host-shm`); no volumeMount under "
    "`/var/run/nvidia-container-devices`. Every pod, GPU or not.",
    why="Device nodes through hostPath bypass the device plugin; files under the device-list folder are read "
    "as GPU grants (a `/dev/null` mount there *is* a grant); CDI specs and device-plugin sockets let a pod "
    "hand itself devices; a parent folder (`/etc`, `/var`) exposes them all.",
    reads=("volumes[*].hostPath.path", "containers[*].volumeMounts[*].mountPath"),
    triggers=(Trigger(Where.HOSTPATH_VOLUME, "hostPath"), Trigger(Where.CONTAINER_MOUNT, DEVICE_LIST_NAME)),
    example={
        "spec": {"containers": [{"name": "t"}], "volumes": [{"name": "d", "hostPath": {"path": "//dev/"}}]},
    },
)
