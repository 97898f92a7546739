"""What `gpu-policy check` prints: one result per document, as text for people or JSON for CI.

Formats the structured `admission.Outcome`; never a wire dict (the server's answer is built
by webhook.review alone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from .admission import UNPOLICED_GPU, Decision, Outcome
from .policy import Mode, Violation
from .policy.engine import DENY_PREFIX

EXIT_OK, EXIT_DENIED, EXIT_INPUT = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Result:
    """One document: where it is, what it is, and its outcome (or why it could not be read)."""

    where: str
    kind: str = ""
    namespace: str = ""
    name: str = ""
    outcome: Outcome | None = None
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.where}: {self.kind} {self.namespace}/{self.name or '<no name>'}"

    @property
    def failed(self) -> bool:
        """Unusable input: unreadable, no kind, or fields of the wrong shape."""
        return bool(self.error) or (self.outcome is not None and self.outcome.decision is Decision.MALFORMED)


def unpoliced_gpu(r: Result) -> bool:
    """A kind the policy does not police that requests GPUs (the outcome carries a notice)."""
    return r.outcome is not None and r.outcome.reason == UNPOLICED_GPU


def exit_code(results: Sequence[Result], strict: bool = False) -> int:
    """2: unusable input; 1: denied (with `strict`: also an unpoliced kind that requests GPUs)."""
    if any(r.failed for r in results):
        return EXIT_INPUT
    if any(r.outcome is not None and not r.outcome.allowed for r in results):
        return EXIT_DENIED
    if strict and any(unpoliced_gpu(r) for r in results):
        return EXIT_DENIED
    return EXIT_OK


def violation_dict(v: Violation) -> dict[str, Any]:
    return {
        "rule": v.rule,
        "container": v.container,
        "containerKind": v.container_kind,
        "path": v.path,
        "value": v.value,
        "detail": v.detail,
        "fix": v.fix,
        "text": v.describe(),
    }


def result_dict(r: Result) -> dict[str, Any]:
    if r.outcome is None:
        return {"where": r.where, "error": r.error}
    o = r.outcome
    return {
        "where": r.where,
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "decision": o.decision.value,
        "reason": o.reason or None,
        "allowed": o.allowed,
        "message": o.message or None,
        "warnings": o.warnings,
        "auditAnnotations": o.audit_annotations(),
        "violations": [violation_dict(v) for v in o.violations(Mode.DENY)],
    }


def write_json(results: Sequence[Result], out: IO[str], strict: bool = False) -> None:
    body = {"results": [result_dict(r) for r in results], "exitCode": exit_code(results, strict)}
    json.dump(body, out, indent=2)
    out.write("\n")


def write_text(results: Sequence[Result], out: IO[str]) -> None:
    counts = {"denied": 0, "warned": 0, "clean": 0, "skipped": 0, "errors": 0}
    for r in results:
        o = r.outcome
        if o is None:
            counts["errors"] += 1
            print(f"ERROR {r.where}: {r.error}", file=out)
            continue
        if o.decision is Decision.MALFORMED:
            counts["errors"] += 1
            print(f"ERROR {r.label}: {o.message}", file=out)
        elif not o.allowed:
            counts["denied"] += 1
            # The server's message, one violation a line: `violates GPU policy: a (...), b (...)`.
            print(f"DENY  {r.label}: {DENY_PREFIX.strip()}", file=out)
            for v in o.violations(Mode.DENY):
                print(f"      - {v.describe()}", file=out)
        elif o.decision is Decision.SKIPPED:
            counts["skipped"] += 1
            print(f"SKIP  {r.label}: {o.reason}", file=out)
        elif o.warnings or o.audit_annotations():
            counts["warned"] += 1
        else:
            counts["clean"] += 1
        for w in o.warnings:
            print(f"WARN  {r.label}: {w}", file=out)
        for key, value in o.audit_annotations().items():
            print(f"AUDIT {r.label}: {key}: {value}", file=out)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    print(f"{len(results)} object(s): {summary or 'none'}", file=out)
