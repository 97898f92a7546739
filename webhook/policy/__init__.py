"""The pure policy core: plain dicts in, verdicts and JSONPatch operations out.

`judge` answers a validating review, `mutate` a mutating one; both start from `view`,
which locates the pod spec in any supported kind. No I/O, no aiohttp, no Kubernetes
client: the server and the offline CLI call exactly these functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .objects import PodView, ShapeError, build_view, group_of, template_keys
from .patch import Op
from .registry import MUTATIONS, RULE_IDS, RULES
from .types import Mode, Policy, Verdict, Violation

__all__ = [
    "RULES",
    "RULE_IDS",
    "Mode",
    "Mutation",
    "PodView",
    "Policy",
    "ShapeError",
    "Verdict",
    "Violation",
    "group_of",
    "judge",
    "mutate",
    "template_keys",
    "view",
    "violations",
]


def view(obj: Any, group: str, kind: str, policy: Policy) -> PodView | None:
    """The pod spec of `obj` for a supported kind, or None for kinds we do not police."""
    keys = template_keys(group, kind)
    if keys is None:
        return None
    return build_view(obj, keys, policy)


def violations(pod: PodView, policy: Policy) -> list[Violation]:
    """Every violation of every rule that is not off, in registry then field order."""
    out: list[Violation] = []
    for rule in RULES:
        if policy.mode(rule.id) is not Mode.OFF:
            out.extend(rule.check(pod, policy))
    return out


def judge(pod: PodView, policy: Policy, old: PodView | None = None) -> Verdict:
    """Sort violations by mode. With `old` (an UPDATE), judge only what the update introduces.

    A violation already present in the old object is not the update's doing: denying it
    would block unrelated changes such as removing a finalizer or scaling a Deployment
    that predates the policy.
    """
    found = violations(pod, policy)
    if old is not None and found:
        before = {v.key for v in violations(old, policy)}
        found = [v for v in found if v.key not in before]
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
class Mutation:
    ops: list[Op] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def opted_out(pod: PodView, policy: Policy) -> bool:
    annotations = pod.metadata.get("annotations")
    return isinstance(annotations, dict) and annotations.get(policy.opt_out_annotation) == "false"


def mutate(pod: PodView, policy: Policy) -> Mutation:
    """JSONPatch operations for a Pod; templates are never mutated (their pods will be)."""
    result = Mutation()
    if not pod.is_pod or opted_out(pod, policy):
        return result
    for _id, fn in MUTATIONS:
        ops, warnings = fn(pod, policy)
        result.ops.extend(ops)
        result.warnings.extend(warnings)
    return result
