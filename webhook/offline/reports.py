"""What `gpu-policy check` prints: one result per document, as text for people, JSON for scripts,
JUnit XML for CI test reports, or SARIF 2.1.0 for code scanning (GitHub reads it).

Formats the structured `admission.Outcome`; never a wire dict (the server's answer is built
by webhook.admission.review alone).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..admission import UNPOLICED_GPU, Decision, Outcome
from ..policy import ALL_RULES, Mode, Violation
from ..policy.engine import DENY_PREFIX, WARN_PREFIX

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
    source: str = ""  # the file (or <stdin>)
    line: int = 1  # where the object starts in it
    locate: Callable[[str], int] | None = None  # a field path -> its line

    @property
    def file(self) -> str:
        return self.source or self.where.split(" (", 1)[0]

    @property
    def uri(self) -> str:
        """The file as SARIF names artifacts: relative paths as given (code scanning resolves them
        against the checkout), absolute ones as file: URIs."""
        path = Path(self.file)
        return path.as_uri() if path.is_absolute() else self.file.replace("<stdin>", "stdin")

    def line_of(self, path: str) -> int:
        return self.locate(path) if self.locate is not None and path else self.line

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
        "warnings": full_warnings(o),
        "auditAnnotations": o.audit_annotations(),
        "violations": [violation_dict(v) for v in o.violations(Mode.DENY)],
    }


def full_warnings(o: Outcome) -> list[str]:
    """The warnings as the CLI tells them: every warn-mode violation whole, with its fix. The API
    server keeps at most 256 characters of a warning and about 4 KiB of all of them, so the
    webhook cuts its own (engine.short_warning, review.cap_warnings); a terminal need not."""
    found = o.violations(Mode.WARN)
    if not found:
        return list(o.warnings)
    others = [w for w in o.warnings if not w.startswith(WARN_PREFIX)]  # notices that are not violations
    return [WARN_PREFIX + v.describe() for v in found] + others


def write_json(results: Sequence[Result], out: IO[str], strict: bool = False) -> None:
    body = {"results": [result_dict(r) for r in results], "exitCode": exit_code(results, strict)}
    json.dump(body, out, indent=2)
    out.write("\n")


def counts(results: Sequence[Result]) -> str:
    """`3 objects: 1 denied, 2 clean`, `1 object: 1 error` (an object whose fields are wrong),
    `0 objects; 1 unusable input` (a file that cannot be read, a document that is no object)."""
    tally = {"denied": 0, "warned": 0, "audited": 0, "clean": 0, "skipped": 0, "error": 0}
    unusable = 0
    for r in results:
        if r.outcome is None:
            unusable += 1  # no object was judged: a missing file is not "1 object"
            continue
        tally[_state(r)] += 1
    parts = [f"{n} {k}{'s' if k == 'error' and n != 1 else ''}" for k, n in tally.items() if n]
    objects = len(results) - unusable
    text = f"{_plural(objects, 'object')}: {', '.join(parts)}" if objects else "0 objects"
    return text + (f"; {_plural(unusable, 'unusable input')}" if unusable else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _state(r: Result) -> str:
    o = r.outcome
    if o is None or o.decision is Decision.MALFORMED:
        return "error"
    if not o.allowed:
        return "denied"
    if o.decision is Decision.SKIPPED:
        return "skipped"
    if o.warnings:
        return "warned"
    if o.audit_annotations():
        return "audited"  # recorded in the API server's audit log, told to nobody
    return "clean"


def write_text(results: Sequence[Result], out: IO[str], verbose: bool = False) -> None:
    for r in results:
        o = r.outcome
        if o is None:
            print(f"ERROR {r.where}: {r.error}", file=out)
            continue
        state = _state(r)
        if state == "error":
            print(f"ERROR {r.label}: {o.message}", file=out)
        elif state == "denied":
            # The server's message, one violation a line: `violates GPU policy: a (...), b (...)`.
            denied = o.violations(Mode.DENY)
            if not denied:  # refused for another reason (a native policy that fails): say it
                print(f"DENY  {r.label}: {o.message}", file=out)
            else:
                print(f"DENY  {r.label}: {DENY_PREFIX.strip()}", file=out)
            for v in denied:
                print(f"      - {v.describe()}", file=out)
        elif state == "skipped":
            print(f"SKIP  {r.label}: {o.reason}", file=out)
        elif state == "clean" and verbose:
            print(f"OK    {r.label}", file=out)
        for w in full_warnings(o):
            print(f"WARN  {r.label}: {w}", file=out)
        for key, value in o.audit_annotations().items():
            print(f"AUDIT {r.label}: {key}: {value}", file=out)
    print(counts(results), file=out)


def write_junit(results: Sequence[Result], out: IO[str]) -> None:
    """One testcase per object (classname: its file), as CI systems show test reports: a denial
    or unusable input fails, a skip is skipped, warnings are the case's output."""
    from xml.sax.saxutils import escape, quoteattr

    failures = sum(1 for r in results if _state(r) == "denied")
    errors = sum(1 for r in results if _state(r) == "error")
    skipped = sum(1 for r in results if _state(r) == "skipped")
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="gpu-policy check" tests="{len(results)}" failures="{failures}" errors="{errors}" '
        f'skipped="{skipped}">',
    ]
    for r in results:
        name = r.where if r.outcome is None else f"{r.where}: {r.kind} {r.namespace}/{r.name or '<no name>'}"
        lines.append(f"  <testcase classname={quoteattr(r.file)} name={quoteattr(name)}>")
        o, state = r.outcome, _state(r)
        if o is None or state == "error":
            message = r.error if o is None else o.message
            lines.append(f"    <error message={quoteattr(message)}/>")
        elif state == "denied":
            body = "\n".join(f"{v.describe()} (line {r.line_of(v.path)})" for v in o.violations(Mode.DENY))
            lines.append(f"    <failure message={quoteattr(o.message)}>{escape(body)}</failure>")
        elif state == "skipped":
            lines.append(f"    <skipped message={quoteattr(o.reason)}/>")
        if o is not None and (o.warnings or o.audit_annotations()):
            said = [f"WARN {w}" for w in full_warnings(o)]
            said += [f"AUDIT {k}: {v}" for k, v in o.audit_annotations().items()]
            lines.append(f"    <system-out>{escape(chr(10).join(said))}</system-out>")
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    out.write("\n".join(lines) + "\n")


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS = {Mode.DENY: "error", Mode.WARN: "warning", Mode.AUDIT: "note"}
INPUT_RULE = "unusable-manifest"


def write_sarif(results: Sequence[Result], out: IO[str], version: str) -> None:
    """SARIF 2.1.0: one result per violation (deny: error, warn: warning, audit: note) at its
    file, line and field path, and one per unusable document; every rule described once."""
    rules: list[dict[str, Any]] = [
        {
            "id": rule.id,
            "name": "".join(part.title() for part in rule.id.split("-")),
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.why},
            "defaultConfiguration": {"level": _LEVELS.get(getattr(rule, "default_mode", Mode.DENY), "error")},
            "helpUri": "https://github.com/gpu-policy/gpu-policy/blob/main/README.md#policy-reference",
        }
        for rule in ALL_RULES
    ]
    rules.append(
        {
            "id": INPUT_RULE,
            "name": "UnusableManifest",
            "shortDescription": {"text": "A document that is not valid YAML or JSON, not an object, or misshapen"},
            "defaultConfiguration": {"level": "error"},
        }
    )
    index: dict[str, int] = {str(rule["id"]): i for i, rule in enumerate(rules)}
    found: list[dict[str, Any]] = []
    for r in results:
        o = r.outcome
        if o is None or o.decision is Decision.MALFORMED:
            text = r.error if o is None else o.message
            found.append(_sarif_result(INPUT_RULE, index, "error", f"{r.where}: {text}", r, ""))
            continue
        for mode, level in _LEVELS.items():
            for v in o.violations(mode):
                found.append(_sarif_result(v.rule, index, level, v.describe(), r, v.path))
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpu-policy",
                        "version": version,
                        "informationUri": "https://github.com/gpu-policy/gpu-policy",
                        "rules": rules,
                    }
                },
                "results": found,
            }
        ],
    }
    json.dump(log, out, indent=2)
    out.write("\n")


def _sarif_result(rule: str, index: dict[str, int], level: str, text: str, r: Result, path: str) -> dict[str, Any]:
    where = f"{r.kind}/{r.namespace}/{r.name or '<no name>'}" if r.outcome is not None else r.where
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": r.uri},
            "region": {"startLine": r.line_of(path)},
        },
    }
    if path:
        location["logicalLocations"] = [{"fullyQualifiedName": f"{where}:{path}", "kind": "member"}]
    return {
        "ruleId": rule,
        "ruleIndex": index.get(rule, len(index) - 1),
        "level": level,
        "message": {"text": text},
        "locations": [location],
        "properties": {"document": r.where},
    }
