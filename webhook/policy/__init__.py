"""The pure policy core: plain dicts in, verdicts and JSONPatch operations out.

`check` finds every violation in an object (its pod templates, or the object itself for
kinds such as LimitRange), `judge` sorts them by mode, `mutate` patches a Pod. No I/O, no
aiohttp, no Kubernetes client: the server and the offline CLI call exactly these functions.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .mutations import isolate_non_gpu
from .objects import ESCAPE, PodView, ShapeError, build_views, find_templates, group_of, watched_in
from .patch import Op
from .registry import ALL_RULES, DEFAULT_MODES, MUTATIONS, OBJECT_RULES_BY_KIND, RULE_IDS, RULES
from .types import Mode, Policy, Verdict, Violation

__all__ = [
    "DEFAULT_MODES",
    "RULES",
    "RULE_IDS",
    "Mode",
    "Patch",
    "PodView",
    "Policy",
    "Screen",
    "ShapeError",
    "Verdict",
    "Violation",
    "check",
    "group_of",
    "judge",
    "mutate",
    "mutate_new_ephemeral",
    "view",
    "views",
    "violations",
]


def views(obj: Any, group: str, kind: str, policy: Policy, raw: bytes | None = None) -> list[PodView] | None:
    """Every pod template in `obj` (the Pod itself for a Pod), or None for kinds without templates.

    `raw`, the JSON `obj` was decoded from, lets the walk skip env lists that cannot hold
    a name any rule reads (see objects.watched_in).
    """
    templates = find_templates(group, kind, policy)
    if templates is None:
        return None
    return build_views(obj, templates, policy, watched_in(raw))


def view(obj: Any, group: str, kind: str, policy: Policy, raw: bytes | None = None) -> PodView | None:
    """The one pod spec of a Pod or a built-in controller (convenience for single-template kinds)."""
    found = views(obj, group, kind, policy, raw)
    return found[0] if found else None


def violations(pod: PodView, policy: Policy) -> list[Violation]:
    """Every violation of every pod rule that is not off, in registry then field order."""
    out: list[Violation] = []
    for rule in policy.pod_rules:
        out.extend(rule.check(pod, policy))
    return out


def check(obj: Any, group: str, kind: str, policy: Policy, raw: bytes | None = None) -> list[Violation] | None:
    """Every violation in `obj`, or None when its kind is not policed at all."""
    object_rules = OBJECT_RULES_BY_KIND.get((group, kind))
    if object_rules is not None:
        if not isinstance(obj, dict):
            raise ShapeError("object", "must be an object")
        return [v for r in object_rules if policy.mode(r.id) is not Mode.OFF for v in r.check(obj, policy)]
    pods = views(obj, group, kind, policy, raw)
    if pods is None:
        return None
    return [v for pod in pods for v in violations(pod, policy)]


def judge(found: list[Violation], policy: Policy, before: list[Violation] | None = None) -> Verdict:
    """Sort violations by mode. With `before` (an UPDATE), judge only what the update introduces.

    A violation already present in the old object is not the update's doing: denying it
    would block unrelated changes such as removing a finalizer or scaling a Deployment
    that predates the policy.
    """
    if before:
        seen = {v.key for v in before}
        found = [v for v in found if v.key not in seen]
    verdict = Verdict()
    for v in found:
        mode = policy.mode(v.rule)
        if mode is Mode.DENY:
            verdict.deny.append(v)
        elif mode is Mode.WARN:
            verdict.warn.append(v)
        elif mode is Mode.AUDIT:
            verdict.audit.append(v)
    return verdict


@dataclass(slots=True)
class Patch:
    ops: list[Op] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def opted_out(pod: PodView, policy: Policy) -> bool:
    annotations = pod.metadata.get("annotations")
    return isinstance(annotations, dict) and annotations.get(policy.opt_out_annotation) == "false"


def mutate(pod: PodView, policy: Policy) -> Patch:
    """JSONPatch operations for a Pod; templates are never mutated (their pods will be).

    The opt-out annotation turns off the conveniences, never isolation: an annotation any
    pod author can set must not be a way to see every GPU on the node.
    """
    result = Patch()
    if not pod.is_pod:
        return result
    skip = opted_out(pod, policy)
    for m in MUTATIONS:
        if skip and m.id != isolate_non_gpu.ID:
            continue
        ops, warnings = m.mutate(pod, policy)
        result.ops.extend(ops)
        result.warnings.extend(warnings)
    return result


def mutate_new_ephemeral(pod: PodView, policy: Policy, existing: Collection[str]) -> Patch:
    """Patches for the pods/ephemeralcontainers subresource: only new ephemeral containers change."""
    return Patch(ops=isolate_non_gpu.mutate_new_ephemeral(pod, policy, existing))


@dataclass(frozen=True, slots=True)
class Screen:
    """Decides from the raw request bytes whether the policy could have anything to say.

    An object that contains none of the enabled rules' (or mutations') trigger strings cannot
    violate them, so it is allowed without being walked. Conservative by construction: any
    escape sequence sends the body down the full path.
    """

    validate_tokens: tuple[bytes, ...]
    mutate_tokens: tuple[bytes, ...]

    @classmethod
    def for_policy(cls, policy: Policy) -> Screen:
        # Registry order, first occurrence kept: the GPU resource name comes first, and most
        # bodies that concern us contain it, so the scan usually stops after one token.
        rules = [t for r in ALL_RULES if policy.mode(r.id) is not Mode.OFF for t in r.triggers(policy)]
        mutations = [
            t for m in MUTATIONS if m.id != isolate_non_gpu.ID or policy.isolate_non_gpu for t in m.triggers(policy)
        ]
        return cls(tuple(dict.fromkeys(t.encode() for t in rules)), tuple(dict.fromkeys(t.encode() for t in mutations)))

    @staticmethod
    def _may_matter(body: bytes, tokens: tuple[bytes, ...]) -> bool:
        # An empty token (a rule or mutation that applies to everything) matches any body;
        # check it before scanning.
        return b"" in tokens or ESCAPE in body or any(t in body for t in tokens)

    def may_validate(self, body: bytes) -> bool:
        return self._may_matter(body, self.validate_tokens)

    def may_mutate(self, body: bytes) -> bool:
        return self._may_matter(body, self.mutate_tokens)
