"""The chart's native admission policies as the API server runs them, for CI: rendered by a real
helm, then compiled and evaluated by webhook.offline.native (cel-python with the Kubernetes CEL
functions the policies use, over the object as the API server's CEL sees it), the JSONPatch they
return applied with jsonpatch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chart import find, render
from webhook.offline.native import MutatingPolicy, ValidatingPolicy, environment, plain, request_of

__all__ = [
    "MutatingPolicy",
    "ValidatingPolicy",
    "compile_isolation",
    "compile_validations",
    "environment",
    "plain",
    "program",
    "request",
]


def program(env: Any, expression: str) -> Any:
    _env, functions = environment()
    return env.program(env.compile(expression), functions=functions)


def compile_isolation(values: dict[str, Any], tmp: Path) -> MutatingPolicy:
    """The chart's isolation MutatingAdmissionPolicy for these values (enforcement both, 1.36)."""
    docs = render({"enforcement": "both", **values}, kube_version="1.36.0", tmp=tmp)
    assert isinstance(docs, list)
    spec = find(docs, "MutatingAdmissionPolicy")["spec"]
    (mutation,) = spec["mutations"]
    return MutatingPolicy.compile(
        [(c["name"], c["expression"]) for c in spec["matchConditions"]],
        [(v["name"], v["expression"]) for v in spec["variables"]],
        mutation["jsonPatch"]["expression"],
    )


def compile_validations(
    values: dict[str, Any], tmp: Path, release: str = "gpu-policy", root: str = "pod"
) -> dict[str, tuple[ValidatingPolicy, list[str]]]:
    """The chart's ValidatingAdmissionPolicies for these values (enforcement both, 1.36) on one
    root (cel.ROOTS: "pod", or a template path's words), split back by rule id, each with its
    binding's validationActions. The chart installs one policy per mode and root; its annotation
    lists its rules in the order of their validations, and a rule's variables carry its scope, so
    each rule's part is its own policy here (the API server evaluates variables lazily, so the
    parts are judged exactly as the whole)."""
    from webhook.buildtime.native import SHARED, scope_of
    from webhook.policy import RULES

    docs = render({"enforcement": "both", **values}, kube_version="1.36.0", tmp=tmp)
    assert isinstance(docs, list)
    actions = {
        d["spec"]["policyName"]: d["spec"]["validationActions"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    suffix = "" if root == "pod" else f"-{root}"
    names = {f"{release}-rules-{mode}{suffix}" for mode in ("deny", "warn", "audit")}
    checks = {r.id: len(r.native.checks) for r in RULES if r.native is not None}
    out = {}
    for d in docs:
        if d["kind"] != "ValidatingAdmissionPolicy" or d["metadata"]["name"] not in names:
            continue
        name, spec = d["metadata"]["name"], d["spec"]
        conditions = [(c["name"], c["expression"]) for c in spec["matchConditions"]]
        validations = [(v["expression"], v["messageExpression"]) for v in spec["validations"]]
        for rule in d["metadata"]["annotations"]["gpu-policy.io/rules"].split(","):
            own, validations = validations[: checks[rule]], validations[checks[rule] :]
            variables = [
                (v["name"], v["expression"])
                for v in spec["variables"]
                if v["name"].startswith((scope_of(rule), SHARED))  # what it does not read is never evaluated
            ]
            out[rule] = (ValidatingPolicy.compile(rule, conditions, variables, own), actions[name])
        assert validations == [], (name, "validations left over")
    return out


def request(namespace: str = "ml", user: str = "alice", operation: str = "CREATE") -> dict[str, Any]:
    return request_of(namespace, user, operation, "ephemeralcontainers" if operation == "UPDATE" else "")


def compile_objects(values: dict[str, Any], tmp: Path) -> dict[str, tuple[ValidatingPolicy, list[str]]]:
    """The chart's ValidatingAdmissionPolicies of the object rules (enforcement both, 1.36): one per
    rule, named by its annotation, each with its binding's validationActions."""
    from webhook.policy import OBJECT_RULES

    docs = render({"enforcement": "both", **values}, kube_version="1.36.0", tmp=tmp)
    assert isinstance(docs, list)
    ids = {r.id for r in OBJECT_RULES}
    actions = {
        d["spec"]["policyName"]: d["spec"]["validationActions"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    out = {}
    for d in docs:
        rule = (d["metadata"].get("annotations") or {}).get("gpu-policy.io/rules")
        if d["kind"] != "ValidatingAdmissionPolicy" or rule not in ids:
            continue
        spec = d["spec"]
        out[rule] = (
            ValidatingPolicy.compile(
                rule,
                [(c["name"], c["expression"]) for c in spec["matchConditions"]],
                [(v["name"], v["expression"]) for v in spec["variables"]],
                [(v["expression"], v["messageExpression"]) for v in spec["validations"]],
            ),
            actions[d["metadata"]["name"]],
        )
    return out
