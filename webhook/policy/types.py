"""Plain data shared by every rule: policy settings, triggers, violations and verdicts.

Nothing here knows about HTTP, files, the chart or the Kubernetes client, so the server and
the offline `check` command give the same verdicts from the same code. A rule or mutation is
a value (`Rule`, `ObjectRule`, `Mutation`) that says what it is (id, default mode, summary,
why, the pod fields it reads, its triggers, an example) next to its pure function; the
registry lists them, and everything else (the chart's matchConditions, the README tables,
the default config) is derived from those values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from decimal import Decimal
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .switches import RulesOn
from .vendors import Vendor

if TYPE_CHECKING:
    from .templates import Templates

# Kubernetes may truncate individual admission warnings past this length.
MAX_WARNING: Final = 256


class Mode(StrEnum):
    """What a rule violation does to the request."""

    DENY = "deny"
    WARN = "warn"
    AUDIT = "audit"
    OFF = "off"


class ContainerKind(Enum):
    """The three container lists of a pod spec: (field name, what messages call one)."""

    INIT = ("initContainers", "init container")
    REGULAR = ("containers", "container")
    EPHEMERAL = ("ephemeralContainers", "ephemeral container")

    @property
    def field(self) -> str:
        return self.value[0]

    @property
    def label(self) -> str:
        return self.value[1]


HOSTNAME: Final = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | NoExecute (PreferNoSchedule never keeps a pod off a node: not kept)


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """Nodes that are identical for scheduling a pod that does not name a node: one pool, mostly."""

    labels: Mapping[str, str]  # without kubernetes.io/hostname when it equals the node's name
    resources: Mapping[str, Decimal]  # allocatable extended resources ("/" in the name), > 0 or 0
    taints: tuple[Taint, ...]
    unschedulable: bool
    names: tuple[str, ...]

    def label(self, key: str, name: str) -> str | None:
        value = self.labels.get(key)
        if value is None and key == HOSTNAME:
            return name
        return value


class NamespaceFacts(NamedTuple):
    """What the cluster view keeps of one namespace for the access rules (webhook.policy.namespaces):
    its labels as sorted pairs (interned; equal sets share one tuple) and the value of its
    gpu-policy.io/gpu-kinds annotation ("" when absent). Nothing else: 10,000 namespaces stay small."""

    labels: tuple[tuple[str, str], ...]
    gpu_kinds: str


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the live cluster offers, as of one moment. `claims`/`claim_templates` map
    (namespace, name) to the device classes a claim requests; None when not watched (DRA off,
    or the API not served), which keeps claims conservative."""

    groups: tuple[NodeGroup, ...]
    nodes: int
    claims: Mapping[tuple[str, str], tuple[str, ...]] | None = None
    claim_templates: Mapping[tuple[str, str], tuple[str, ...]] | None = None
    # DeviceClass spec.extendedResourceName values: names the scheduler may satisfy through DRA
    # on nodes that do not advertise them, so "no node advertises it" cannot be said of them.
    # None while DeviceClasses are not known (DRA served but not synced): then no such claim is made.
    dra_extended: frozenset[str] | None = frozenset()
    # Namespace name -> what the access rules read of it, or None while namespaces are not watched
    # or not synced (gpu-namespace-allowed then fails closed; see webhook.policy.namespaces).
    namespaces: Mapping[str, NamespaceFacts] | None = None
    # answers computed from this view (label values, node matches of one placement): they stay
    # valid exactly as long as the view, which is replaced whole on every change
    memo: dict[Any, Any] = dataclass_field(default_factory=dict, compare=False, repr=False)

    def label_values(self, key: str) -> frozenset[str]:
        """Every value of node label `key` (memoised: the view is immutable)."""
        found = self.memo.get(("label", key))
        if found is None:
            if key == HOSTNAME:  # kept per group only where it differs from the node's name
                found = frozenset(v for g in self.groups for n in g.names if (v := g.label(key, n)) is not None)
            else:
                found = frozenset(g.labels[key] for g in self.groups if key in g.labels)
            self.remember(("label", key), found)
        return found

    def remember(self, key: Any, value: Any) -> None:
        """Memoise `value` for this view; bounded, since pods bring keys (their selectors)."""
        if len(self.memo) >= 4096:
            self.memo.clear()
        self.memo[key] = value

    def advertised(self) -> set[str]:
        """Every extended resource some node has allocatable of."""
        return {r for g in self.groups for r, v in g.resources.items() if v > 0}


@dataclass(frozen=True, slots=True)
class Plan:
    """What a policy runs, resolved once when the Policy is built instead of once per request."""

    on: RulesOn  # the pod rules that run (registry.check_pod tests them by name)
    # The mutations by their place in registry.MUTATIONS (plain data: this module, which every
    # rule and mutation imports, imports none of them).
    mutations: tuple[int, ...]  # the mutations that are switched on, in order
    mutations_without_opt_out: tuple[int, ...]  # those of them the opt-out annotation keeps


@dataclass(frozen=True, slots=True)
class Policy:
    """Every knob the rules and mutations read, resolved once (webhook.config builds it).

    No defaults on purpose: the shipped defaults live in one place (webhook.config), so a
    Policy in a test is the policy that ships unless the test says otherwise.
    """

    modes: Mapping[str, Mode]
    # rollout audit: the rules configured to deny, here in modes as WARN; each of their violations
    # is also recorded as an audit annotation (engine.judge), so a platform sees what enforcing
    # would refuse before anything is refused.
    audited: frozenset[str]
    shared_gpu: bool
    # The GPU nodes' NVIDIA runtime reads device requests from a container's env (nodeProfile).
    toolkit_reads_env: bool
    resource_name: str
    # The GPU model (webhook.policy.gpus reads it; nothing else should): device-plugin resources
    # that are GPUs (names, or fnmatch patterns with one "*"), which of them are time-sliced/MPS
    # slots (at most 1 per container), and resources that imply a GPU without one (HAMi, xGPU).
    device_resources: tuple[str, ...]
    shared_resources: tuple[str, ...]
    companion_resources: tuple[str, ...]
    # The vendors whose names are in the lists above (NVIDIA always, first; then those switched on
    # in vendors.<key>.enabled): the rules read their granting variables and messages from these.
    vendors: tuple[Vendor, ...]
    # isolate-non-gpu also gives AMD_VISIBLE_DEVICES=none (vendors.amd.runtimeEnv, AMD on).
    amd_runtime_env: bool
    # Integrations with GPU-sharing schedulers (off by default).
    kai: bool
    kai_schedulers: frozenset[str]
    hami: bool
    xgpu: bool
    # Exemptions, PSA-style: set by the platform in config, never by a pod author.
    exempt_namespaces: frozenset[str]
    exempt_service_accounts: frozenset[str]  # "namespace/name"
    exempt_usernames: frozenset[str]
    exceptions: tuple[PolicyException, ...]  # named rules excused per namespace, until a date
    node_agent_images: tuple[str, ...]  # image prefixes of GPU node agents
    gpu_node_labels: tuple[str, ...]  # node labels of GPU nodes, besides accelerator_label
    gpu_runtime_classes: frozenset[str]  # runtime classes that give a pod every GPU
    gpu_instance_types: tuple[str, ...]  # instance-type label value prefixes of GPU machines
    # (major, minor) of the cluster, or None when unknown: unknown skips version-gated mutations.
    cluster_version: tuple[int, int] | None
    ld_library_path_enabled: bool
    ld_library_path: str
    ld_library_path_when_unset: str  # "inject" | "warn"
    accelerator_label: str
    accelerator_default: str | None
    opt_out_annotation: str
    isolate_non_gpu: bool
    # (API group, kind) -> where its pod templates are; added to (and overriding) templates.BUILTIN.
    custom_templates: Mapping[tuple[str, str], Templates]
    # DRA device classes that are GPUs: a claim resolved to any of them holds a GPU.
    gpu_device_classes: frozenset[str]
    # Who may use GPUs, and how many (rules off by default): devices per pod; the controllers
    # (ownerReferences kinds) that may own a GPU pod.
    gpu_max_per_pod: int
    gpu_controller_kinds: frozenset[str]
    # gpu-namespace-allowed: namespaces that may run GPU pods by name, or by their labels
    # (a label selector: matchLabels pairs and matchExpressions as (key, operator, values)).
    gpu_namespaces: frozenset[str]
    gpu_namespace_labels: tuple[tuple[str, str], ...]
    gpu_namespace_expressions: tuple[tuple[str, str, tuple[str, ...]], ...]
    # gpu-kinds-allowed: the GPU kinds a pod may use where its namespace does not say otherwise
    # (patterns: whole, shared, time-sliced, mig:<profile glob>, dra:<device class glob>).
    gpu_kinds_allowed: tuple[str, ...]
    # dra-admin-access: namespaces where DRA claims may ask for adminAccess (empty: none listed).
    dra_admin_namespaces: frozenset[str]
    # The live cluster (webhook.cluster.view), or None: not watched, or not synced yet. The
    # pre-flight rules say nothing without it; never deny on missing data.
    cluster: ClusterView | None
    # What this policy runs (webhook.policy.engine.plan): derived from the fields above on first
    # use and kept with the policy it belongs to. dataclasses.replace does not copy an init=False
    # field, so a changed policy starts without one and derives its own: never out of step.
    plan: Plan | None = dataclass_field(default=None, init=False, repr=False, compare=False)

    def mode(self, rule_id: str) -> Mode:
        # `modes` is complete when built from config; an id it lacks is judged strictly.
        return self.modes.get(rule_id, Mode.DENY)

    def setting(self, key: str) -> tuple[str, ...]:
        """The value(s) of a config key a trigger names (see Trigger.setting)."""
        if key == "gpuResourceName":
            return (self.resource_name,)
        if key == "gpuResources":  # every resource the GPU model counts (webhook.policy.gpus)
            return (self.resource_name, *self.device_resources, *self.companion_resources)
        if key == "acceleratorNodeSelector.labelKey":
            return (self.accelerator_label,)
        if key == "gpuNodeLabels":  # every label that pins a pod to GPU nodes
            return (self.accelerator_label, *self.gpu_node_labels)
        if key == "gpuRuntimeClasses":
            return tuple(sorted(self.gpu_runtime_classes))
        if key == "nodeAgentImages":
            return self.node_agent_images
        raise KeyError(key)


@dataclass(frozen=True, slots=True)
class PolicyException:
    """Named rules not applied in one namespace (to the pods with every pod_labels pair) through
    `expires`, a UTC date: an exception with an owner and an end (config `exceptions`). After the
    date it stops applying, and the message of what it excused says so (engine.excepted)."""

    name: str
    namespace: str
    rules: frozenset[str]
    owner: str
    reason: str
    expires: str  # "YYYY-MM-DD": the last day it applies
    pod_labels: tuple[tuple[str, str], ...] = ()

    def covers(self, rule: str, namespace: str, labels: Mapping[str, str]) -> bool:
        return (
            rule in self.rules and namespace == self.namespace and all(labels.get(k) == v for k, v in self.pod_labels)
        )


# Violation and Changes are built on every request: an explicit __init__ is compiled to C by
# mypyc, where the dataclass-generated one stays interpreted (see containers.Container). Not frozen
# for that reason (an explicit __init__ cannot set frozen fields); nothing changes one after it is
# built, and Violation keeps a hash (unsafe_hash) for sets and dict keys.
@dataclass(slots=True, init=False, unsafe_hash=True)
class Violation:
    """One broken rule at one field, with what was seen and how to fix it."""

    rule: str
    path: str
    detail: str
    fix: str
    container: str | None
    container_kind: str | None  # ContainerKind.label
    value: str | None
    scope: str  # what `where()` names when no container is involved

    def __init__(
        self,
        rule: str,
        path: str,
        detail: str,
        fix: str,
        container: str | None = None,
        container_kind: str | None = None,
        value: str | None = None,
        scope: str = "pod",
    ) -> None:
        self.rule = rule
        self.path = path
        self.detail = detail
        self.fix = fix
        self.container = container
        self.container_kind = container_kind
        self.value = value
        self.scope = scope

    @property
    def key(self) -> tuple[str, str, str | None]:
        # Identity across old and new objects on UPDATE (see engine.judge).
        return (self.rule, self.path, self.value)

    def where(self) -> str:
        if self.container_kind is None:
            return self.scope
        return f'{self.container_kind} "{self.container}"'

    def describe(self, *, with_fix: bool = True) -> str:
        """The fixed sentence shape every message uses: `rule (where: path detail; fix: ...)`."""
        text = f"{self.rule} ({self.where()}: {self.path} {self.detail}"
        if with_fix:
            text += f"; fix: {self.fix}"
        return text + ")"


@dataclass(slots=True, init=False)
class Changes:
    """What a mutation does to a Pod: JSONPatch operations and the warnings that say so."""

    ops: list[dict[str, Any]]
    warnings: list[str]

    def __init__(self, ops: list[dict[str, Any]], warnings: list[str]) -> None:
        self.ops = ops
        self.warnings = warnings


# What most mutations return for most pods: one shared value, read only (engine.mutate copies).
NO_CHANGES: Final = Changes([], [])
