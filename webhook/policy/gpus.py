"""The GPU model: does this container (pod) get a GPU, and through what?

Every rule and mutation asks here instead of reading one resource name, because real
clusters hand out GPUs in many ways (all configured in `webhook.config`, one place):

- device-plugin resources (`gpuDeviceResources`): `nvidia.com/gpu`, MIG slices
  (`nvidia.com/mig-1g.5gb`), renamed time-sliced/MPS slots (`nvidia.com/gpu.shared`), and
  DRA-backed extended resources (`deviceclass.resource.kubernetes.io/<class>`);
- companion resources that imply a GPU without a device resource (`gpuCompanionResources`:
  HAMi's `nvidia.com/gpumem`, whose webhook adds `nvidia.com/gpu: 1` later; CCE xGPU's
  `volcano.sh/gpu-mem.128Mi`);
- DRA claims (`resources.claims`): which device a claim resolves to needs the cluster. With
  the cluster view, a claim whose ResourceClaim(Template) requests only classes outside
  `gpuDeviceClasses` (a NIC, an FPGA) is not a GPU; without the view, or while the claim's
  object has not been seen, a claim holder *may* hold a GPU and is treated as one
  (conservative both ways: never voided, and a pod with claims is a GPU pod for the
  privilege and side-door rules);
- an integration: KAI Scheduler's fraction container (`integrations.kai`), which gets its GPU
  through KAI's own `NVIDIA_VISIBLE_DEVICES` from a ConfigMap.

Getting this wrong in one direction voids a GPU container (the kubelet puts pod env after the
device plugin's, so `void` wins and the container loses the GPU it was allocated); in the
other it lets a privileged GPU pod in. Both are worse than a missed warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Final

from .containers import Container, EnvVar
from .nodes import claim_classes
from .nvidia import NO_DEVICES, VISIBLE_DEVICES
from .objects import PodView
from .quantity import QuantityError, parse_quantity
from .types import ContainerKind, Policy
from .vendors import OTHER_DOMAINS, Vendor

# KAI Scheduler's pod annotations (kai-scheduler/KAI-Scheduler pkg/common/constants).
KAI_FRACTION: Final = "gpu-fraction"
KAI_MEMORY: Final = "gpu-memory"
KAI_CONTAINER: Final = "gpu-fraction-container-name"
KAI_CONFIG_MAP: Final = "runai/shared-gpu-configmap"
# GKE's NRI device injector: `devices.gke.io/container.<name>` lists device nodes for <name>.
GKE_DEVICES: Final = "devices.gke.io/container."
GPU_DEVICE_NODE: Final = re.compile(r"/dev/nvidia(\d+)\b")


@dataclass(slots=True, init=False, unsafe_hash=True)
class Source:
    """How a container gets a GPU: "resource", "companion", "claim", "kai" or "annotation" (GKE).
    (An explicit __init__, not frozen: see containers.Container.)"""

    how: str
    name: str  # the resource name, the claim name, or the KAI annotation

    def __init__(self, how: str, name: str) -> None:
        self.how = how
        self.name = name

    def __str__(self) -> str:
        if self.how == "claim":
            return f'DRA claim "{self.name}"'
        if self.how == "kai":
            return f"KAI Scheduler ({self.name} annotation)"
        if self.how == "annotation":
            return f'GKE device annotation "{self.name}"'
        return self.name


def requests_gpu(c: Container) -> bool:
    """A count above 0 of the GPU resource itself (gpuResourceName): what the CCE-era conveniences
    (LD_LIBRARY_PATH, the default GPU model) were written for."""
    return c.gpu is not None and c.gpu > 0


@lru_cache(maxsize=512)
def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    # Cached: a cluster has a handful of resource names, and fnmatch is not free.
    return any(fnmatchcase(name, p) for p in patterns)


def is_device(name: str, policy: Policy) -> bool:
    """A device-plugin resource of the GPU model (the GPU resource itself always is)."""
    return name == policy.resource_name or _matches(name, policy.device_resources)


def is_shared(name: str, policy: Policy) -> bool:
    """A time-sliced/MPS slot: the device plugin refuses more than one per container under MPS."""
    return _matches(name, policy.shared_resources)


def is_companion(name: str, policy: Policy) -> bool:
    return _matches(name, policy.companion_resources)


def _nonzero(value: object) -> bool:
    try:
        return parse_quantity(value) != 0
    except QuantityError:
        return True  # unparsable: validation reports it; never void what may be a GPU


def _resource_source(c: Container, policy: Policy) -> Source | None:
    companion: Source | None = None
    for side in [c.limits, c.requests]:
        if not side:
            continue
        for name, value in side.items():
            if "/" not in name:
                continue  # cpu, memory, hugepages-*: never a GPU (and the common case)
            if is_device(name, policy):
                if _nonzero(value):
                    return Source("resource", name)
            elif companion is None and is_companion(name, policy) and _nonzero(value):
                companion = Source("companion", name)
    return companion


def kai_pod(view: PodView, policy: Policy) -> str | None:
    """The KAI annotation of a KAI fraction pod (gpu-fraction / gpu-memory, KAI's schedulerName),
    whether or not the integration is on: such a pod asks for a share of a GPU."""
    if view.scheduler_name not in policy.kai_schedulers:
        return None
    for key in [KAI_FRACTION, KAI_MEMORY]:
        if key in view.annotations:
            return key
    return None


def kai_container(view: PodView) -> Container | None:
    """The container KAI gives the fraction to: the one its annotation names, else the first."""
    named = view.annotations.get(KAI_CONTAINER)
    for c in view.containers:
        if (c.name == named) if named else c.kind is ContainerKind.REGULAR:
            return c
    return None


def source(c: Container, view: PodView, policy: Policy) -> Source | None:
    """How `c` gets a GPU, or None: the one question every rule and mutation asks."""
    found = c.gpu_source
    if found is None:
        found = _source(c, view, policy) or False
        c.gpu_source = found
    return found or None


def _source(c: Container, view: PodView, policy: Policy) -> Source | None:
    if requests_gpu(c):
        return Source("resource", policy.resource_name)
    found = _resource_source(c, policy)
    if found is not None:
        return found
    for claim in c.claims:
        if may_be_gpu_claim(claim, view, policy):
            return Source("claim", claim)
    if view.annotations:
        gke = GKE_DEVICES + c.name
        devices = view.annotations.get(gke)
        if devices and GPU_DEVICE_NODE.search(devices):
            return Source("annotation", gke)  # gke-device-annotation checks the count
    if policy.kai:
        key = kai_pod(view, policy)
        if key is not None and kai_container(view) is c:
            return Source("kai", key)
    return None


def may_be_gpu_claim(claim: str, view: PodView, policy: Policy) -> bool:
    """Whether the pod's claim `claim` may hold a GPU: False only when the cluster view resolved
    it to device classes none of which is in gpuDeviceClasses."""
    if policy.cluster is None:
        return True
    classes = claim_classes(view, claim, policy.cluster)
    return classes is None or not classes or any(c in policy.gpu_device_classes for c in classes)


def gpu_pod(view: PodView, policy: Policy) -> bool:
    """A pod that may run with a GPU: any container with a GPU source, DRA claims on the pod, a
    KAI fraction pod, or a pod pinned to GPU nodes by a GPU node label (the accelerator label,
    or gpuNodeLabels: GKE's, the GPU operator's, EKS's)."""
    return gets_gpu(view, policy) or pinned_to_gpu_nodes(view, policy)


def gets_gpu(view: PodView, policy: Policy) -> bool:
    """The pod holds a GPU however the model knows one is got: a device or companion resource,
    a DRA claim that may be a GPU, a KAI fraction (a pod merely pinned to GPU nodes holds none)."""
    return (
        any(source(c, view, policy) is not None for c in view.containers)
        or any(may_be_gpu_claim(claim, view, policy) for claim in view.resource_claims)
        or kai_pod(view, policy) is not None
    )


def pinned_to_gpu_nodes(view: PodView, policy: Policy) -> bool:
    """nodeSelector or required node affinity on a GPU node label (the accelerator label,
    gpuNodeLabels), or a nodeSelector on a GPU machine family (gpuInstanceTypes)."""
    return (
        view.pinned_to(policy.accelerator_label)
        or any(view.pinned_to(label) for label in policy.gpu_node_labels)
        or on_gpu_instance_type(view, policy)
    )


INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"


def on_gpu_instance_type(view: PodView, policy: Policy) -> bool:
    """nodeSelector pins a GPU machine family (p4d.24xlarge, a2-highgpu-1g, Standard_NC24ads_A100_v4).
    Required node affinity on instance types is not read (only its keys are kept)."""
    selected = view.node_selector.get(INSTANCE_TYPE) if view.node_selector else None
    return isinstance(selected, str) and selected.startswith(policy.gpu_instance_types)


def resource_hint(c: Container, view: PodView, policy: Policy) -> str:
    """The resource a fix text should name: the one the container uses, else the configured one."""
    found = source(c, view, policy)
    if found is not None and found.how in ("resource", "companion"):
        return found.name
    return policy.resource_name


def pod_vendor(view: PodView, policy: Policy) -> Vendor:
    """The vendor a pod's messages should speak of: the first whose resource domain a container asks
    for, whose agent image it runs or whose node label pins it; NVIDIA when none says otherwise."""
    others = policy.vendors[1:]
    if not others:
        return policy.vendors[0]
    for vendor in others:
        for c in view.containers:
            if c.image.startswith(vendor.agent_images) or any(
                name.startswith(vendor.domains) for side in (c.limits, c.requests) for name in (side or ())
            ):
                return vendor
        if any(view.pinned_to(label) for label in vendor.node_labels):
            return vendor
    return policy.vendors[0]


def pod_resource(view: PodView, policy: Policy) -> str:
    """The GPU resource a pod-level fix names: its vendor's (gpuResourceName for NVIDIA)."""
    vendor = pod_vendor(view, policy)
    return policy.resource_name if vendor.key == "nvidia" else vendor.resource


def plugin_env_gpu(c: Container, view: PodView, policy: Policy) -> bool:
    """`c`'s GPU reaches it through a variable the node sets in its environment: a device-plugin
    resource (the plugin's Allocate answers NVIDIA_VISIBLE_DEVICES), a companion resource (HAMi's
    webhook turns it into one), or KAI's injected ConfigMap entry. A pod-env `void` would hide
    exactly these GPUs (the kubelet puts pod env after the plugin's; last wins).

    Not among them, on purpose: DRA claims and GKE's device annotations. A DRA driver delivers
    devices only through CDI, whose container edits are applied by the runtime after the pod's
    env and replace a variable of the same name (CDI's `ContainerEdits.Apply` -> runtime-tools
    `AddMultipleProcessEnv`); NVIDIA's DRA driver itself writes NVIDIA_VISIBLE_DEVICES=void into
    its CDI specs. GKE's injector adds device nodes, not the toolkit's variable. So `void` costs
    those containers nothing and keeps the image's `all` from reaching the legacy hook."""
    found = source(c, view, policy)
    if found is None or found.how not in ("resource", "companion", "kai"):
        return False
    if found.how == "companion" and view.hami_opt_out:
        return False  # HAMi's webhook, which would add the device resource, is told to skip the pod
    if found.how == "kai" or not found.name.startswith(OTHER_DOMAINS):
        return True
    return _env_resource(c, view, policy)  # another vendor's GPU: is an NVIDIA one beside it?


def _env_resource(c: Container, view: PodView, policy: Policy) -> bool:
    """`c` asks for a resource whose plugin answers NVIDIA_VISIBLE_DEVICES (a device or companion
    resource outside the other vendors' domains: their plugins answer device nodes, never NVIDIA's
    variable), or is KAI's fraction container."""
    for side in (c.limits, c.requests):
        for name, value in (side or {}).items():
            if "/" not in name or name.startswith(OTHER_DOMAINS):
                continue
            if (is_device(name, policy) or is_companion(name, policy)) and _nonzero(value):
                return True
    return policy.kai and kai_pod(view, policy) is not None and kai_container(view) is c


def grants_nothing(c: Container, name: str = VISIBLE_DEVICES, literals: frozenset[str] = NO_DEVICES) -> bool:
    """The pod's last entry for `name` (the one the kubelet keeps) is an exact no-device literal."""
    entries = c.env(name)
    return bool(entries) and not entries[-1].value_from and entries[-1].value in literals


def isolated(c: Container, view: PodView, policy: Policy) -> bool:
    """Whether isolate-non-gpu gives `c` an explicit NVIDIA_VISIBLE_DEVICES=void, appended last.

    Every container whose GPU does not come through the node's environment (plugin_env_gpu), unless
    its own last entry already grants nothing exactly. An entry that may grant devices is not
    rewritten (no-visible-devices-env denies it with its message); the appended `void` wins over
    it, over envFrom and over the image, whatever validation then says.
    """
    return policy.isolate_non_gpu and not plugin_env_gpu(c, view, policy) and not grants_nothing(c)


def vendor_gpu(c: Container, vendor: Vendor) -> bool:
    """`c` may get one of `vendor`'s GPUs: a count other than 0 of a resource in its domains (its
    device plugins' names, known or not), or any DRA claim (which driver serves it needs the
    cluster). What its isolation must never touch: a device plugin of that vendor may hand devices
    through the very variable isolation sets (GPUStack's AMD plugin answers AMD_VISIBLE_DEVICES)."""
    if c.claims:
        return True
    for side in (c.limits, c.requests):
        for name, value in (side or {}).items():
            if name.startswith(vendor.domains) and _nonzero(value):
                return True
    return False


def vendor_isolated(c: Container, vendor: Vendor) -> bool:
    """Whether isolate-non-gpu gives `c` `vendor`'s isolation entry (AMD_VISIBLE_DEVICES=none):
    the vendor's isolation is on, `c` may get none of its GPUs, and its own last entry for the
    variable is not already an exact no-device literal."""
    if vendor.isolation is None or vendor_gpu(c, vendor):
        return False
    return not grants_nothing(c, vendor.isolation[0], vendor.no_devices)


def sees_no_gpu(c: Container, view: PodView, policy: Policy) -> bool:
    """`c` gets no GPU through its environment and isolation voids it, or already did (the
    validating webhook sees the pod after the mutating one): what a GPU node agent must not
    silently suffer."""
    if plugin_env_gpu(c, view, policy):
        return False
    return grants_nothing(c) or policy.isolate_non_gpu


def kai_injected(entry: EnvVar, c: Container, view: PodView, policy: Policy) -> bool:
    """Whether `entry` is the NVIDIA_VISIBLE_DEVICES KAI's webhook gives a fraction container:
    valueFrom.configMapKeyRef, key NVIDIA_VISIBLE_DEVICES, ConfigMap `<prefix>-<index>` (`-i<index>`
    for an init container) where the prefix is KAI's runai/shared-gpu-configmap annotation.
    KAI's binder writes that ConfigMap with the devices it allocated, so only the fraction
    container of a KAI pod may carry it; any other pod copying the pattern is still denied."""
    ref = entry.config_map_key
    if not policy.kai or ref is None or ref[1] != VISIBLE_DEVICES or kai_pod(view, policy) is None:
        return False
    prefix = view.annotations.get(KAI_CONFIG_MAP)
    if not prefix or kai_container(view) is not c:
        return False
    index = f"i{c.index}" if c.kind is ContainerKind.INIT else str(c.index)
    return ref[0] == f"{prefix}-{index}"


def kai_env_from(name: str, c: Container, view: PodView, policy: Policy) -> bool:
    """Whether envFrom of ConfigMap `name` is the one KAI's webhook gives a fraction container
    (`<prefix>-<index>-evar`, beside the configMapKeyRef of kai_injected): KAI's binder writes it,
    and it is trusted exactly as far as that entry is."""
    if not policy.kai or kai_pod(view, policy) is None or kai_container(view) is not c:
        return False
    prefix = view.annotations.get(KAI_CONFIG_MAP)
    index = f"i{c.index}" if c.kind is ContainerKind.INIT else str(c.index)
    return bool(prefix) and name == f"{prefix}-{index}-evar"


def node_agent(view: PodView, policy: Policy) -> bool:
    """A GPU node agent: one copy per node (a DaemonSet's pod or template, or hostPID) that is
    there for the GPUs without asking the device plugin for any: a container image under
    nodeAgentImages, pinned to GPU nodes, or a container that asks for 0 of a GPU device resource
    (how health checkers and exporters reach every GPU: the image's NVIDIA_VISIBLE_DEVICES stands),
    or one that asks for a node-wide resource (Intel's gpu.intel.com/monitoring) and no other GPU.
    A per-node pod that gets GPUs from the device plugin is a workload. Its real fix
    for any rule is an exemption the platform grants, never one its author can take."""
    if not (view.host_pid or view.daemon):
        return False
    others = len(policy.vendors) > 1  # only the other vendors have node-wide resources
    wide = [others and node_wide(c, policy) is not None for c in view.containers]
    if any(source(c, view, policy) is not None and not w for c, w in zip(view.containers, wide, strict=True)):
        return False  # it asks the device plugin for GPUs (a node-wide resource aside): a workload
    return (
        any(wide)
        or pinned_to_gpu_nodes(view, policy)
        or any(
            c.image.startswith(policy.node_agent_images) or zero_request(c, policy) is not None for c in view.containers
        )
    )


def node_wide(c: Container, policy: Policy) -> tuple[str, str, Vendor] | None:
    """(side, resource, vendor) where `c` asks for a count other than 0 of a node-wide resource of
    a vendor that is on (Intel's gpu.intel.com/monitoring), or None."""
    for side, values in (("limits", c.limits), ("requests", c.requests)):
        for name, value in (values or {}).items():
            if "/" not in name:
                continue  # cpu, memory: the common case
            for vendor in policy.vendors:
                if name in vendor.node_wide and _nonzero(value):
                    return side, name, vendor
    return None


AGENT_LEAD: Final = "if this is a trusted GPU node agent"  # a fix that offers the exemption first
# A node agent's fix, around its exemptServiceAccounts entry and before the rule's own fix.
AGENT_EXEMPTS: Final = (
    f'{AGENT_LEAD}, the platform exempts it: "',
    '" in exemptServiceAccounts (or its namespace in exemptNamespaces); otherwise ',
)


def agent_account(view: PodView) -> str:
    """The exemptServiceAccounts entry that would exempt `view` (namespace/serviceAccount)."""
    return f"{view.namespace or '<namespace>'}/{view.service_account}"


def zero_request(c: Container, policy: Policy) -> tuple[str, str] | None:
    """(side, resource) where `c` explicitly asks for 0 of a GPU device resource, or None."""
    for side, values in (("limits", c.limits), ("requests", c.requests)):
        if not values:
            continue
        for name, value in values.items():
            if "/" in name and is_device(name, policy) and not _nonzero(value):
                return side, name
    return None


def whole(value: Decimal) -> bool:
    return value == value.to_integral_value()
