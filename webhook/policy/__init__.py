"""The pure policy core: plain dicts in, verdicts and JSONPatch operations out.

`judge` answers a validating review, `mutate` a mutating one; both start from `view`,
which locates the pod spec in any supported kind. No I/O, no aiohttp, no Kubernetes
client: the server and the offline CLI call exactly these functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .objects import ESCAPE, PodView, ShapeError, build_view, group_of, template_keys, watched_in
from .patch import Op
from .registry import MUTATIONS, RULE_IDS, RULES
from .types import Mode, Policy, Verdict, Violation

__all__ = [
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
    "group_of",
    "judge",
    "mutate",
    "template_keys",
    "view",
    "violations",
]


def view(obj: Any, group: str, kind: str, policy: Policy, raw: bytes | None = None) -> PodView | None:
    """The pod spec of `obj` for a supported kind, or None for kinds we do not police.

    `raw`, the JSON `obj` was decoded from, lets the walk skip env lists that cannot hold
    a name any rule reads (see objects.watched_in).
    """
    keys = template_keys(group, kind)
    if keys is None:
        return None
    return build_view(obj, keys, policy, watched_in(raw))


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
class Patch:
    ops: list[Op] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def opted_out(pod: PodView, policy: Policy) -> bool:
    annotations = pod.metadata.get("annotations")
    return isinstance(annotations, dict) and annotations.get(policy.opt_out_annotation) == "false"


def mutate(pod: PodView, policy: Policy) -> Patch:
    """JSONPatch operations for a Pod; templates are never mutated (their pods will be)."""
    result = Patch()
    if not pod.is_pod or opted_out(pod, policy):
        return result
    for m in MUTATIONS:
        ops, warnings = m.mutate(pod, policy)
        result.ops.extend(ops)
        result.warnings.extend(warnings)
    return result


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
        rules = [t for r in RULES if policy.mode(r.id) is not Mode.OFF for t in r.triggers(policy)]
        mutations = [t for m in MUTATIONS for t in m.triggers(policy)]
        return cls(tuple(dict.fromkeys(t.encode() for t in rules)), tuple(dict.fromkeys(t.encode() for t in mutations)))

    @staticmethod
    def _may_matter(body: bytes, tokens: tuple[bytes, ...]) -> bool:
        return ESCAPE in body or any(t in body for t in tokens)

    def may_validate(self, body: bytes) -> bool:
        return self._may_matter(body, self.validate_tokens)

    def may_mutate(self, body: bytes) -> bool:
        return self._may_matter(body, self.mutate_tokens)
