"""Plain data shared by every rule: the policy settings, violations and verdicts.

Nothing here knows about HTTP, files or the Kubernetes client, so the server and the
offline `check` command give the same verdicts from the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .templates import Templates

if TYPE_CHECKING:
    from .objects import PodView

GPU_RESOURCE = "nvidia.com/gpu"
LD_LIBRARY_DIR = "/usr/local/nvidia/lib64"

# Kubernetes may truncate individual admission warnings past this length.
MAX_WARNING = 256


class Mode(StrEnum):
    """What a rule violation does to the request."""

    DENY = "deny"
    WARN = "warn"
    AUDIT = "audit"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Policy:
    """Every knob the rules and mutations read, resolved once at start-up."""

    modes: dict[str, Mode] = field(default_factory=dict)
    shared_gpu: bool = True
    resource_name: str = GPU_RESOURCE
    exempt_namespaces: frozenset[str] = frozenset({"kube-system"})
    # (major, minor) of the cluster, or None when unknown: unknown skips version-gated mutations.
    cluster_version: tuple[int, int] | None = None
    ld_library_path_enabled: bool = True
    ld_library_path: str = LD_LIBRARY_DIR
    ld_library_path_when_unset: str = "inject"  # "inject" | "warn"
    accelerator_label: str = "accelerator"
    accelerator_default: str | None = None
    opt_out_annotation: str = "gpu-policy.io/mutate"
    isolate_non_gpu: bool = True
    # (API group, kind) -> where its pod templates are; added to (and overriding) templates.BUILTIN.
    custom_templates: dict[tuple[str, str], Templates] = field(default_factory=dict)
    # Derived once (see __post_init__): the pod rules that are not off, in registry order.
    pod_rules: tuple[Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from .registry import RULES  # the registry imports the rules, which import this module

        object.__setattr__(self, "pod_rules", tuple(r for r in RULES if self.mode(r.id) is not Mode.OFF))

    def mode(self, rule_id: str) -> Mode:
        # `modes` is complete when built from config (rule defaults included); a bare Policy() denies.
        return self.modes.get(rule_id, Mode.DENY)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule at one field, with what was seen and how to fix it."""

    rule: str
    path: str
    detail: str
    fix: str
    container: str | None = None
    container_kind: str | None = None  # "container" | "init container" | "ephemeral container"
    value: str | None = None
    scope: str = "pod"  # what `where()` names when no container is involved

    @property
    def key(self) -> tuple[str, str, str | None]:
        # Identity across old and new objects on UPDATE (see `webhook.policy.evaluate`).
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "container": self.container,
            "containerKind": self.container_kind,
            "path": self.path,
            "value": self.value,
            "detail": self.detail,
            "fix": self.fix,
            "text": self.describe(),
        }


CheckFn = Callable[["PodView", Policy], list[Violation]]
MutateFn = Callable[["PodView", Policy], tuple[list[dict[str, Any]], list[str]]]
# Strings that any object this rule (or mutation) acts on must contain, as the API server
# serialises it. They let the server answer most non-GPU pods without walking them.
TriggersFn = Callable[[Policy], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Rule:
    """A validating rule: a stable id, a pure check and the prose the README shows."""

    id: str
    check: CheckFn
    summary: str
    triggers: TriggersFn
    default_mode: Mode = Mode.DENY


@dataclass(frozen=True, slots=True)
class Mutation:
    """A mutation: a stable id and a pure function returning JSONPatch operations and warnings."""

    id: str
    mutate: MutateFn
    triggers: TriggersFn


ObjectCheckFn = Callable[[dict[str, Any], Policy], list[Violation]]


@dataclass(frozen=True, slots=True)
class ObjectRule:
    """A validating rule about a whole object of given kinds (not a pod spec), e.g. LimitRange."""

    id: str
    kinds: frozenset[tuple[str, str]]  # (API group, kind)
    check: ObjectCheckFn
    summary: str
    triggers: TriggersFn
    default_mode: Mode = Mode.DENY


def always(_policy: Policy) -> tuple[str, ...]:
    """Trigger of what applies to every object: the empty string is in every body."""
    return ("",)


def gpu_resource(policy: Policy) -> tuple[str, ...]:
    """Trigger of everything that needs a GPU request."""
    return (policy.resource_name,)


def gpu_pod(policy: Policy) -> tuple[str, ...]:
    """Trigger of everything that needs a GPU pod: a GPU request or the accelerator label."""
    return (policy.resource_name, f'"{policy.accelerator_label}"')


DENY_PREFIX = "violates GPU policy: "
WARN_PREFIX = "would violate GPU policy: "


@dataclass(slots=True)
class Verdict:
    """Violations sorted by what their rule's mode makes of them."""

    deny: list[Violation] = field(default_factory=list)
    warn: list[Violation] = field(default_factory=list)
    audit: list[Violation] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.deny

    def message(self) -> str:
        return DENY_PREFIX + ", ".join(v.describe() for v in self.deny)

    def warnings(self) -> list[str]:
        return [short_warning(WARN_PREFIX, v) for v in self.warn]

    def audit_annotations(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for v in self.audit:
            text = v.describe(with_fix=False)
            out[v.rule] = f"{out[v.rule]}, {text}" if v.rule in out else WARN_PREFIX + text
        return out


def short_warning(prefix: str, v: Violation) -> str:
    """Keep a warning under the length Kubernetes keeps, dropping the fix before cutting."""
    text = prefix + v.describe()
    if len(text) > MAX_WARNING:
        text = prefix + v.describe(with_fix=False)
    return clip(text)


def clip(text: str, limit: int = MAX_WARNING) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
