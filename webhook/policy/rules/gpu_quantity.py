"""gpu-quantity: every count of a GPU resource is a number its device plugin can hand out.

Restricted fields: spec.{initContainers,containers}[*].resources.{limits,requests}[<name>] for
every resource of the GPU model (webhook.policy.gpus).
Allowed values:
- the GPU resource (gpuResourceName): 0; positive integers (1, "1", "1000m", 1e0); with
  sharedGpu, decimals strictly between 0 and 1 (0.5, "500m"): only it can be a share;
- other device resources (MIG slices, shared slots, DRA extended resources): whole numbers;
  a MIG slice or a time-sliced slot is already a share, and their plugins count whole devices;
- with integrations.hami: nvidia.com/gpucores and nvidia.com/gpumem-percentage whole 0-100,
  nvidia.com/gpumem a whole number of MiB above 0;
- with integrations.xgpu: volcano.sh/gpu-mem.128Mi a whole number of 128 MiB blocks above 0,
  volcano.sh/gpu-core.percentage a multiple of 5 from 5 to 100, and no pod mixing them with the
  GPU resource (no node serves both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from .. import cel
from ..cel import lit
from ..gpus import is_device, whole
from ..objects import PodView
from ..quantity import QuantityError, describe, parse_quantity
from ..rule import GPU_RESOURCE, NativeRule, Rule
from ..shapes import quote_key
from ..types import ContainerKind, Policy, Violation
from ..vendors import OTHER_DOMAINS

ID = "gpu-quantity"
_ONE = Decimal(1)
_HUNDRED = Decimal(100)
_MISSING = object()

# The sentence's pieces, shared by the rule and its twin: a detail is "is <value>" + one of these.
INVALID: Final = ": not a valid Kubernetes quantity"
NEGATIVE: Final = ": must not be negative"
MORE_THAN_ONE: Final = ": more than one GPU must be a whole number (a share is always of one card)"
SHARES_OFF: Final = ": GPU shares (values below 1) are not enabled on this cluster"
DEVICE: Final = (
    ": this resource hands out whole devices (a MIG slice or a shared slot is already a share of a GPU; only ",
    " takes decimals)",
)
VENDOR_DEVICE: Final = (
    ": AMD and Intel GPUs (and their partitions) are handed out whole; a share of a card is a partition resource"
)
WHOLE_FIX: Final = "use a whole number such as 1"
GPU_FIX: Final = ("use a whole number of GPUs such as 1 or 2", ", or a share of one GPU below 1 such as 0.5")
MIXED: Final = (
    "is set in a pod that also requests ",
    ": xGPU nodes serve one or the other, so the pod fits no node",
    "request either ",
    " or the volcano.sh/gpu-* resources in one pod",
)

# (detail, fix) for a parsed value that breaks a resource's constraint, or None. The value as
# given is passed too, and turned into text (describe) only for a message: most values are fine.
Constraint = Callable[[Decimal, object, Policy], tuple[str, str] | None]


def _gpu_fix(policy: Policy) -> str:
    return GPU_FIX[0] + GPU_FIX[1] if policy.shared_gpu else GPU_FIX[0]


def _gpu(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
    if whole(q):
        return None
    shown = describe(value)
    if q > _ONE:
        return f"is {shown}{MORE_THAN_ONE}", _gpu_fix(policy)
    if not policy.shared_gpu:
        return f"is {shown}{SHARES_OFF}", _gpu_fix(policy)
    return None


def _device(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
    if whole(q):
        return None
    return f"is {describe(value)}{policy.resource_name.join(DEVICE)}", WHOLE_FIX


@dataclass(frozen=True, slots=True)
class Bounds:
    """A companion resource's range: a whole number from `low` (to `high`, when given) in steps of
    `step`, counting `unit`. Data, so the twin's CEL is built from the same numbers and words."""

    low: int
    high: int | None
    step: int
    unit: str

    def words(self) -> tuple[str, str]:
        """(detail after "is <value>: ", fix)."""
        span = f"from {self.low} to {self.high}" if self.high is not None else f"of at least {self.low}"
        every = f" in steps of {self.step}" if self.step > 1 else ""
        return f"must be a whole number {span}{every} ({self.unit})", f"use a whole number {span}{every}"

    def holds(self, q: Decimal) -> bool:
        return whole(q) and q >= self.low and (self.high is None or q <= self.high) and int(q) % self.step == 0

    def __call__(self, q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
        if self.holds(q):
            return None
        detail, fix = self.words()
        return f"is {describe(value)}: {detail}", fix


# Companion resources whose values the integrations know.
HAMI: Final[dict[str, Bounds]] = {
    "nvidia.com/gpucores": Bounds(0, 100, 1, "percent of the GPU's cores"),
    "nvidia.com/gpumem-percentage": Bounds(0, 100, 1, "percent of the GPU's memory"),
    "nvidia.com/gpumem": Bounds(1, None, 1, "MiB of GPU memory"),
}
XGPU: Final[dict[str, Bounds]] = {
    "volcano.sh/gpu-mem.128Mi": Bounds(1, None, 1, "blocks of 128 MiB"),
    "volcano.sh/gpu-core.percentage": Bounds(5, 100, 5, "percent of the GPU's compute"),
}


def _vendor_device(q: Decimal, value: object, policy: Policy) -> tuple[str, str] | None:
    """AMD's and Intel's device plugins count whole cards or partitions: no decimal is a share."""
    if whole(q):
        return None
    return f"is {describe(value)}{VENDOR_DEVICE}", WHOLE_FIX


def _constraint(name: str, policy: Policy) -> Constraint | None:
    if name == policy.resource_name:
        return _gpu
    if is_device(name, policy):
        return _vendor_device if name.startswith(OTHER_DOMAINS) else _device
    if policy.hami and name in HAMI:
        return HAMI[name]
    if policy.xgpu and name in XGPU:
        return XGPU[name]
    return None


def problem(value: object, policy: Policy, name: str | None = None) -> tuple[str, str] | None:
    """(detail, fix) when `value` is not an acceptable quantity of `name` (the GPU resource by default)."""
    constraint = _constraint(name or policy.resource_name, policy)
    if constraint is None:
        return None
    if (constraint is _gpu or constraint is _device or constraint is _vendor_device) and _plain_count(value):
        return None  # "1", 2: a whole number of devices, what nearly every pod asks for
    try:
        q = parse_quantity(value)
    except QuantityError:
        return f"is {describe(value)}{INVALID}", _fix(constraint, policy)
    if q < 0:
        return f"is {describe(value)}{NEGATIVE}", _fix(constraint, policy)
    return constraint(q, value, policy)


def _plain_count(value: object) -> bool:
    """A non-negative whole number written plainly: ASCII digits (no sign, suffix or exponent) or a
    JSON integer. Always valid for the GPU resource and any device resource, so not parsed."""
    if type(value) is str:
        return value.isascii() and value.isdigit() and len(value) <= 18
    return type(value) is int and value >= 0


def _fix(constraint: Constraint, policy: Policy) -> str:
    return _gpu_fix(policy) if constraint is _gpu else WHOLE_FIX


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        limits = c.limits or {}
        for side_name, side in [("limits", limits), ("requests", c.requests)]:
            if not side:
                continue
            for name, value in side.items():
                if "/" not in name:
                    continue  # cpu, memory: not ours (and the common case)
                if side is c.requests and limits.get(name, _MISSING) == value and type(limits[name]) is type(value):
                    continue  # requests defaulted from limits: report the mistake once
                found = problem(value, policy, name)
                if found:
                    detail, fix = found
                    out.append(c.violation(ID, c.resource_path(side_name, name), detail, fix, describe(value)))
    if policy.xgpu:
        out.extend(_xgpu_mixed(view, policy))
    return out


def _xgpu_mixed(view: PodView, policy: Policy) -> list[Violation]:
    """CCE: "Pods requesting GPUs under different resource names cannot share a node"; a pod that
    asks for both nvidia.com/gpu and xGPU resources fits no node and stays Pending."""
    if not view.requests_gpu:
        return []
    for c in view.containers:
        for name in c.limits or {}:
            if name in XGPU:
                return [
                    c.violation(
                        ID,
                        f"{c.resources_field}.limits{quote_key(name)}",
                        MIXED[0] + policy.resource_name + MIXED[1],
                        MIXED[2] + policy.resource_name + MIXED[3],
                        name,
                    )
                ]
    return []


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container with a
# count that breaks its resource's constraint, and of its counts the first (limits before requests,
# in each the smallest name: the first in the map the API server serialises sorted by key); a count
# in requests equal to the one in limits is the same mistake, reported once. The constraints are
# the ones above: isQuantity and quantity() are the API server's parser (Kubernetes' CEL quantity
# library), `string()` lets a manifest's plain number be judged offline as the API server's string.
# Then, with xGPU on, the pod that asks for both the GPU resource and an xGPU resource.
_BOUNDS: Final = {**HAMI, **XGPU}
_RANGES: Final = (
    "{"
    + ", ".join(f"{lit(n)}: [{b.low}, {-1 if b.high is None else b.high}, {b.step}]" for n, b in _BOUNDS.items())
    + "}"
)
_WORDS: Final = "{" + ", ".join(f"{lit(n)}: [{', '.join(map(lit, b.words()))}]" for n, b in _BOUNDS.items()) + "}"


def _constrained(k: str) -> str:
    """_constraint(k) is not None."""
    return (
        f"({k} == '@resourceName@' || {cel.named(k, '@devices@')} || (@hami@ && {k} in {cel.literals(HAMI)}) || "
        f"(@xgpu@ && {k} in {cel.literals(XGPU)}))"
    )


def _breaks(k: str, v: str) -> str:
    """problem(v, policy, k) is not None, for a constrained `k` (needs the variable ranges)."""
    text, q = f"string({v})", f"quantity(string({v}))"
    bounds, n = f"variables.ranges[{k}]", f"{q}.asInteger()"
    return (
        f"(!isQuantity({text}) || sign({q}) < 0 || ({k} == '@resourceName@' ? "
        f"(!{q}.isInteger() && ({q}.compareTo(quantity('1')) > 0 || !@sharedGpu@)) : "
        f"({cel.named(k, '@devices@')} ? !{q}.isInteger() : !({q}.isInteger() && {n} >= {bounds}[0] && "
        f"({bounds}[1] < 0 || {n} <= {bounds}[1]) && {n} % {bounds}[2] == 0))))"
    )


def _bad(c: str, side: str) -> str:
    """The names of container `c`'s counts on `side` that break their constraints (requests: not
    those equal to their limits)."""
    m = f"{c}.resources.{side}"
    same = (
        f" && !(has({c}.resources.limits) && k in {c}.resources.limits && "
        f"type({c}.resources.limits[k]) == type({m}[k]) && {c}.resources.limits[k] == {m}[k])"
        if side == "requests"
        else ""
    )
    return (
        f"((has({c}.resources) && has({m})) ? {m}.filter(k, k.contains('/') && {_constrained('k')}{same} && "
        f"{_breaks('k', f'{m}[k]')}) : [])"
    )


def _counts(
    kind: ContainerKind,
) -> tuple[tuple[tuple[str, str], ...], cel.Check]:
    """One container list: per container [bad limits, bad requests] (evaluated once), the indexes of
    the containers with any, and the message about the first, as Container.violation words it."""
    items, name = f"object.spec.{kind.field}", cel.list_name(kind)
    bad, found = f"variables.qbad{name}", f"variables.qfound{name}"
    first = f"{bad}[{found}[0]]"
    c = f"{items}[{found}[0]]"
    side, k, v = f"variables.qside{name}", f"variables.qkey{name}", f"variables.qval{name}"
    q, text = f"quantity(string({v}))", f"string({v})"
    gpu_fix = f"(@sharedGpu@ ? {lit(GPU_FIX[0] + GPU_FIX[1])} : {lit(GPU_FIX[0])})"
    other = " || ".join(f"{k}.startsWith({lit(d)})" for d in OTHER_DOMAINS)
    devices = cel.named(k, "@devices@")
    detail = (
        f"(!isQuantity({text}) ? {lit(INVALID)} : sign({q}) < 0 ? {lit(NEGATIVE)} : {k} == '@resourceName@' ? "
        f"({q}.compareTo(quantity('1')) > 0 ? {lit(MORE_THAN_ONE)} : {lit(SHARES_OFF)}) : "
        f"{devices} ? (({other}) ? {lit(VENDOR_DEVICE)} : {lit(DEVICE[0])} + '@resourceName@' + {lit(DEVICE[1])}) : "
        f"': ' + variables.words[{k}][0])"
    )
    fix = (
        f"({k} == '@resourceName@' ? {gpu_fix} : (!isQuantity({text}) || sign({q}) < 0 || {devices}) ? "
        f"{lit(WHOLE_FIX)} : variables.words[{k}][1])"
    )
    variables = (
        (
            f"qbad{name}",
            f"{cel.present(kind.field)} ? lists.range(size({items}))"
            f".map(i, [{_bad(f'{items}[i]', 'limits')}, {_bad(f'{items}[i]', 'requests')}]) : []",
        ),
        (f"qfound{name}", f"lists.range(size({bad})).filter(i, size({bad}[i][0]) > 0 || size({bad}[i][1]) > 0)"),
        (f"qside{name}", f"size({first}[0]) > 0 ? 'limits' : 'requests'"),
        (f"qkey{name}", f"{first}[{side} == 'limits' ? 0 : 1].min()"),
        (f"qval{name}", f"{side} == 'limits' ? {c}.resources.limits[{k}] : {c}.resources.requests[{k}]"),
    )
    message = (
        f"@prefix@ + {lit(ID + ' (' + kind.label + ' ' + chr(34))} + {c}.name + '\": @path@.{kind.field}[' + "
        f"string({found}[0]) + '].resources.' + {side} + '[\"' + {k} + '\"] is ' + {cel.described(v)} + {detail} + "
        f"'; fix: ' + {cel.agent_lead()} + {fix} + ')'"
    )
    return variables, cel.Check(f"size({found}) == 0", message)


def _xgpu_names(c: str) -> str:
    limits = f"{c}.resources.limits"
    return f"((has({c}.resources) && has({limits})) ? {limits}.filter(k, k in {cel.literals(XGPU)}) : [])"


def _mixed_then(c: str, name: str) -> tuple[tuple[tuple[str, str], ...], str]:
    k = f"variables.xname{name}"
    tail = (
        f"'.resources.limits[\"' + {k} + '\"] ' + {lit(MIXED[0])} + '@resourceName@' + {lit(MIXED[1] + '; fix: ')} + "
        f"{cel.agent_lead()} + {lit(MIXED[2])} + '@resourceName@' + {lit(MIXED[3])}"
    )
    return ((f"xname{name}", f"{_xgpu_names(c)}.min()"),), tail


def _gpu_count_above_zero(c: str) -> str:
    """Container `c`'s count of the GPU resource is above 0 (_gpu_count: limits decide, else requests)."""
    limits, requests = f"{c}.resources.limits", f"{c}.resources.requests"
    above = "isQuantity(string({m}['@resourceName@'])) && sign(quantity(string({m}['@resourceName@']))) > 0"
    return (
        f"(has({c}.resources) && ((has({limits}) && '@resourceName@' in {limits}) ? ({above.format(m=limits)}) : "
        f"(has({requests}) && '@resourceName@' in {requests} && {above.format(m=requests)})))"
    )


def _native() -> NativeRule:
    variables: list[tuple[str, str]] = [("ranges", _RANGES), ("words", _WORDS)]
    checks: list[cel.Check] = []
    for kind in cel.LISTS:
        more, check = _counts(kind)
        variables += more
        checks.append(check)
    guard = f"@xgpu@ && ({cel.every_container()}).exists(c, {_gpu_count_above_zero('c')})"
    mixed_variables, mixed = cel.first_container_checks(
        ID, cel.First("mixed", lambda c: f"size({_xgpu_names(c)}) > 0", _mixed_then, guard)
    )
    return NativeRule((*variables, *mixed_variables), (*checks, *mixed))


NATIVE: Final = _native()


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="Every count of a GPU-model resource is a valid quantity: the GPU resource 0, a whole number, or "
    "(with `sharedGpu`) a share strictly between 0 and 1; MIG slices, shared slots and DRA extended resources "
    "whole numbers; HAMi and xGPU companions within their ranges when their integration is on.",
    why="A whole number is an exclusive card; a decimal below 1 is a share of one card on clusters with GPU "
    "sharing. 1.5 means nothing to the device plugin, and clusters that allow shares patch upstream "
    "validation away, so we check ourselves.",
    reads=("containers[*].resources.limits", "containers[*].resources.requests"),
    triggers=GPU_RESOURCE,
    example={"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}},
    native=NATIVE,
    webhook_only="",
)
