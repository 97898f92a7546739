"""What a rule and a mutation are: their check or mutate function, their description, and the
triggers the chart's CEL is derived from (webhook.buildtime.generate).

Apart from webhook.policy.types (plain data) because a check reads a PodView: objects.py builds on
types.py, and this module on both, so no import runs in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from .cel import Check
from .objects import PodView
from .types import Changes, Mode, Policy, Violation


class Where(StrEnum):
    """Where in a Pod a trigger's text sits. The vocabulary is closed on purpose: the chart's CEL
    (webhook.buildtime.generate) translates every member, and tests/test_match_conditions.py proves it
    selects every pod the policy acts on."""

    EVERY_POD = "every pod"  # the rule or mutation may act on any pod
    CONTAINER_RESOURCE = "container resource"  # a key of any container's limits or requests
    # a key of any container's limits or requests matching a pattern (one "*") of the GPU model
    GPU_RESOURCE = "GPU resource"
    CONTAINER_IMAGE = "container image"  # a prefix of any container's image
    RESOURCE_CLAIMS = "resource claims"  # spec.resourceClaims (DRA)
    RUNTIME_CLASS = "runtime class"  # spec.runtimeClassName equal to the value
    # a plain GPU count key of a custom resource (the vLLM production stack's resources.gpu):
    # never in a Pod, so the chart's CEL (pods only) spells it "false"
    GPU_COUNT = "GPU count field"
    CONTAINER_ENV = "container env"  # the name of an env entry of any container
    # an env entry of that name that may grant devices: valueFrom, or a value other than exactly
    # "", "void", "none" (webhook.policy.nvidia.NO_DEVICES). So isolation's own `void` does not
    # send every pod it patched to the fail-closed validating webhook (which sees the patched pod).
    GRANTING_ENV = "granting container env"
    # the same, for every env name that starts with the text (AMD's DOCKER_RESOURCE_*)
    GRANTING_ENV_PREFIX = "granting container env prefix"
    ENV_FROM = "container envFrom"  # any container with envFrom
    CONTAINER_MOUNT = "container mount"  # a substring of any container's volumeMounts[*].mountPath
    NODE_LABEL = "node label"  # a nodeSelector key, or any required node affinity
    HOSTPATH_VOLUME = "hostPath volume"  # any volume with hostPath
    ANNOTATION = "annotation"  # a substring of a pod (template) annotation key
    PRIVILEGED = "privileged container"  # any container with securityContext.privileged true
    HOST_PID = "host PID"  # spec.hostPID true
    CAPABILITIES = "added capabilities"  # any container with securityContext.capabilities.add


@dataclass(frozen=True, slots=True)
class Trigger:
    """Something every object a rule acts on contains: literal `text`, or one of the values of
    the config key `setting` (e.g. the GPU resource name), at `where`."""

    where: Where
    text: str = ""
    setting: str = ""

    def values(self, policy: Policy) -> tuple[str, ...]:
        return policy.setting(self.setting) if self.setting else (self.text,)


EVERY_POD = (Trigger(Where.EVERY_POD),)

GPU_REQUEST = (Trigger(Where.CONTAINER_RESOURCE, setting="gpuResourceName"),)

# Any resource of the GPU model (device-plugin GPUs, MIG, shared slots, companions).
GPU_RESOURCE = (Trigger(Where.GPU_RESOURCE, setting="gpuResources"), Trigger(Where.GPU_COUNT, "gpu"))

# A GPU pod (webhook.policy.gpus.gpu_pod): a GPU resource, a DRA claim, a KAI fraction pod, or
# pinned to GPU nodes by a GPU node label (the accelerator label or gpuNodeLabels).
GPU_POD = (
    *GPU_RESOURCE,
    Trigger(Where.RESOURCE_CLAIMS, "resourceClaims"),
    Trigger(Where.ANNOTATION, "gpu-fraction"),
    Trigger(Where.ANNOTATION, "gpu-memory"),
    Trigger(Where.NODE_LABEL, setting="gpuNodeLabels"),
    Trigger(Where.NODE_LABEL, "node.kubernetes.io/instance-type"),
)

# Why a rule is not (yet) in the API server (enforcement both/native), said by each rule:
NOT_YET = (
    "CEL can carry it (a native twin may be stricter, never looser); its twin is not generated yet, so the "
    "validating webhook (failurePolicy Fail) enforces it"
)
CLUSTER_VIEW = (
    "it reads the cluster's Nodes (the cluster view); an admission policy sees only the object and its namespace"
)
CLAIM_CLASSES = (
    "it tells GPU DRA claims from others by the DeviceClasses the cluster view resolves, which an admission policy "
    "cannot read"
)
PATHS = (
    "hostPath paths are normalised as the node resolves them (`//`, `.`, `..`), which CEL's string functions cannot do "
    "exactly"
)

CheckFn = Callable[[PodView, Policy], list[Violation]]

ObjectCheckFn = Callable[[dict[str, Any], Policy], list[Violation]]

MutateFn = Callable[[PodView, Policy], Changes]


@dataclass(frozen=True, slots=True)
class NativeRule:
    """A rule's CEL twin, which the chart renders into the ValidatingAdmissionPolicy of its mode
    (one per mode and root holds every twin of that mode; webhook.buildtime.native) that the API
    server runs in-process: no replica to lose, so it holds through the webhook's outage. Written
    beside the rule it mirrors, from the same constants (webhook.policy.cel); tests/test_native.py
    proves it denies every pod the rule denies (it may deny more, never less), with the rule's
    own sentence for a pod with one finding."""

    variables: tuple[tuple[str, str], ...]  # (name, CEL), as variables.<name>
    checks: tuple[Check, ...]  # every one holds for a pod the rule lets through
    # The roots (cel.ROOTS by name) whose objects the rule judges; () for every one. ("pod",) for
    # a rule about Pods only (a template is a controller's by definition), the Job roots for one
    # about JobSpecs.
    roots: tuple[str, ...] = ()

    def judges(self, root: str) -> bool:
        return not self.roots or root in self.roots


@dataclass(frozen=True, slots=True)
class Rule:
    """A validating rule over a pod spec (of a Pod, or of any pod template)."""

    id: str
    check: CheckFn
    summary: str  # what is restricted, one line (README table, `values.yaml` comment)
    why: str  # why it matters, one or two sentences (README table)
    reads: tuple[str, ...]  # the pod fields it reads, relative to the pod spec's parent
    triggers: tuple[Trigger, ...]  # every pod it can fire on contains one of these
    example: dict[str, Any]  # a Pod it fires on; the README shows the message it gets
    default_mode: Mode = Mode.DENY
    # Node objects of the cluster the example runs against (pre-flight rules need one)
    example_nodes: tuple[dict[str, Any], ...] = ()
    # It reads namespaces from the cluster view: while it is on, the server watches them and the
    # chart grants list/watch on namespaces (webhook.buildtime.generate derives both from this flag).
    watches_namespaces: bool = False
    # Its CEL twin, or None with `webhook_only` saying why the API server cannot run it
    # (enforcement both/native): NOT_YET, CLUSTER_VIEW, ... or its own.
    native: NativeRule | None = None
    webhook_only: str = NOT_YET
    # A boolean config key (dotted, a key of SWITCHES) without which the rule never fires, whatever
    # its mode: the chart's conditions leave its triggers out while it is off, so no pod is sent
    # for nothing; its example is judged with it on.
    switch: str = ""


# Rule.switch: the config key, and the Policy field it sets.
SWITCHES: Final = {"vendors.amd.runtimeEnv": "amd_runtime_env", "nodeProfile.toolkitReadsEnv": "toolkit_reads_env"}


@dataclass(frozen=True, slots=True)
class ObjectRule:
    """A validating rule about a whole object of other kinds (not a pod spec), e.g. LimitRange."""

    id: str
    kinds: tuple[tuple[str, str, str], ...]  # (API group, kind, plural resource name)
    check: ObjectCheckFn
    summary: str
    why: str
    reads: tuple[str, ...]
    triggers: tuple[Trigger, ...]  # only the texts count for objects: Where is ignored
    example: dict[str, Any]
    default_mode: Mode = Mode.DENY
    # Its CEL twin over the object itself (`object` is the LimitRange, the claim...; `roots` is
    # unused): the chart installs one ValidatingAdmissionPolicy per object rule, on its kinds.
    native: NativeRule | None = None
    webhook_only: str = NOT_YET


@dataclass(frozen=True, slots=True)
class NativeMutation:
    """A mutation's CEL twin, which the chart renders as a MutatingAdmissionPolicy the API server
    runs in-process (webhook.buildtime.native): no replica to lose, so it holds through the
    webhook's outage. Written beside the mutation it mirrors; `@name@` marks a value the chart
    fills in from its policy values at render time (webhook.buildtime.native.VALUES), so the
    policy needs no parameter object. tests/test_native.py proves it patches every pod exactly
    as the mutation does."""

    conditions: tuple[tuple[str, str], ...]  # (name, CEL): the request is mutated when all are true
    variables: tuple[tuple[str, str], ...]  # (name, CEL), once per request, as variables.<name>
    patch: str  # CEL of the JSONPatch list


@dataclass(frozen=True, slots=True)
class Mutation:
    """A mutation of Pods: pure, idempotent, built from the fields it touches."""

    id: str
    mutate: MutateFn
    summary: str
    reads: tuple[str, ...]
    triggers: tuple[Trigger, ...]
    # The config key that switches it on (truthy), for the chart and the docs.
    switch: str
    enabled: Callable[[Policy], bool]
    # Whether the pod's opt-out annotation turns it off. Isolation says no: an annotation any
    # pod author can set must not be a way to see every GPU on the node.
    opt_out: bool = True
    # Its CEL twin, or None with `webhook_only` saying why CEL cannot carry it.
    native: NativeMutation | None = None
    webhook_only: str = ""
