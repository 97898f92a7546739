"""The chart's native admission policies as the API server runs them, for CI: rendered by a real
helm, compiled by cel-python with the Kubernetes CEL functions they use, evaluated over the object
as the API server's CEL sees it (typed: tests/celconditions.py), and the JSONPatch they return
applied with jsonpatch.

cel-python lacks three things Kubernetes' CEL has; they are added here and tested against the
Kubernetes CEL docs' examples in tests/test_native.py:
- `lists.range(n)` (cel-go's lists extension, version 2+; Kubernetes 1.34+): [0, 1, ..., n-1];
- `quantity(s)` and `sign(q)` (k8s.io/apiserver/pkg/cel/library/quantity.go);
- the `JSONPatch{op, path, value}` object MutatingAdmissionPolicy's JSONPatch expressions build.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy
import jsonpatch
from celpy import celtypes

from tests.celconditions import typed
from tests.chart import find, render
from webhook.policy.quantity import parse_quantity


class JSONPatch(celtypes.MessageType):
    """MutatingAdmissionPolicy's JSONPatch object type."""


class Quantity(celtypes.MessageType):
    """A resource.Quantity, by its exact value."""

    def __init__(self, value: Decimal) -> None:
        super().__init__()
        self.value = value


def _range(*args: Any) -> celtypes.ListType:
    # cel-python calls a namespaced function as a method on the namespace: (namespace, n).
    return celtypes.ListType([celtypes.IntType(i) for i in range(int(args[-1]))])


def _quantity(text: Any) -> Quantity:
    return Quantity(parse_quantity(str(text)))  # raises for what the API server's parser refuses


def _sign(q: Quantity) -> celtypes.IntType:
    return celtypes.IntType((q.value > 0) - (q.value < 0))


FUNCTIONS = {"range": _range, "quantity": _quantity, "sign": _sign}
ANNOTATIONS = {"lists.range": celtypes.FunctionType, "JSONPatch": JSONPatch}


def environment() -> celpy.Environment:
    return celpy.Environment(annotations=ANNOTATIONS)


def program(env: celpy.Environment, expression: str) -> Any:
    return env.program(env.compile(expression), functions=FUNCTIONS)


def plain(value: Any) -> Any:
    """A CEL value as JSON."""
    if isinstance(value, celtypes.MapType):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [plain(v) for v in value]
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    return value


@dataclass
class MutatingPolicy:
    """One rendered MutatingAdmissionPolicy, compiled: conditions, variables in order, patch."""

    conditions: list[tuple[str, Any]]
    variables: list[tuple[str, Any]]
    patch: Any

    def ops(self, obj: dict[str, Any], request: dict[str, Any], old: dict[str, Any] | None = None) -> list[Any] | None:
        """The JSONPatch ops for `obj`, or None when a matchCondition leaves it alone. A CEL
        error raises: with failurePolicy Fail the API server would refuse the pod."""
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(typed(obj)),
            "oldObject": celpy.json_to_cel(typed(old)) if old is not None else None,
            "request": celpy.json_to_cel(request),
        }
        for name, condition in self.conditions:
            result = condition.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise AssertionError(f"matchCondition {name} failed: {result}")
            if not result:
                return None
        variables: dict[Any, Any] = {}
        for name, expression in self.variables:
            activation["variables"] = celtypes.MapType(variables)
            result = expression.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise AssertionError(f"variable {name} failed: {result}")
            variables[celtypes.StringType(name)] = result
        activation["variables"] = celtypes.MapType(variables)
        result = self.patch.evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            raise AssertionError(f"the JSONPatch expression failed: {result}")
        return [plain(op) for op in result]

    def apply(self, obj: dict[str, Any], request: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
        ops = self.ops(obj, request, old)
        return jsonpatch.apply_patch(copy.deepcopy(obj), ops) if ops else copy.deepcopy(obj)


def compile_isolation(values: dict[str, Any], tmp: Path) -> MutatingPolicy:
    """The chart's isolation MutatingAdmissionPolicy for these values (enforcement both, 1.36)."""
    docs = render({"enforcement": "both", **values}, kube_version="1.36.0", tmp=tmp)
    assert isinstance(docs, list)
    spec = find(docs, "MutatingAdmissionPolicy")["spec"]
    env = environment()
    (mutation,) = spec["mutations"]
    return MutatingPolicy(
        conditions=[(c["name"], program(env, c["expression"])) for c in spec["matchConditions"]],
        variables=[(v["name"], program(env, v["expression"])) for v in spec["variables"]],
        patch=program(env, mutation["jsonPatch"]["expression"]),
    )


def request(namespace: str = "ml", user: str = "alice", operation: str = "CREATE") -> dict[str, Any]:
    """The `request` variable as the API server gives it to an admission policy."""
    sub = "ephemeralcontainers" if operation == "UPDATE" else ""
    return {
        "operation": operation,
        "namespace": namespace,
        "userInfo": {"username": user},
        "subResource": sub,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
    }
