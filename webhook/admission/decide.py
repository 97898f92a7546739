"""From a parsed AdmissionReview request to a structured Outcome: which requests are judged, and how.

Transport-free (the server passes decoded JSON in; `respond` turns the Outcome into the wire
answer with webhook.admission.review's constructors), so the decision table below serves the
HTTPS server and the offline `check`/`mutate` commands alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ..policy import Mode, Policy, ShapeError, Verdict, Violation, engine
from ..policy.engine import clip
from .review import Request, allowed, denied

EPHEMERAL = "ephemeralcontainers"


class Decision(StrEnum):
    """What happened to a review (also the `decision` label of the metrics)."""

    ALLOWED = "allowed"  # judged or mutated, nothing to change (warnings possible)
    DENIED = "denied"  # a deny-mode violation
    PATCHED = "patched"  # allowed with a JSONPatch
    SKIPPED = "skipped"  # out of scope: operation, namespace, user, subresource or kind (Outcome.reason)
    MALFORMED = "malformed"  # the object's fields do not have the API's shape (HTTP 200, code 400)


@dataclass(slots=True, init=False)
class Outcome:
    """Everything a review decided, before any wire format: the one result type.

    Never changed once built (the SKIP_* outcomes are shared by every request); not frozen only
    because mypyc compiles an explicit __init__ to C, where a dataclass-generated one stays
    interpreted (see webhook.policy.containers.Container)."""

    decision: Decision
    verdict: Verdict
    ops: list[dict[str, Any]]
    warnings: list[str]
    # Why the object was refused: the policy's message (403) or the shape problem (400).
    message: str
    reason: str  # why it was skipped (SKIPPED): one of the constants below

    def __init__(
        self,
        decision: Decision,
        verdict: Verdict | None = None,
        ops: list[dict[str, Any]] | None = None,
        warnings: list[str] | None = None,
        message: str = "",
        reason: str = "",
    ) -> None:
        self.decision = decision
        self.verdict = Verdict() if verdict is None else verdict
        self.ops = [] if ops is None else ops
        self.warnings = [] if warnings is None else warnings
        self.message = message
        self.reason = reason

    @property
    def allowed(self) -> bool:
        return self.decision not in (Decision.DENIED, Decision.MALFORMED)

    @property
    def code(self) -> int:
        return 400 if self.decision is Decision.MALFORMED else 403

    def violations(self, mode: Mode) -> list[Violation]:
        return self.verdict.of(mode)

    def audit_annotations(self) -> dict[str, str]:
        return self.verdict.audit_annotations()

    def counted(self) -> list[tuple[str, str]]:
        """(rule, mode) per violation, for metrics. The mode as it is: a StrEnum is its value
        (`.value` would run Enum's Python-level property, once per violation). A violation rollout
        audit holds back from denying (filed under warn and audit alike: engine.file_under) is
        counted once, as HELD: what enforcing would refuse."""
        by_mode = self.verdict.by_mode
        if Mode.AUDIT not in by_mode or Mode.WARN not in by_mode:  # nothing held: the common case
            return [(v.rule, mode) for mode, found in by_mode.items() for v in found]
        return [(v.rule, HELD if held else mode) for mode, v, held in self.verdict.once()]


# The metrics' mode for a deny that rollout audit holds back (warned and audited instead).
HELD: Final = "held"


def _skipped(reason: str) -> Outcome:
    return Outcome(Decision.SKIPPED, reason=reason)


# Shared: most requests end in one of these.
SKIP_OPERATION = _skipped("operation not policed (DELETE, CONNECT)")
SKIP_NAMESPACE = _skipped("namespace exempt (exemptNamespaces)")
SKIP_USER = _skipped("user exempt (exemptUsernames)")
SKIP_SUBRESOURCE = _skipped("subresource not policed")
SKIP_KIND = _skipped("kind not policed")
SKIP_DELETING = _skipped("object being deleted")
SKIP_NOT_MUTATED = _skipped("only Pod CREATE and pods/ephemeralcontainers are mutated")
UNPOLICED_GPU = "kind not policed, but it requests GPUs"  # carries a notice naming the entry to add


def _malformed(req: Request, exc: ShapeError) -> Outcome:
    return Outcome(Decision.MALFORMED, message=f"gpu-policy cannot judge this {req.kind}: {exc.path} {exc.problem}")


def _exempt(req: Request, policy: Policy) -> Outcome | None:
    """Exempt by namespace or by the requesting user (Pod Security Admission's two request-level
    exemptions; service accounts are per pod, in engine.exempt)."""
    if req.namespace in policy.exempt_namespaces:
        return SKIP_NAMESPACE
    return SKIP_USER if req.user in policy.exempt_usernames else None


def _out_of_scope(req: Request, policy: Policy) -> Outcome | None:
    if req.operation not in ("CREATE", "UPDATE"):
        return SKIP_OPERATION  # DELETE and CONNECT carry nothing we police
    exempt = _exempt(req, policy)
    if exempt is not None:
        return exempt
    # Of the subresources only pods/ephemeralcontainers changes what we police
    # (`kubectl debug` adds containers through it); status, scale, binding... do not.
    if req.sub_resource and not (req.kind == "Pod" and req.sub_resource == EPHEMERAL):
        return SKIP_SUBRESOURCE
    return None


def _unpoliced(req: Request, policy: Policy) -> Outcome:
    """A kind the policy does not know: never a silent skip when it carries GPU requests."""
    found = engine.unpoliced_gpu_requests(req.object, policy)
    if not found:
        return SKIP_KIND
    shown = found[0] + (f" (+{len(found) - 1})" if len(found) > 1 else "")
    notice = clip(
        f"gpu-policy does not police {req.kind} ({req.group or 'core'}), which requests GPUs at {shown}; "
        f"judge it with customResources: [{{group: {req.group}, kind: {req.kind}, {_shape_of(found[0])}}}]"
    )
    return Outcome(Decision.SKIPPED, reason=UNPOLICED_GPU, warnings=[notice])


def _shape_of(path: str) -> str:
    """The customResources entry that covers a container found at `path`, in its likely shape."""
    general = re.sub(r"\[\d+\]", "[*]", path)
    template = re.fullmatch(r"(.+)\.spec\.(?:init)?[cC]ontainers\[\*\]", general)
    if template:
        return f"templates: ['{template[1]}']"
    pod_spec = re.fullmatch(r"(.+)\.(?:init)?[cC]ontainers\[\*\]", general)
    if pod_spec:
        return f"podSpecs: ['{pod_spec[1]}']"
    return f"containers: ['{general}']"


def validate(req: Request, policy: Policy) -> Outcome:
    skipped = _out_of_scope(req, policy)
    if skipped is not None:
        return skipped
    obj = req.object
    try:
        found = engine.find_violations(obj, req.group, req.kind, policy, req.namespace)
    except ShapeError as exc:
        return _malformed(req, exc)
    if found is None:
        return _unpoliced(req, policy)
    before = None
    # An UPDATE (a pod's annotations, `kubectl debug`'s ephemeral containers) is refused for what it
    # adds, not for what the running object already had (a pod from before the install, HAMi's
    # handshake its scheduler wrote).
    if req.operation == "UPDATE" and found:
        metadata = obj.get("metadata")
        if not req.sub_resource and isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
            return SKIP_DELETING  # finalizers must be removable from anything being deleted
        try:
            before = engine.find_violations(req.old_object, req.group, req.kind, policy, req.namespace)
        except ShapeError:
            before = None  # an unreadable old object grandfathers nothing
    verdict = engine.judge(found, policy, before)
    warnings = verdict.warnings()
    if not verdict.allowed:
        return Outcome(Decision.DENIED, verdict, warnings=warnings, message=verdict.message())
    return Outcome(Decision.ALLOWED, verdict, warnings=warnings)


def _ephemeral_names(old: Any) -> set[str]:
    """The ephemeral containers the old pod already had. A malformed oldObject names none: every
    ephemeral container is then judged as new (the conservative answer), never a 500."""
    spec = old.get("spec") if isinstance(old, Mapping) else None
    items = spec.get("ephemeralContainers") if isinstance(spec, Mapping) else None
    if not isinstance(items, list):
        return set()
    return {c["name"] for c in items if isinstance(c, Mapping) and isinstance(c.get("name"), str)}


def mutate(req: Request, policy: Policy) -> Outcome:
    if req.kind != "Pod" or req.group:
        return SKIP_KIND
    exempt = _exempt(req, policy)
    if exempt is not None:
        return exempt
    # Pod spec fields we touch are immutable after creation: only CREATE is mutated, plus the
    # ephemeral containers that `kubectl debug` adds through their subresource.
    ephemeral = req.operation == "UPDATE" and req.sub_resource == EPHEMERAL
    if not ephemeral and (req.operation != "CREATE" or req.sub_resource):
        return SKIP_NOT_MUTATED
    try:
        pod = engine.pod_view(req.object, policy, req.namespace)
        # Mutations shape-check the fields they read on first use (envFrom), as rules do.
        if ephemeral:
            changes = engine.mutate_new_ephemeral(pod, policy, _ephemeral_names(req.old_object))
        else:
            changes = engine.mutate(pod, policy)
    except ShapeError as exc:
        return _malformed(req, exc)
    decision = Decision.PATCHED if changes.ops else Decision.ALLOWED
    return Outcome(decision, ops=changes.ops, warnings=changes.warnings)


def respond(req: Request, outcome: Outcome) -> dict[str, Any]:
    """The AdmissionReview answer for `outcome` (review's constructors build it)."""
    audit = outcome.audit_annotations()
    if outcome.allowed:
        return allowed(req, warnings=outcome.warnings, audit=audit, patch=outcome.ops)
    return denied(req, outcome.message, code=outcome.code, warnings=outcome.warnings, audit=audit)
