"""From a parsed AdmissionReview request to a response: which requests are judged, and how.

Transport-free (the server passes decoded JSON in and serialises what comes out), so the
decision table below serves the HTTPS server and the offline `check`/`mutate` commands alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import policy, review
from .policy import Policy, ShapeError, Verdict
from .review import Request

EPHEMERAL = "ephemeralcontainers"


@dataclass(slots=True)
class Outcome:
    """The response plus what metrics want to know about it."""

    response: dict[str, Any]
    decision: str  # "allowed" | "denied" | "patched" | "skipped" | "screened" | "malformed"
    verdict: Verdict | None = None

    def counted(self) -> list[tuple[str, str]]:
        """(rule, mode) per violation, for metrics."""
        v = self.verdict
        if v is None:
            return []
        return (
            [(x.rule, "deny") for x in v.deny]
            + [(x.rule, "warn") for x in v.warn]
            + [(x.rule, "audit") for x in v.audit]
        )


def unconcerned(req: Request) -> Outcome:
    """The body mentions nothing any enabled rule or mutation acts on (policy.Screen said so)."""
    return Outcome(review.allowed(req), "screened")


def _skipped(req: Request) -> Outcome:
    return Outcome(review.allowed(req), "skipped")


def _malformed(req: Request, exc: ShapeError) -> Outcome:
    message = f"gpu-policy cannot judge this {req.kind}: {exc.path} {exc.problem}"
    return Outcome(review.denied(req, message, code=400), "malformed")


def _out_of_scope(req: Request, p: Policy) -> bool:
    if req.operation not in ("CREATE", "UPDATE"):
        return True  # DELETE and CONNECT carry nothing we police
    if req.namespace in p.exempt_namespaces:
        return True
    # Of the subresources only pods/ephemeralcontainers changes what we police
    # (`kubectl debug` adds containers through it); status, scale, binding... do not.
    return bool(req.sub_resource) and not (req.kind == "Pod" and req.sub_resource == EPHEMERAL)


def validate(req: Request, p: Policy, raw: bytes | None = None) -> Outcome:
    if _out_of_scope(req, p):
        return _skipped(req)
    obj = req.object
    try:
        found = policy.check(obj, req.group, req.kind, p, raw)
    except ShapeError as exc:
        return _malformed(req, exc)
    if found is None:
        return _skipped(req)  # a kind we do not police
    before = None
    if req.operation == "UPDATE" and not req.sub_resource and found:
        metadata = obj.get("metadata")
        if isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
            return _skipped(req)  # finalizers must be removable from anything being deleted
        try:
            before = policy.check(req.old_object, req.group, req.kind, p, raw)
        except ShapeError:
            before = None  # an unreadable old object grandfathers nothing
    verdict = policy.judge(found, p, before)
    warnings = verdict.warnings()
    audit = verdict.audit_annotations()
    if verdict.deny:
        return Outcome(review.denied(req, verdict.message(), warnings=warnings, audit=audit), "denied", verdict)
    return Outcome(review.allowed(req, warnings=warnings, audit=audit), "allowed", verdict)


def _ephemeral_names(old: Any) -> set[str]:
    spec = old.get("spec") if isinstance(old, Mapping) else None
    items = spec.get("ephemeralContainers") if isinstance(spec, Mapping) else None
    return {c["name"] for c in items or () if isinstance(c, Mapping) and isinstance(c.get("name"), str)}


def mutate(req: Request, p: Policy, raw: bytes | None = None) -> Outcome:
    if req.kind != "Pod" or req.group or req.namespace in p.exempt_namespaces:
        return _skipped(req)
    # Pod spec fields we touch are immutable after creation: only CREATE is mutated, plus the
    # ephemeral containers that `kubectl debug` adds through their subresource.
    ephemeral = req.operation == "UPDATE" and req.sub_resource == EPHEMERAL
    if not ephemeral and (req.operation != "CREATE" or req.sub_resource):
        return _skipped(req)
    try:
        pod = policy.view(req.object, "", "Pod", p, raw)
    except ShapeError as exc:
        return _malformed(req, exc)
    assert pod is not None
    if ephemeral:
        result = policy.mutate_new_ephemeral(pod, p, _ephemeral_names(req.old_object))
    else:
        result = policy.mutate(pod, p)
    if not result.ops:
        return Outcome(review.allowed(req, warnings=result.warnings), "allowed")
    return Outcome(review.allowed(req, warnings=result.warnings, patch=result.ops), "patched")
