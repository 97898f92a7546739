"""The GPU vendors, as data: how each one's GPUs reach a container, and what grants them by hand.

One `Vendor` per vendor; the config's defaults, the rules' names and docs/policy.md's tables read
from here, so adding a vendor is one entry (and its tests). NVIDIA's entry is the defaults of the
top-level config keys (gpuDeviceResources, gpuNodeLabels, ...); the other vendors' names are added
to those when `vendors.<key>.enabled` is on (webhook.config builds the Policy).

What the other vendors' node software does, from its source:

- AMD (ROCm/k8s-device-plugin, ROCm/container-toolkit): the device plugin's Allocate answers
  device specs (/dev/kfd, /dev/dri/cardN and renderDN), never an environment variable. The AMD
  Container Runtime (amd-container-runtime, `internal/oci/oci.go` getAMDEnv) reads the process
  environment, image ENV and pod env merged, and for every entry named `AMD_VISIBLE_DEVICES` *or
  starting with `DOCKER_RESOURCE_`* parses the value again (the last one wins), then adds those GPUs
  and /dev/kfd with no privilege check. The value (`internal/gpu-tracker` parseGPUsList): exactly
  `all`, `All` or `ALL` is every GPU; otherwise split on "," with no trimming, and each item that
  is a 0x-prefixed or longer-than-8 hex unique id, a range `a-b` or a decimal index adds GPUs;
  anything else is ignored. So `none`, `void` and "" grant nothing (`amd_grants` models it; the
  admission rules allow only those exact literals, as for NVIDIA). The runtime is configured for
  Docker by its own `amd-ctk` and is not installed by the AMD GPU operator: on containerd nodes the
  variables do nothing unless someone wired it in. An image can carry a `DOCKER_RESOURCE_*` name
  admission never sees, so on such nodes isolation cannot be complete (docs/policy.md).
- Intel (intel/intel-device-plugins-for-kubernetes): device nodes only (/dev/dri/cardN and
  renderDN), no runtime variable to grant or void. `gpu.intel.com/monitoring` (and the deprecated
  `i915_monitoring`/`xe_monitoring` of `-monitoring-mode=split`) gives one container every Intel GPU
  of the node (and /dev/mei*): an agent's resource, not a workload's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Vendor:
    """What the policy knows of one GPU vendor. Resource names are names or patterns with one "*"
    (as the config allows); every tuple may be empty."""

    key: str  # the config's vendors.<key> (NVIDIA: the top-level keys)
    name: str  # as messages and docs spell it
    workload: tuple[str, ...]  # the resources a workload asks for, as a fix lists them (first: `resource`)
    domains: tuple[str, ...]  # resource-name prefixes only this vendor's plugins use
    devices: tuple[str, ...]  # device-plugin resources that are GPUs (whole cards, partitions, slots)
    shared: tuple[str, ...]  # of those, time-sliced/MPS slots (at most 1 per container)
    companions: tuple[str, ...]  # resources that imply a GPU without a device count (HAMi)
    node_wide: tuple[str, ...]  # resources that give one container every GPU of the node
    grant_env: tuple[str, ...]  # variables a runtime reads as a device list
    grant_env_prefixes: tuple[str, ...]  # name prefixes a runtime reads as device lists too
    no_devices: frozenset[str]  # the exact values of those variables that grant nothing
    isolation: tuple[str, str] | None  # (variable, value) isolation gives containers without its GPU
    device_nodes: tuple[str, ...]  # where its device nodes are (all under /dev)
    driver_dirs: tuple[str, ...]  # host folders with the driver (driver-hostpath-non-gpu)
    node_labels: tuple[str, ...]  # node labels of its GPU nodes
    device_classes: tuple[str, ...]  # DRA DeviceClasses of its drivers that are GPUs
    agent_namespaces: tuple[str, ...]  # namespaces its operator installs node agents into
    agent_images: tuple[str, ...]  # image prefixes of its node agents
    runtime_classes: tuple[str, ...]  # runtime classes that give a pod every GPU
    probe: str  # what `verify` runs in its probe pods, and why that image

    @property
    def resource(self) -> str:
        """The whole-GPU resource a fix names."""
        return self.workload[0]


# AMD's and Intel's device plugins hand out device nodes, not a variable: verify counts render nodes.
RENDER_PROBE: Final = (
    "the same probe pod (any image with sh and ls): it counts /dev/dri/renderD<N>, which the device plugin "
    "mounts one per GPU under the host's name, and no variable"
)


NVIDIA: Final = Vendor(
    key="nvidia",
    name="NVIDIA",
    workload=("nvidia.com/gpu",),
    domains=("nvidia.com/",),
    devices=(
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
        "nvidia.com/*.shared",
        "nvidia.com/*-shared",
        "deviceclass.resource.kubernetes.io/*",
        # Volcano's vGPU device plugin and Alibaba's gpushare: their Allocate answers set
        # NVIDIA_VISIBLE_DEVICES, so isolation must leave them alone.
        "volcano.sh/vgpu-number",
        "aliyun.com/gpu-count",
        # NVIDIA's sandbox device plugin (Kata GPU pass-through, P_GPU_ALIAS=pgpu)
        "nvidia.com/pgpu",
        # ... and its default names without the alias: the PCI database's device name, upper case
        # (nvidia.com/GA102GL_A10, nvidia.com/GH100_H100_SXM5_80GB, nvidia.com/TU104GL_TESLA_T4), one
        # pattern per GPU architecture's chip code; never the lower-case names of the other plugins.
        *(f"nvidia.com/{chip}*" for chip in ("GK", "GM", "GP", "GV", "TU", "GA", "AD", "GH", "GB")),
    ),
    shared=("nvidia.com/*.shared", "nvidia.com/*-shared"),
    companions=(
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "volcano.sh/gpu-mem.128Mi",
        "volcano.sh/gpu-core.percentage",
        "volcano.sh/vgpu-memory",
        "volcano.sh/vgpu-memory-percentage",
        "volcano.sh/vgpu-cores",
        "aliyun.com/gpu-mem",
        "aliyun.com/gpu-core.percentage",
    ),
    node_wide=(),
    grant_env=("NVIDIA_VISIBLE_DEVICES",),
    grant_env_prefixes=(),
    no_devices=frozenset({"", "void", "none"}),
    isolation=("NVIDIA_VISIBLE_DEVICES", "void"),
    device_nodes=("/dev/nvidia*", "/dev/nvidia-caps", "/dev/nvidia-caps-imex-channels"),
    driver_dirs=("/home/kubernetes/bin/nvidia", "/usr/local/nvidia", "/run/nvidia/driver"),
    node_labels=(
        "cloud.google.com/gke-accelerator",
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.product",
        "k8s.amazonaws.com/accelerator",
    ),
    # The NVIDIA DRA driver's classes for whole GPUs and MIG devices (its ComputeDomain classes
    # hand out IMEX channels, not GPUs).
    device_classes=("gpu.nvidia.com", "mig.nvidia.com"),
    # The GPU operator (OpenShift's OperatorHub install uses nvidia-gpu-operator), the standalone
    # device plugin, and the DRA driver (its kubelet plugin mounts /var/run/cdi).
    agent_namespaces=("gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu"),
    agent_images=("nvcr.io/nvidia/",),
    runtime_classes=("nvidia", "nvidia-legacy", "nvidia-cdi"),
    probe="nvidia-smi -L in the CUDA base image (which bakes NVIDIA_VISIBLE_DEVICES=all): the GPUs the toolkit "
    "mounted, by UUID",
)

AMD: Final = Vendor(
    key="amd",
    name="AMD",
    workload=("amd.com/gpu",),
    domains=("amd.com/",),
    # `-resource_naming_strategy mixed` names partitions <compute>_<memory> (cpx_nps4, spx_nps1).
    devices=("amd.com/gpu", "amd.com/*_nps1", "amd.com/*_nps2", "amd.com/*_nps4", "amd.com/*_nps8"),
    shared=(),
    # HAMi's AMD resources: memory and a core percentage without a count; its webhook adds one.
    companions=("amd.com/gpu-mem", "amd.com/gpu-core-pct"),
    node_wide=(),
    grant_env=("AMD_VISIBLE_DEVICES",),
    grant_env_prefixes=("DOCKER_RESOURCE_",),
    no_devices=frozenset({"", "void", "none"}),
    isolation=("AMD_VISIBLE_DEVICES", "none"),
    device_nodes=("/dev/kfd", "/dev/dri"),
    driver_dirs=(),
    node_labels=(
        "feature.node.kubernetes.io/amd-gpu",
        "amd.com/gpu.family",
        "amd.com/gpu.product-name",
        "amd.com/gpu.device-id",
    ),
    device_classes=("gpu.amd.com",),
    # The AMD GPU operator's device plugin, labeller, metrics exporter and test runner.
    agent_namespaces=("kube-amd-gpu",),
    agent_images=(
        "rocm/k8s-device-plugin",
        "rocm/k8s-node-labeller",
        "rocm/device-metrics-exporter",
        "rocm/test-runner",
        "docker.io/rocm/k8s-device-plugin",
        "docker.io/rocm/k8s-node-labeller",
        "docker.io/rocm/device-metrics-exporter",
    ),
    runtime_classes=(),
    probe=RENDER_PROBE,
)

INTEL: Final = Vendor(
    key="intel",
    name="Intel",
    workload=("gpu.intel.com/i915", "gpu.intel.com/xe"),
    domains=("gpu.intel.com/", "intel.com/gpu"),
    # intel.com/gpu: the DRA driver chart's extendedResourceName (DRA extended resources, KEP-5004).
    devices=("gpu.intel.com/i915", "gpu.intel.com/xe", "gpu.intel.com/dxg", "intel.com/gpu"),
    shared=(),
    # GPU Aware Scheduling's fractional resources (removed from the plugin in v0.34): they imply a GPU.
    companions=("gpu.intel.com/millicores", "gpu.intel.com/memory.max", "gpu.intel.com/tiles"),
    node_wide=("gpu.intel.com/monitoring", "gpu.intel.com/i915_monitoring", "gpu.intel.com/xe_monitoring"),
    grant_env=(),
    grant_env_prefixes=(),
    no_devices=frozenset(),
    isolation=None,
    device_nodes=("/dev/dri", "/dev/mei*"),
    driver_dirs=(),
    node_labels=("intel.feature.node.kubernetes.io/gpu",),
    device_classes=("gpu.intel.com", "gpu-vfio.intel.com"),
    # Intel's device plugins operator (its plugins go to kube-system, exempt already).
    agent_namespaces=("inteldeviceplugins-system",),
    agent_images=("intel/intel-gpu-plugin", "intel/intel-gpu-initcontainer", "intel/xpumanager"),
    runtime_classes=(),
    probe=RENDER_PROBE,
)

# Every vendor, NVIDIA first (its names are the top-level keys' defaults).
VENDORS: Final = (NVIDIA, AMD, INTEL)
# The vendors the config can switch (vendors.<key>.enabled).
OTHERS: Final = (AMD, INTEL)
# Resource-name prefixes of the other vendors: no plugin there answers NVIDIA's variable.
OTHER_DOMAINS: Final = tuple(d for v in OTHERS for d in v.domains)
# Their node agents' images: they reach GPUs through device files, which NVIDIA's void does not touch.
OTHER_AGENT_IMAGES: Final = tuple(i for v in OTHERS for i in v.agent_images)


def granting(name: str, vendors: tuple[Vendor, ...]) -> Vendor | None:
    """The vendor whose runtime reads env variable `name` as a device list, or None."""
    for v in vendors:
        if name in v.grant_env or (v.grant_env_prefixes and name.startswith(v.grant_env_prefixes)):
            return v
    return None


def prefix_reaches(prefix: str, vendor: Vendor) -> tuple[str, ...]:
    """The granting names (and name families, spelled `DOCKER_RESOURCE_*`) an envFrom with `prefix`
    can set for `vendor`: a key K becomes prefix+K, and keys are any printable text."""
    out = [name for name in vendor.grant_env if name.startswith(prefix)]
    out += [f"{p}*" for p in vendor.grant_env_prefixes if p.startswith(prefix) or prefix.startswith(p)]
    return tuple(out)


_HEX: Final = re.compile(r"[0-9a-fA-F]+")


def _atoi(text: str) -> int | None:
    """Go's strconv.Atoi: an optional sign, then ASCII digits only (no spaces, no "_")."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    return int(text)


def amd_grants(value: str, gpus: int = 8, unique_ids: frozenset[str] = frozenset()) -> bool:
    """Whether the AMD Container Runtime adds any GPU for `value` on a node with `gpus` GPUs whose
    unique ids (lowercase, "0x"-prefixed) are `unique_ids`: ROCm/container-toolkit's parseGPUsList,
    item by item. The admission rules do not call it (they allow only the exact literals of
    AMD.no_devices, which grant nothing here on every node); the property tests prove that."""
    if value in ("all", "All", "ALL"):
        return gpus > 0
    for item in value.split(","):
        if item.startswith(("0x", "0X")) or (len(item) > 8 and _HEX.fullmatch(item)):
            uid = item.lower()
            uid = uid if uid.startswith("0x") else "0x" + uid
            if uid in unique_ids or uid.removeprefix("0x") in unique_ids:
                return True
        elif "-" in item:
            start, _, end = item.partition("-")
            low, high = _atoi(start), _atoi(end)
            if low is not None and high is not None and 0 <= low <= high and low < gpus:
                return True
        else:
            index = _atoi(item)
            if index is not None and 0 <= index < gpus:
                return True
    return False
