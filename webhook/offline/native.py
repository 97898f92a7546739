"""The native admission policies, evaluated offline: `gpu-policy mutate --engine cel` patches a
manifest exactly as the API server's MutatingAdmissionPolicy would (enforcement both or native).

The CEL is each mutation's twin (webhook.policy.rule.NativeMutation) with its `@name@` values
filled in from the policy, as the chart fills them in from its values at render time
(webhook/buildtime/native.py; tests/test_native.py checks both ways agree and match the webhook).
cel-python evaluates it, with what Kubernetes' CEL has and cel-python lacks:
- `lists.range(n)` (cel-go's lists extension, version 2+, enabled from Kubernetes 1.34);
- `quantity(s)`, `isQuantity(s)`, `sign(q)`, `q.compareTo(q2)`, `q.isInteger()`, `q.asInteger()` and
  `q.asApproximateFloat()` (k8s.io/apiserver/pkg/cel/library/quantity.go);
- `list.sum()` and `list.max()` (k8s.io/apiserver/pkg/cel/library/lists.go);
- `list.join(separator)` and `s.substring(start[, end])` (cel-go's strings extension, in every
  Kubernetes CEL environment);
- the `JSONPatch{op, path, value}` objects a JSONPatch mutation builds.
The object is shown to CEL as the API server shows it: decoded into typed structs first
(`typed`). cel-python is optional (`pip install 'gpu-policy[cel]'`): only this command needs it.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final

from ..admission import Outcome
from ..admission.review import Request
from ..policy import Mode, Policy, Violation
from ..policy.cel import EXEMPTIONS, NO_CLAIMS, NOT_DELETING, REQUEST_EXEMPTIONS, ROOTS, exception_guard, rooted
from ..policy.engine import DENY_PREFIX, WARN_PREFIX, file_under, today
from ..policy.quantity import QuantityError, parse_quantity
from ..policy.rule import NativeMutation, ObjectRule, Rule
from ..policy.rules.gpu_namespace_allowed import wanted
from ..policy.vendors import AMD, INTEL


class CelMissing(RuntimeError):
    """cel-python is not installed."""


def _names(names: Iterable[str]) -> list[list[str]]:
    """Resource names as the twins match them: [prefix, suffix, "*"] or [name, "", "="]."""
    out = []
    for name in dict.fromkeys(names):
        head, star, tail = name.partition("*")
        out.append([head, tail, "*"] if star else [name, "", "="])
    return out


# Each @name@ of a twin, from the policy (the chart's Helm for the same names: buildtime/native.VALUES).
VALUES: Final[dict[str, Callable[[Policy], str]]] = {
    "devices": lambda p: json.dumps(_names((p.resource_name, *p.device_resources))),
    "companions": lambda p: json.dumps(_names(p.companion_resources)),
    "shared": lambda p: json.dumps(_names(p.shared_resources)),
    "nodeLabels": lambda p: json.dumps(list(dict.fromkeys((p.accelerator_label, *p.gpu_node_labels)))),
    "instanceTypes": lambda p: json.dumps(list(p.gpu_instance_types)),
    "controllerKinds": lambda p: json.dumps(sorted(p.gpu_controller_kinds)),
    "intel": lambda p: "true" if INTEL in p.vendors else "false",
    "agentImages": lambda p: json.dumps(list(p.node_agent_images)),
    "runtimeClasses": lambda p: json.dumps(sorted(p.gpu_runtime_classes)),
    "nodeWide": lambda p: json.dumps([n for v in p.vendors for n in v.node_wide] if len(p.vendors) > 1 else []),
    "kai": lambda p: "true" if p.kai else "false",
    "maxPerPod": lambda p: str(p.gpu_max_per_pod),
    "isolate": lambda p: "true" if p.isolate_non_gpu else "false",
    "amdRuntime": lambda p: "true" if p.amd_runtime_env else "false",
    "kaiSchedulers": lambda p: json.dumps(sorted(p.kai_schedulers)),
    "exemptNamespaces": lambda p: json.dumps(sorted(p.exempt_namespaces)),
    "exemptUsernames": lambda p: json.dumps(sorted(p.exempt_usernames)),
    "exemptServiceAccounts": lambda p: json.dumps(sorted(p.exempt_service_accounts)),
    "amd": lambda p: "true" if AMD in p.vendors else "false",
    "resourceName": lambda p: p.resource_name,
    "gpuNamespaces": lambda p: json.dumps(sorted(p.gpu_namespaces)),
    "nsLabels": lambda p: json.dumps(dict(p.gpu_namespace_labels)),
    "nsExpressions": lambda p: json.dumps(
        [[[k, op], list(values) or [""]] for k, op, values in p.gpu_namespace_expressions]
    ),
    "nsWanted": lambda p: json.dumps(wanted(p)),
    "draAdminNamespaces": lambda p: json.dumps(sorted(p.dra_admin_namespaces)),
    "sharedGpu": lambda p: "true" if p.shared_gpu else "false",
    "toolkitEnv": lambda p: "true" if p.toolkit_reads_env else "false",
    "hami": lambda p: "true" if p.hami else "false",
    "xgpu": lambda p: "true" if p.xgpu else "false",
    "prefix": lambda p: json.dumps(DENY_PREFIX),  # a rule's mode decides it: render(mode=...)
}
_PLACEHOLDER: Final = re.compile(r"@(\w+)@")


def render(cel: str, policy: Policy, mode: Mode = Mode.DENY) -> str:
    """The twin's CEL with its values filled in; `mode` is the rule's (its message's first words)."""
    if mode is not Mode.DENY:
        cel = cel.replace("@prefix@", json.dumps(WARN_PREFIX))
    return _PLACEHOLDER.sub(lambda m: VALUES[m[1]](policy), cel)


# Go maps among the fields CEL reads: a null value there decodes to the zero value, key kept.
MAPS: Final = {"nodeSelector": "", "annotations": "", "labels": "", "limits": 0, "requests": 0}


def typed(value: Any, zero: Any = None) -> Any:
    """The object as the API server's CEL sees it: decoded into typed structs first, so a JSON
    null is an unset (omitted) field, or a zero value in a map, never a null that `has()` would
    report as present; EnvVar.value is `omitempty`, so an empty value is absent."""
    if isinstance(value, dict):
        if zero is not None:
            return {k: zero if v is None else v for k, v in value.items()}
        return {k: typed(v, MAPS.get(k)) for k, v in value.items() if v is not None and not (k == "value" and v == "")}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return value


def _celpy() -> Any:
    try:
        import celpy
    except ImportError as exc:
        raise CelMissing("--engine cel needs cel-python: pip install 'gpu-policy[cel]'") from exc
    logging.getLogger("celpy").setLevel(logging.WARNING)  # it logs every object it builds at INFO
    # Its evaluator recurses once per node of the parse tree, and a twin nests deeply (a ternary
    # per container list, && chains per resource side): Python's default 1000 frames can run out
    # inside a deep caller (a Hypothesis test did, now and then).
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    _short_circuit(celpy)
    return celpy


def _short_circuit(celpy: Any) -> None:
    """Make cel-python's `&&` and `||` stop at a decisive left operand, as cel-go does: cel-python
    evaluates both sides always (a twin's guarded right side, every container's filter, ran for
    every pod: most of the time the tests spent). The result is CEL's either way: `false && x` is
    false and `true || x` is true whatever x is, an error included; any other left operand is
    combined with the right one by cel-python's own function, errors absorbed as before."""
    from celpy import celtypes
    from celpy.evaluation import CELEvalError, Evaluator

    if getattr(Evaluator, "_gpu_policy_short_circuit", False):
        return

    def logical(op: str, decisive: bool) -> Callable[[Any, Any], Any]:
        def evaluate(self: Any, tree: Any) -> Any:
            if len(tree.children) != 2:
                return self.visit_children(tree)[0]
            left = self.visit(tree.children[0])
            if isinstance(left, celtypes.BoolType) and bool(left) is decisive:
                return left
            right = self.visit(tree.children[1])
            try:
                return self.activation.resolve_function(op)(left, right)
            except TypeError as ex:
                value = CELEvalError(f"found no matching overload for {op}", ex.__class__, ex.args, tree=tree)
                value.__cause__ = ex
                return value

        return evaluate

    setattr(Evaluator, "conditionalor", logical("_||_", True))  # noqa: B010 (a method replaced on purpose)
    setattr(Evaluator, "conditionaland", logical("_&&_", False))  # noqa: B010
    setattr(Evaluator, "_gpu_policy_short_circuit", True)  # noqa: B010


def environment() -> tuple[Any, dict[str, Any]]:
    """A cel-python environment with Kubernetes' additions, and the functions to run programs with."""
    celpy = _celpy()
    from celpy import celtypes

    class JSONPatch(celtypes.MessageType):
        """A JSONPatch mutation's op."""

    class Quantity(celtypes.MessageType):
        """A resource.Quantity, by its exact value."""

        def __init__(self, value: Decimal) -> None:
            super().__init__()
            self.value = value

    def lists_range(*args: Any) -> Any:
        # cel-python calls a namespaced function as a method of its namespace: (namespace, n).
        return celtypes.ListType([celtypes.IntType(i) for i in range(int(args[-1]))])

    def quantity(text: Any) -> Quantity:
        return Quantity(parse_quantity(str(text)))  # raises for what the API server's parser refuses

    def is_quantity(text: Any) -> Any:
        try:
            parse_quantity(str(text))
        except QuantityError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    def sign(q: Quantity) -> Any:
        return celtypes.IntType((q.value > 0) - (q.value < 0))

    def is_integer(q: Quantity) -> Any:
        # resource.Quantity.AsInt64: a whole number that fits an int64.
        return celtypes.BoolType(q.value == q.value.to_integral_value() and -(2**63) <= q.value < 2**63)

    def as_integer(q: Quantity) -> Any:
        if not is_integer(q):
            raise ValueError("cannot convert value to integer")
        return celtypes.IntType(int(q.value))

    def as_float(q: Quantity) -> Any:
        return celtypes.DoubleType(float(q.value))

    def list_sum(items: Any) -> Any:
        return celtypes.IntType(sum(int(i) for i in items))

    def list_max(items: Any) -> Any:
        if not items:
            raise ValueError("max of an empty list")
        return max(items)

    def join(items: Any, separator: Any) -> Any:
        return celtypes.StringType(str(separator).join(str(i) for i in items))

    def substring(text: Any, start: Any, end: Any = None) -> Any:
        # cel-go's strings extension: code point offsets, an error outside the string or when end < start.
        value = str(text)
        stop = len(value) if end is None else int(end)
        if not 0 <= int(start) <= stop <= len(value):
            raise ValueError(f"index out of range: {int(start)}, {stop}")
        return celtypes.StringType(value[int(start) : stop])

    def compare_to(q: Quantity, other: Quantity) -> Any:
        return celtypes.IntType((q.value > other.value) - (q.value < other.value))

    env = celpy.Environment(annotations={"lists.range": celtypes.FunctionType, "JSONPatch": JSONPatch})
    return env, {
        "range": lists_range,
        "quantity": quantity,
        "isQuantity": is_quantity,
        "sign": sign,
        "compareTo": compare_to,
        "join": join,
        "substring": substring,
        "isInteger": is_integer,
        "asInteger": as_integer,
        "asApproximateFloat": as_float,
        "sum": list_sum,
        "max": list_max,
    }


def plain(value: Any) -> Any:
    """A CEL value as JSON."""
    from celpy import celtypes

    if isinstance(value, dict):  # maps, and message objects (JSONPatch) alike
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    return value


class CelFailed(RuntimeError):
    """An expression failed: the API server, with failurePolicy Fail, would refuse the object."""


@dataclass
class MutatingPolicy:
    """One MutatingAdmissionPolicy, compiled: its conditions, its variables in order, its patch."""

    conditions: list[tuple[str, Any]]
    variables: list[tuple[str, Any]]
    patch: Any

    @classmethod
    def compile(cls, conditions: list[tuple[str, str]], variables: list[tuple[str, str]], patch: str) -> MutatingPolicy:
        env, functions = environment()

        def program(cel: str) -> Any:
            return env.program(env.compile(cel), functions=functions)

        return cls([(n, program(c)) for n, c in conditions], [(n, program(c)) for n, c in variables], program(patch))

    @classmethod
    def of(cls, twin: NativeMutation, policy: Policy) -> MutatingPolicy:
        return cls.compile(
            [(n, render(c, policy)) for n, c in (*EXEMPTIONS, *twin.conditions)],
            [(n, render(c, policy)) for n, c in twin.variables],
            render(twin.patch, policy),
        )

    def ops(self, obj: dict[str, Any], request: dict[str, Any], old: dict[str, Any] | None = None) -> list[Any] | None:
        """The JSONPatch ops for `obj`, or None when a matchCondition leaves it alone."""
        celpy = _celpy()

        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(typed(obj)),
            "oldObject": celpy.json_to_cel(typed(old)) if old is not None else None,
            "request": celpy.json_to_cel(request),
        }
        for name, condition in self.conditions:
            result = condition.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise CelFailed(f"matchCondition {name}: {result}")
            if not result:
                return None
        activation["variables"] = _lazy(self.variables, activation)
        try:  # a failed variable it reads is raised, not returned
            result = self.patch.evaluate(activation)
        except celpy.CELEvalError as exc:
            result = exc
        if isinstance(result, celpy.CELEvalError):
            raise CelFailed(f"the JSONPatch expression: {result}")
        return [plain(op) for op in result]

    def apply(self, obj: dict[str, Any], request: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
        import jsonpatch

        ops = self.ops(obj, request, old)
        return jsonpatch.apply_patch(copy.deepcopy(obj), ops) if ops else copy.deepcopy(obj)


def _lazy(variables: list[tuple[str, Any]], activation: dict[str, Any]) -> Any:
    """`variables` as the API server composes them: each evaluated the first time an expression
    reads it, then kept; an error is the value of the expression that reads it, nothing else."""
    celpy = _celpy()
    from celpy import celtypes

    compiled = dict(variables)

    class Variables(celtypes.MapType):
        def __getitem__(self, key: Any) -> Any:
            if not dict.__contains__(self, key):
                if str(key) not in compiled:
                    raise KeyError(key)
                try:
                    value = compiled[str(key)].evaluate(activation)
                except celpy.CELEvalError as exc:
                    value = exc
                dict.__setitem__(self, key, value)
            return dict.__getitem__(self, key)

    return Variables()


def _program() -> Callable[[str], Any]:
    return _compiled


@lru_cache(maxsize=8192)
def _compiled(cel: str) -> Any:
    """One program per CEL text: parsing is most of what compiling costs cel-python, and the
    policies of two configs share nearly every expression. A program keeps no state between
    evaluations (each gets its activation), so one serves every policy holding the text."""
    env, functions = _environment()
    return env.program(env.compile(cel), functions=functions)


@lru_cache(maxsize=1)
def _environment() -> tuple[Any, dict[str, Any]]:
    return environment()


def namespace_object(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """`namespaceObject` as the API server gives it: the Namespace, whose labels always hold its name."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
    }


def _activation(
    obj: dict[str, Any], request: dict[str, Any], old: dict[str, Any] | None, namespace: dict[str, Any] | None = None
) -> dict[str, Any]:
    celpy = _celpy()
    return {
        "object": celpy.json_to_cel(typed(obj)),
        "oldObject": celpy.json_to_cel(typed(old)) if old is not None else None,
        "request": celpy.json_to_cel(request),
        "namespaceObject": celpy.json_to_cel(namespace or namespace_object(str(request.get("namespace", "")))),
    }


@dataclass
class ValidatingPolicy:
    """One ValidatingAdmissionPolicy, compiled: its conditions, variables and validations
    (expression, messageExpression)."""

    name: str
    conditions: list[tuple[str, Any]]
    variables: list[tuple[str, Any]]
    validations: list[tuple[Any, Any]]

    @classmethod
    def compile(
        cls,
        name: str,
        conditions: list[tuple[str, str]],
        variables: list[tuple[str, str]],
        validations: list[tuple[str, str]],
    ) -> ValidatingPolicy:
        program = _program()
        return cls(
            name,
            [(n, program(c)) for n, c in conditions],
            [(n, program(c)) for n, c in variables],
            [(program(e), program(m)) for e, m in validations],
        )

    @classmethod
    def of_object(cls, rule: ObjectRule, policy: Policy) -> ValidatingPolicy:
        """An object rule's own policy (LimitRanges, ResourceQuotas, DRA claims): the request-level
        exemptions, a deleting object let go, the twin over the object itself."""
        assert rule.native is not None
        mode = policy.mode(rule.id)
        return cls.compile(
            rule.id,
            [(n, render(c, policy, mode)) for n, c in (*REQUEST_EXEMPTIONS, NOT_DELETING)],
            [(n, render(c, policy, mode)) for n, c in rule.native.variables],
            [(render(c.expression, policy, mode), render(c.message, policy, mode)) for c in rule.native.checks],
        )

    @classmethod
    def of(cls, rule: Rule, policy: Policy) -> ValidatingPolicy:
        """The rule's policy on Pods (the one `check --engine cel` runs: a template's verdict is
        the workloads webhook's, which its policies agree with: tests/test_native_rules.py)."""
        assert rule.native is not None
        mode, pod = policy.mode(rule.id), ROOTS[0]

        def cel(text: str) -> str:
            return render(rooted(text, pod), policy, mode)

        guard = exception_guard(rule.id, policy.exceptions, "object.metadata", today())
        return cls.compile(
            rule.id,
            [(n, cel(c)) for n, c in (*EXEMPTIONS, NO_CLAIMS)],
            [(n, cel(c)) for n, c in rule.native.variables],
            [
                (f"{guard}({cel(c.expression)})" if guard else cel(c.expression), cel(c.message))
                for c in rule.native.checks
            ],
        )

    def failures(
        self,
        obj: dict[str, Any],
        request: dict[str, Any],
        old: dict[str, Any] | None = None,
        namespace: dict[str, Any] | None = None,
    ) -> list[str]:
        """The messages of the validations `obj` fails, in order (the API server reports the first);
        none when a matchCondition leaves it alone. Variables are evaluated as the API server
        evaluates them, lazily: one that fails only matters where a validation reads it.
        `namespace` is namespaceObject (default: the request's namespace, no labels of its own)."""
        celpy = _celpy()

        activation = _activation(obj, request, old, namespace)
        for name, condition in self.conditions:
            result = condition.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise CelFailed(f"{self.name}: matchCondition {name}: {result}")
            if not result:
                return []
        activation["variables"] = _lazy(self.variables, activation)
        out = []
        for expression, message in self.validations:
            try:
                passed = expression.evaluate(activation)
            except celpy.CELEvalError as exc:
                raise CelFailed(f"{self.name}: a validation: {exc}") from exc
            if isinstance(passed, celpy.CELEvalError):
                raise CelFailed(f"{self.name}: a validation: {passed}")
            if not passed:
                try:
                    out.append(str(message.evaluate(activation)))
                except celpy.CELEvalError as exc:
                    raise CelFailed(f"{self.name}: a messageExpression: {exc}") from exc
        return out


def request_of(namespace: str, user: str, operation: str = "CREATE", sub_resource: str = "") -> dict[str, Any]:
    """The `request` variable as the API server gives it to an admission policy."""
    return {
        "operation": operation,
        "namespace": namespace,
        "userInfo": {"username": user},
        "subResource": sub_resource,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
    }


# The sentence every message has (types.Violation.describe), read back from a twin's message so
# a native finding is reported like the webhook's (text, JSON, JUnit, SARIF).
_SENTENCE: Final = re.compile(
    r"(?:violates|would violate) GPU policy: (?P<rule>[a-z0-9-]+) \((?:(?P<label>(?:init |ephemeral )?container) "
    r'"(?P<name>[^"]*)"|(?P<scope>[A-Za-z]+)): (?P<path>\S+) (?P<detail>.*); fix: (?P<fix>.*)\)',
    re.S,
)


def violation_of(rule: str, message: str) -> Violation:
    """A twin's message as the Violation whose describe() it is."""
    m = _SENTENCE.fullmatch(message)
    if m is None or m["rule"] != rule:
        return Violation(rule, "spec", message, "see the rule's documentation")
    if m["scope"]:
        return Violation(rule, m["path"], m["detail"], m["fix"], scope=m["scope"])
    return Violation(rule, m["path"], m["detail"], m["fix"], m["name"], m["label"])


@dataclass
class Native:
    """What the API server runs in enforcement native, offline: the mutations' twins
    (MutatingAdmissionPolicies) first, then the rules' twins (ValidatingAdmissionPolicies) and the
    webhook for the rules and mutations without one, on the pod as the policies left it."""

    mutating: list[MutatingPolicy]
    validating: list[ValidatingPolicy]
    policy: Policy  # the whole policy: the twins' modes
    webhook: Policy  # the webhook's share: what has a twin is off
    # The object rules' policies by the (API group, kind) they judge.
    objects: dict[tuple[str, str], list[ValidatingPolicy]] = field(default_factory=dict)

    @classmethod
    def of(cls, policy: Policy) -> Native:
        from ..policy import MUTATIONS, OBJECT_RULES, RULES

        mutations = [m for m in MUTATIONS if m.native is not None and m.enabled(policy)]
        # The twins that judge Pods (gpu-job-deadline's judges the templates in a JobSpec only).
        rules = [
            r for r in RULES if r.native is not None and r.native.judges("pod") and policy.mode(r.id) is not Mode.OFF
        ]
        object_rules = [r for r in OBJECT_RULES if r.native is not None and policy.mode(r.id) is not Mode.OFF]
        webhook = policy
        if any(m.id == "isolate-non-gpu" for m in mutations):  # the one mutation with a twin
            webhook = replace(webhook, isolate_non_gpu=False)
        if rules or object_rules:
            native_ids = [r.id for r in rules] + [r.id for r in object_rules]
            webhook = replace(webhook, modes={**webhook.modes, **dict.fromkeys(native_ids, Mode.OFF)})
        objects: dict[tuple[str, str], list[ValidatingPolicy]] = {}
        for r in object_rules:
            compiled = ValidatingPolicy.of_object(r, policy)
            for group, kind, _plural in r.kinds:
                objects.setdefault((group, kind), []).append(compiled)
        return cls(
            [MutatingPolicy.of(m.native, policy) for m in mutations if m.native is not None],
            [ValidatingPolicy.of(r, policy) for r in rules],
            policy,
            webhook,
            objects,
        )

    def admit(self, obj: dict[str, Any], namespace: str, user: str, operation: str = "CREATE") -> dict[str, Any]:
        """The pod after the MutatingAdmissionPolicies (CelFailed: the API server refuses it)."""
        for compiled in self.mutating:
            obj = compiled.apply(obj, request_of(namespace, user, operation))
        return obj

    def findings(
        self, obj: dict[str, Any], namespace: str, user: str, policies: list[ValidatingPolicy] | None = None
    ) -> list[Violation]:
        """What the ValidatingAdmissionPolicies (the Pods' by default) find in `obj` (CelFailed:
        the API server refuses it)."""
        request = request_of(namespace, user)
        judges = self.validating if policies is None else policies
        return [violation_of(v.name, m) for v in judges for m in v.failures(obj, request)]

    def validate(self, req: Request) -> Outcome:
        """The API server's verdict on `req`: a Pod through the policies, then the webhook's share
        (on the pod as they left it); an object an object rule's twin judges through its policies,
        then the webhook's share; any other kind through the webhook alone."""
        from .. import admission
        from ..admission import Decision

        objects = self.objects.get((req.group, req.kind))
        pod = req.kind == "Pod" and not req.group
        if not isinstance(req.object, dict) or not (pod or objects):
            return admission.validate(req, self.policy)
        try:
            obj = self.admit(req.object, req.namespace, req.user) if pod else req.object
            found = self.findings(obj, req.namespace, req.user, None if pod else objects)
        except CelFailed as exc:
            return Outcome(Decision.DENIED, message=f"a native policy failed, so the API server would refuse it: {exc}")
        # A pod with DRA claims the rules' policies leave to the webhook (cel.NO_CLAIMS): all of it.
        spec = obj.get("spec")
        claims = pod and isinstance(spec, dict) and bool(spec.get("resourceClaims"))
        outcome = admission.validate(req.with_object(obj), self.policy if claims else self.webhook)
        if not found or outcome.decision not in (Decision.ALLOWED, Decision.DENIED):
            return outcome
        verdict = outcome.verdict
        for v in found:
            file_under(verdict, v, self.policy)
        if verdict.allowed:
            return Outcome(Decision.ALLOWED, verdict, warnings=verdict.warnings())
        return Outcome(Decision.DENIED, verdict, warnings=verdict.warnings(), message=verdict.message())
