"""Host paths as the node resolves them: what every hostPath rule compares (no-gpu-device-hostpath,
host-shm, driver-hostpath-non-gpu, node-wide-access) and gke-device-annotation's device paths; and
the node's device channels a hostPath can reach (CHANNELS), the part of the boundary model
(docs/policy.md, "The boundary") that host files carry.

Shared here, not in one rule, so rules stay independent of each other (an import-linter contract).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .objects import HostPath, PodView


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


def under(path: str, root: str) -> bool:
    """Normalised `path` is `root` or lies below it (everything lies below "/")."""
    return path == root or path.startswith(root + "/") or root == "/"


def overlaps(path: str, root: str) -> bool:
    """A hostPath of normalised `path` reaches `root`: it is, lies under, or contains it."""
    return under(path, root) or under(root, path)


# Shared memory, not a device: every EKS/NCCL multi-node training sample mounts the host's
# /dev/shm into pods that already hold their GPUs. The `host-shm` rule (off by default) covers it.
SHM: Final = "/dev/shm"


@dataclass(frozen=True, slots=True)
class Channel:
    """A place on the node through which a container can change which devices containers get.

    A host device node is not one: the container's device cgroup refuses to open any device the
    runtime did not add (runc's default allow-list; measured on a real kubelet, docs/policy.md),
    read-only or not, so `/dev` by hostPath gives an unprivileged container nothing. What gives
    devices is whoever writes that cgroup's rules: the kubelet (from device plugins and DRA
    drivers, over sockets), the runtime (over its socket, from CDI specs and NRI plugins) and the
    NVIDIA hook (its binaries and config.toml). A socket is reached read-only too (connect() needs
    no write permission on the mount); files only when some mount of them is writable."""

    root: str  # normalised; a hostPath that is, lies under or contains it reaches it
    what: str  # what the node does with it, for the message
    socket: bool  # reached through a read-only mount too


_SOCKET = "a socket there "
CHANNELS: Final[tuple[Channel, ...]] = (
    # kubelet, pkg/kubelet/cm/devicemanager (v1beta1.DevicePluginPath) and pluginmanager
    # (plugins_registry: pluginwatcher registers any socket as a device plugin, DRA or CSI driver).
    Channel("/var/lib/kubelet/device-plugins", _SOCKET + "registers with the kubelet as a device plugin", True),
    Channel("/var/lib/kubelet/plugins_registry", _SOCKET + "registers with the kubelet as a DRA driver", True),
    Channel("/var/lib/kubelet/plugins", "DRA drivers' sockets, which the kubelet asks to prepare devices", True),
    # The runtimes' sockets and state: a client starts a container with any device.
    Channel("/run/containerd", "containerd's socket, which starts containers with any device", True),
    Channel("/run/k3s/containerd", "k3s's containerd socket, which starts containers with any device", True),
    Channel("/run/crio", "CRI-O's socket, which starts containers with any device", True),
    Channel("/run/docker.sock", "Docker's socket, which starts containers with any device", True),
    Channel("/run/docker", "Docker's state and socket", True),
    Channel("/run/cri-dockerd.sock", "cri-dockerd's socket, which starts containers with any device", True),
    Channel("/run/nri", "NRI's socket: a plugin there edits every container's devices and mounts", True),
    Channel("/var/lib/containerd", "containerd's state (every container's root file system)", False),
    Channel("/var/lib/docker", "Docker's state (every container's root file system)", False),
    Channel("/etc/containerd", "containerd's config (runtimes, CDI, NRI)", False),
    Channel("/etc/crio", "CRI-O's config (runtimes, allowed annotations, CDI)", False),
    # CDI (tags.cncf.io/container-device-interface pkg/cdi: spec dirs /etc/cdi, /var/run/cdi).
    Channel("/etc/cdi", "CDI specs, which the runtime applies as device edits and hooks", False),
    Channel("/run/cdi", "CDI specs, which the runtime applies as device edits and hooks", False),
    # The NVIDIA stack: the operator's driver and toolkit root, the runtime's config.toml (which
    # names the CLI its hook runs as root), the operator's toolkit binaries. Not GKE's driver
    # folder: its libraries are code, not a say in which devices a container gets (GKE's TCPX
    # sample mounts them writable into its GPU pod); driver-hostpath-non-gpu covers it by choice.
    Channel("/run/nvidia", "the GPU operator's driver and toolkit", False),
    Channel("/usr/local/nvidia", "the NVIDIA runtime's binaries and the driver's libraries", False),
    Channel("/etc/nvidia-container-runtime", "the NVIDIA runtime's config.toml, which names what its hook runs", False),
    Channel("/etc/nvidia-container-toolkit", "the NVIDIA toolkit's config and CDI specs", False),
    # Kernel interfaces that run code as root on the node (kernel.core_pattern, uevent helpers).
    Channel("/proc", "the node's /proc, whose sysctls run commands as root on the node", False),
    Channel("/sys", "the node's sysfs (device binding, uevent helpers)", False),
)


def channel(path: str, writable: bool) -> Channel | None:
    """The first device channel a hostPath of `path` reaches (read-only: only sockets)."""
    norm = normalise(path)
    for ch in CHANNELS:
        if (writable or ch.socket) and overlaps(norm, ch.root):
            return ch
    return None


def reached(view: PodView) -> list[tuple[HostPath, Channel]]:
    """Each hostPath volume some container mounts that reaches a channel (read-only mounts reach
    only sockets), with the first channel it reaches, in volume order. An unmounted volume reaches
    nothing; an ephemeral container that mounts it later is judged then."""
    out = []
    for volume in view.host_paths:
        access = [a for c in view.containers if (a := c.mounts(volume.name)) is not None]
        if access:
            found = channel(volume.path, any(access))
            if found is not None:
                out.append((volume, found))
    return out
