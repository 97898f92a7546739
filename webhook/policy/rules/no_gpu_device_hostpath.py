"""no-gpu-device-hostpath: no hostPath into device nodes, device-plugin or CDI state.

Restricted fields: spec.volumes[*].hostPath.path; spec.{initContainers,containers,
  ephemeralContainers}[*].volumeMounts[*].mountPath
Denied: a hostPath whose normalised path is, lies under, or contains one of
  /dev, /proc, /sys, /var/lib/kubelet/device-plugins, /run/cdi, /etc/cdi, /run/nvidia,
  /run/nvidia-container-devices (and "/" itself); any volumeMount under
  /run/nvidia-container-devices. /var/run is /run on every node, so both spellings count.

Why: device nodes (/dev/nvidia*, /dev/dri) reached through hostPath bypass the device
plugin; the device plugin's volume-mount strategy reads the device list from files under
/var/run/nvidia-container-devices (a /dev/null mount there *is* a GPU grant); CDI specs and
the kubelet's device-plugin sockets let a pod hand itself devices. A mount of a parent
folder (/var, /etc, /run) exposes all of these too.
"""

from __future__ import annotations

from ..objects import PodView, ShapeError
from ..types import Policy, Rule, Violation

ID = "no-gpu-device-hostpath"
DEVICE_LIST_DIR = "/run/nvidia-container-devices"
PROTECTED = (
    "/dev",
    "/proc",
    "/sys",
    "/var/lib/kubelet/device-plugins",
    "/run/cdi",
    "/etc/cdi",
    "/run/nvidia",
    DEVICE_LIST_DIR,
)


def normalise(path: str) -> str:
    """Collapse //, ., .., trailing slashes, and spell /var/run as /run (a symlink on nodes)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    norm = "/" + "/".join(parts)
    if norm == "/var/run" or norm.startswith("/var/run/"):
        norm = "/run" + norm[len("/var/run") :]
    return norm


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/") or root == "/"


def exposes(path: str) -> str | None:
    """The protected location a hostPath of `path` reaches, if any."""
    norm = normalise(path)
    for protected in PROTECTED:
        if _under(norm, protected) or _under(protected, norm):
            return protected
    return None


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    volumes = view.spec.get("volumes") or []
    if not isinstance(volumes, list):
        raise ShapeError(f"{view.path}.volumes", "must be a list")
    for i, volume in enumerate(volumes):
        host = volume.get("hostPath") if isinstance(volume, dict) else None
        if host is None:
            continue
        path = host.get("path") if isinstance(host, dict) else None
        if not isinstance(path, str):
            raise ShapeError(f"{view.path}.volumes[{i}].hostPath.path", "must be a string")
        reached = exposes(path)
        if reached:
            shown = "/" if normalise(path) == "/" else reached
            out.append(
                Violation(
                    rule=ID,
                    path=f"{view.path}.volumes[{i}].hostPath.path",
                    detail=f'is "{path}", which reaches {shown} on the node: GPU devices or device-plugin state '
                    "outside the device plugin's control",
                    fix='request GPUs with resources.limits["nvidia.com/gpu"]; use an emptyDir or a PVC for files',
                    value=f'"{path}"',
                )
            )
    for c in view.containers:
        mounts = c.raw.get("volumeMounts") or []
        if not isinstance(mounts, list):
            raise ShapeError(f"{c.path}.volumeMounts", "must be a list")
        for i, mount in enumerate(mounts):
            mount_path = mount.get("mountPath") if isinstance(mount, dict) else None
            if not isinstance(mount_path, str):
                raise ShapeError(f"{c.path}.volumeMounts[{i}].mountPath", "must be a string")
            # Normalising only drops segments, so a path under the folder spells its name.
            if "nvidia-container-devices" in mount_path and _under(normalise(mount_path), DEVICE_LIST_DIR):
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


RULE = Rule(
    id=ID,
    check=check,
    summary="no hostPath into /dev, /proc, /sys, device-plugin, CDI or NVIDIA runtime state",
    triggers=lambda _p: ("hostPath", "nvidia-container-devices"),
)
