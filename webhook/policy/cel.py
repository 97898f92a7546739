"""The CEL vocabulary the native twins are written in (rule.NativeRule, rule.NativeMutation).

A twin is a rule or mutation said again in CEL, for the API server to run in-process as a
ValidatingAdmissionPolicy or MutatingAdmissionPolicy (enforcement both or native): it holds
when no webhook replica answers. Twins are built from the same constants as the Python they
mirror (names, no-device literals, message words), so the two cannot drift apart in their data;
tests/test_native.py proves they agree pod by pod. Everything here is plain string building,
run once at import.

CEL sees the pod the way the API server shows it: decoded into the typed Pod first, so an
omitted field, a JSON null and (for EnvVar.value, `omitempty`) an empty string are all absent
to `has()`. `@name@` marks a value filled in at render time (webhook.buildtime.native.VALUES,
from the chart's values; webhook.offline.native.VALUES, from a Policy), so no policy needs a
parameter object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from .gpus import AGENT_EXEMPTS, GKE_DEVICES, INSTANCE_TYPE, KAI_CONFIG_MAP, KAI_CONTAINER, KAI_FRACTION, KAI_MEMORY
from .nvidia import NO_DEVICES, VISIBLE_DEVICES
from .types import ContainerKind, Mode, PolicyException
from .vendors import OTHER_DOMAINS

# A rule's mode as its ValidatingAdmissionPolicyBinding's validationActions (off: not installed).
ACTIONS: Final = {Mode.DENY: "Deny", Mode.WARN: "Warn", Mode.AUDIT: "Audit"}

# The three container lists, in the order the webhook walks them (ContainerKind order).
LISTS: Final = tuple(kind for kind in ContainerKind)

# The pod's service account, as PodView reads it (serviceAccountName, its deprecated alias, default).
SERVICE_ACCOUNT: Final = (
    "(has(object.spec.serviceAccountName) ? object.spec.serviceAccountName : "
    "(has(object.spec.serviceAccount) ? object.spec.serviceAccount : 'default'))"
)

# decide._exempt, as match conditions: the exempt namespaces and users, which apply to every kind.
REQUEST_EXEMPTIONS: Final = (
    ("not-exempt-namespace", "!(request.namespace in @exemptNamespaces@)"),
    ("not-exempt-user", "!(request.userInfo.username in @exemptUsernames@)"),
)
# With engine.exempt's service accounts, for pods (the same three a Pod Security Admission
# configuration has). Not for other objects: a LimitRange has no service account, and the
# pod's default would read its namespace's `default` account as the object's.
EXEMPTIONS: Final = (
    *REQUEST_EXEMPTIONS,
    (
        "not-exempt-service-account",
        f"!((request.namespace + '/' + {SERVICE_ACCOUNT}) in @exemptServiceAccounts@)",
    ),
)


# gpus.kai_pod: the pod asks KAI Scheduler for a share of a GPU (whether or not the integration is on).
KAI_POD: Final = (
    "(has(object.spec.schedulerName) && object.spec.schedulerName in @kaiSchedulers@ && "
    f"has(object.metadata.annotations) && ('{KAI_FRACTION}' in object.metadata.annotations || "
    f"'{KAI_MEMORY}' in object.metadata.annotations))"
)

# gpus.kai_container with the integration on: the fraction container's name (its annotation's, else
# the first regular container's), or "" (no container's name) when that does not apply.
KAI_CONTAINER_NAME: Final = (
    f"@kai@ && {KAI_POD} ? "
    f"(('{KAI_CONTAINER}' in object.metadata.annotations && object.metadata.annotations['{KAI_CONTAINER}'] != '') ? "
    f"object.metadata.annotations['{KAI_CONTAINER}'] : object.spec.containers[0].name) : ''"
)


def kai_entry(e: str, c: str, kind: ContainerKind, i: str) -> str:
    """gpus.kai_injected: env entry `e` of container `c` (index `i` of its list) is the
    NVIDIA_VISIBLE_DEVICES KAI's webhook gives the fraction container: a configMapKeyRef to
    `<prefix>-<index>` (`-i<index>` for an init container), the prefix KAI's annotation. Needs
    the variable kaiContainer (KAI_CONTAINER_NAME)."""
    prefix = f"object.metadata.annotations['{KAI_CONFIG_MAP}']"
    index = f"'i' + string({i})" if kind is ContainerKind.INIT else f"string({i})"
    return (
        f"({c}.name == variables.kaiContainer && has({e}.valueFrom) && has({e}.valueFrom.configMapKeyRef) && "
        f"{e}.valueFrom.configMapKeyRef.key == '{VISIBLE_DEVICES}' && "
        f"'{KAI_CONFIG_MAP}' in object.metadata.annotations && {prefix} != '' && "
        f"{e}.valueFrom.configMapKeyRef.name == {prefix} + '-' + {index})"
    )


def kai_env_from(c: str, f: str, kind: ContainerKind, i: str) -> str:
    """gpus.kai_env_from: envFrom item `f` of container `c` (index `i` of its list) loads the
    ConfigMap `<prefix>-<index>-evar` KAI's webhook gives the fraction container. Needs the
    variable kaiContainer (KAI_CONTAINER_NAME)."""
    prefix = f"object.metadata.annotations['{KAI_CONFIG_MAP}']"
    index = f"'i' + string({i})" if kind is ContainerKind.INIT else f"string({i})"
    return (
        f"({c}.name == variables.kaiContainer && has({f}.configMapRef) && !has({f}.secretRef) && "
        f"has({f}.configMapRef.name) && '{KAI_CONFIG_MAP}' in object.metadata.annotations && {prefix} != '' && "
        f"{f}.configMapRef.name == {prefix} + '-' + {index} + '-evar')"
    )


# objects.HAMI_OPT_OUT: the pod's label that tells HAMi's webhook to skip it.
HAMI_OPT_OUT: Final = (
    "(has(object.metadata.labels) && 'hami.io/webhook' in object.metadata.labels && "
    "object.metadata.labels['hami.io/webhook'] == 'ignore')"
)


def plugin_env_gpu(c: str) -> str:
    """gpus.plugin_env_gpu: a device or companion resource outside the other vendors' domains with
    a count other than 0, or KAI's container. Needs the variable kaiContainer (KAI_CONTAINER_NAME)."""
    others = "!(" + " || ".join(f"k.startsWith('{d}')" for d in OTHER_DOMAINS) + ")"
    sides = " || ".join(
        f"(has({c}.resources.{side}) && {c}.resources.{side}.exists(k, k.contains('/') && {others} && "
        f"({named('k', '@devices@')} || (!{HAMI_OPT_OUT} && {named('k', '@companions@')})) && "
        f"sign(quantity({c}.resources.{side}[k])) != 0))"
        for side in ("limits", "requests")
    )
    return f"({c}.name == variables.kaiContainer || (has({c}.resources) && ({sides})))"


def grants_nothing(c: str, name: str = VISIBLE_DEVICES, literals: frozenset[str] = NO_DEVICES) -> str:
    """gpus.grants_nothing (gpus.vendor_isolated for AMD's `name`): the last entry of `name` is an
    exact no-device literal."""
    last = f"{c}.env.filter(e, e.name == '{name}')"
    allowed = ", ".join(f"'{v}'" for v in sorted(literals))
    entry = f"{last}[size({last}) - 1]"
    return (
        f"(has({c}.env) && size({last}) > 0 && !has({entry}.valueFrom) && "
        f"(!has({entry}.value) || {entry}.value in [{allowed}]))"
    )


def present(field: str) -> str:
    """The container list is there and a list: `containers` has no omitempty in the Go type, so a pod
    without it reaches CEL as `containers: null`, which has() reports present (the real API server
    then failed the policy with "no such overload: size" instead of leaving the pod to validation)."""
    return f"(has(object.spec.{field}) && type(object.spec.{field}) == list)"


def lit(text: str) -> str:
    """`text` as a CEL string literal: a JSON string is one (double quotes, the same escapes)."""
    return json.dumps(text)


def literals(values: Iterable[str]) -> str:
    """A CEL list literal of strings, sorted (a set's order must not change the generated text)."""
    return "[" + ", ".join(lit(v) for v in sorted(values)) + "]"


def grants(e: str, allowed: Iterable[str]) -> str:
    """Env entry `e` may grant devices: valueFrom (unknown at admission), or a value other than
    exactly one of `allowed` (an absent value is the empty string, which every list allows)."""
    return f"(has({e}.valueFrom) || (has({e}.value) && !({e}.value in {literals(allowed)})))"


@dataclass(frozen=True, slots=True)
class EnvGrant:
    """A family of env variables a rule denies when they may grant devices: which names (`match`,
    CEL over the name `n`), the values that grant nothing, and the message's words. `detail` and
    `fix` are CEL string expressions over `n` (the name) and `v` (the value, quoted as
    quantity.describe quotes a string); they say what the Python
    rule says, so a pod with one finding gets the same sentence from either."""

    match: Callable[[str], str]
    allowed: frozenset[str]
    detail: Callable[[str, str], str]  # (n, v) -> CEL string: what the value does
    # (n, hint) -> CEL string: what to do instead; `hint` is the CEL of the resource the fix should
    # name (gpus.resource_hint of the entry's container: resource_hint below)
    fix: Callable[[str, str], str]
    # (e, c, kind, i) -> CEL: entry e of container c (index i of its kind's list) is allowed anyway
    exempt: Callable[[str, str, ContainerKind, str], str] | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """One validation: `expression` is true when the pod passes; `message` is the CEL of the
    sentence for its first finding (`@prefix@`: the mode's words, "violates GPU policy: " or
    "would violate GPU policy: ")."""

    expression: str
    message: str


def list_name(kind: ContainerKind) -> str:
    """A container list's field as a variable name's tail: initContainers -> InitContainers."""
    return kind.field[0].upper() + kind.field[1:]


@dataclass(frozen=True, slots=True)
class First:
    """What a rule's twin says about the first container of a list that breaks it: `picks(c)` is
    the CEL condition over container `c`; `then(c, tail)` gives the variables that read the first
    such container (named with `tail`, the list's name) and the CEL of the message after
    `rule (container "name": @path@.containers[i]`, as `Container.violation` words it. `guard`,
    when given, wraps the check: `!(guard) || ...` (a pod-level condition, read only for a pod
    that has such a container)."""

    key: str  # the variable's name: <key><List> holds the indexes of the containers picked
    picks: Callable[[str], str]
    then: Callable[[str, str], tuple[tuple[tuple[str, str], ...], str]]
    guard: str = ""


def first_container_checks(
    rule: str, first: First, variables: tuple[tuple[str, str], ...] = (), kinds: tuple[ContainerKind, ...] = LISTS
) -> tuple[tuple[tuple[str, str], ...], tuple[Check, ...]]:
    """Per container list (of `kinds`), a variable of the indexes of the containers `first.picks`,
    a validation wanting it empty and the message about the first of them."""
    out, checks = [*variables, ("nodeAgent", NODE_AGENT)], []
    for kind in kinds:
        items, name = f"object.spec.{kind.field}", list_name(kind)
        found = f"variables.{first.key}{name}"
        out.append(
            (
                f"{first.key}{name}",
                f"{present(kind.field)} ? lists.range(size({items})).filter(i, {first.picks(f'{items}[i]')}) : []",
            )
        )
        c = f"{items}[{found}[0]]"
        more, tail = first.then(c, name)
        out += more
        message = (
            f"@prefix@ + {lit(rule + ' (' + kind.label + ' ' + chr(34))} + {c}.name + '\": @path@.{kind.field}[' + "
            f"string({found}[0]) + ']' + {tail} + ')'"
        )
        empty = f"size({found}) == 0"
        checks.append(Check(f"!({first.guard}) || {empty}" if first.guard else empty, message))
    return tuple(out), tuple(checks)


def env_checks(
    rule: str, families: tuple[EnvGrant, ...], variables: tuple[tuple[str, str], ...] = ()
) -> tuple[tuple[tuple[str, str], ...], tuple[Check, ...]]:
    """A rule over env entries: no entry of any of the `families` may grant devices. Per container
    list, a variable holds [container, entry] index pairs of the containers with such an entry
    (the first entry of each) and one validation wants it empty; its message names the first,
    as `Container.violation` does: `rule (container "name": spec.containers[i].env[j] detail;
    fix: ...)`. (Variables are evaluated lazily, only where a check or message reads them.)"""

    def bad(e: str, c: str, kind: ContainerKind, i: str) -> str:
        return (
            "("
            + " || ".join(
                f"({g.match(f'{e}.name')} && {grants(e, g.allowed)}"
                + (f" && !{g.exempt(e, c, kind, i)})" if g.exempt else ")")
                for g in families
            )
            + ")"
        )

    out, checks = [*variables, ("nodeAgent", NODE_AGENT)], []
    for kind in LISTS:
        items, name = f"object.spec.{kind.field}", list_name(kind)
        c = f"{items}[i]"
        out.append(
            (
                f"bad{name}",
                f"{present(kind.field)} ? lists.range(size({items})).filter(i, has({c}.env) && "
                f"{c}.env.exists(e, {bad('e', c, kind, 'i')}))"
                f".map(i, [i, lists.range(size({c}.env)).filter(j, {bad(f'{c}.env[j]', c, kind, 'i')})[0]]) : []",
            )
        )
        first = f"variables.bad{name}[0]"
        out.append((f"entry{name}", f"{items}[{first}[0]].env[{first}[1]]"))
        e = f"variables.entry{name}"
        at = f"'@path@.{kind.field}[' + string({first}[0]) + ']'"
        value = f"(has({e}.value) ? {e}.value : '')"
        words = " : ".join(
            f"{g.match(f'{e}.name')} ? (has({e}.valueFrom) ? ('sets ' + {e}.name + "
            f"' through valueFrom, which admission cannot check') : ({g.detail(f'{e}.name', value)}))"
            for g in families
        )
        fixes = " : ".join(
            f"{g.match(f'{e}.name')} ? ({g.fix(f'{e}.name', f'variables.hint{name}')})" for g in families
        )
        if f"variables.hint{name}" in fixes:  # a fix names the container's resource (read only there)
            out.append((f"hint{name}", resource_hint(f"{items}[{first}[0]]")))
        message = (
            f"@prefix@ + {lit(rule + ' (' + kind.label + ' ' + chr(34))} + {items}[{first}[0]].name + '\": ' + {at} "
            f"+ '.env[' + string({first}[1]) + '] ' + ({words} : '') + '; fix: ' + {agent_lead()} "
            f"+ ({fixes} : '') + ')'"
        )
        checks.append(Check(f"size(variables.bad{name}) == 0", message))
    return tuple(out), tuple(checks)


@dataclass(frozen=True, slots=True)
class EnvFromOpen:
    """A rule over envFrom items: those whose prefix can still set a granting name in a container
    `gate` picks. `reaches(c, p)` is the CEL list of the names prefix `p` reaches in container
    `c` (in the Python's order); the message says `<loads>: a key there becomes <names><detail>;
    fix: <fix[0]>envFrom[j]<fix[1]>`, as the rule's module words it."""

    reaches: Callable[[str, str], str]
    gate: Callable[[str], str]
    detail: str
    fix: tuple[str, str]


def _prefix(f: str) -> str:
    return f"(has({f}.prefix) ? {f}.prefix : '')"


def _loads(f: str) -> str:
    """containers.loads: 'loads ConfigMap "x" with no prefix' (its source, when neither ref is set)."""

    def ref(field: str, what: str) -> str:
        name = f"(has({f}.{field}.name) ? {f}.{field}.name : '')"
        return f"'{what} \"' + {name} + '\"'"

    return (
        f"'loads ' + (has({f}.secretRef) ? {ref('secretRef', 'Secret')} : (has({f}.configMapRef) ? "
        f"{ref('configMapRef', 'ConfigMap')} : 'its source')) + ' with ' + "
        f"(has({f}.prefix) && {f}.prefix != '' ? 'prefix \"' + {f}.prefix + '\"' : 'no prefix')"
    )


def env_from_checks(rule: str, how: EnvFromOpen) -> tuple[tuple[tuple[str, str], ...], tuple[Check, ...]]:
    """Per container list, a variable of the containers `how.gate` picks with an envFrom item that
    reaches a name (KAI's own ConfigMap aside), a validation wanting it empty and the message of
    the first such item, as `Container.violation` words it."""

    def open_(c: str, f: str, kind: ContainerKind, i: str) -> str:
        return f"(size({how.reaches(c, _prefix(f))}) > 0 && !{kai_env_from(c, f, kind, i)})"

    def picks(kind: ContainerKind) -> Callable[[str], str]:
        return lambda c: f"has({c}.envFrom) && {how.gate(c)} && {c}.envFrom.exists(f, {open_(c, 'f', kind, 'i')})"

    def then(kind: ContainerKind) -> Callable[[str, str], tuple[tuple[tuple[str, str], ...], str]]:
        def after(c: str, name: str) -> tuple[tuple[tuple[str, str], ...], str]:
            i = f"variables.from{name}[0]"  # the first container's index in its list
            j = f"variables.item{name}"
            f = f"{c}.envFrom[{j}]"
            tail = (
                f"'.envFrom[' + string({j}) + '] ' + {_loads(f)} + ': a key there becomes ' + "
                f"({how.reaches(c, _prefix(f))}).join(' or ') + {lit(how.detail + '; fix: ')} + {agent_lead()} + "
                f"{lit(how.fix[0] + 'envFrom[')} + string({j}) + {lit(']' + how.fix[1])}"
            )
            item = f"lists.range(size({c}.envFrom)).filter(j, {open_(c, f'{c}.envFrom[j]', kind, i)})[0]"
            return ((f"item{name}", item),), tail

        return after

    variables: list[tuple[str, str]] = [("kaiContainer", KAI_CONTAINER_NAME)]
    checks: list[Check] = []
    for kind in LISTS:  # one list at a time: the KAI exemption's index depends on the list's kind
        out, found = first_container_checks(rule, First("from", picks(kind), then(kind)), (), (kind,))
        variables += [v for v in out if v[0] != "nodeAgent"]
        checks += found
    return (*variables, ("nodeAgent", NODE_AGENT)), tuple(checks)


def quoted(v: str) -> str:
    """quantity.describe of a string value, in CEL."""
    return f"'\"' + {v} + '\"'"


def described(v: str) -> str:
    """quantity.describe of a quantity, in CEL: quoted when a string (always, from the API server,
    which serves every Quantity as one), as written when a number (a manifest judged offline)."""
    return f"(type({v}) == string ? '\"' + {v} + '\"' : string({v}))"


def named(k: str, patterns: str) -> str:
    """`k` matches one of `patterns`: [name, "", "="] exact, or [prefix, suffix, "*"] (one *)."""
    return (
        f"{patterns}.exists(p, p[2] == '=' ? {k} == p[0] : "
        f"({k}.startsWith(p[0]) && {k}.endsWith(p[1]) && size({k}) >= size(p[0]) + size(p[1])))"
    )


def every_container() -> str:
    """The pod's containers of all three lists, as one list (ContainerKind order)."""
    return " + ".join(f"({present(kind.field)} ? object.spec.{kind.field} : [])" for kind in LISTS)


def device_names(c: str, patterns: str = "@devices@") -> str:
    """The names of container `c`'s resources (limits, then requests) that match `patterns` with a
    count other than 0, in order (gpus._resource_source reads them so)."""
    return " + ".join(
        f"((has({c}.resources) && has({c}.resources.{side})) ? {c}.resources.{side}.filter(k, k.contains('/') && "
        f"{named('k', patterns)} && sign(quantity({c}.resources.{side}[k])) != 0) : [])"
        for side in ("limits", "requests")
    )


def resource_hint(c: str) -> str:
    """gpus.resource_hint of container `c`: the resource a fix should name, the GPU resource itself
    if it asks for it, else its first device resource, else its first companion (limits before
    requests; in each the smallest name, the first in the map the API server serialises sorted by
    key), else the GPU resource. One pass: each candidate is ranked by a digit put before it, and
    the smallest wins (as the variable of a message: lazily evaluated, only for a fix)."""

    def ranked(side: str, patterns: str, rank: str) -> str:
        return (
            f"((has({c}.resources) && has({c}.resources.{side})) ? {c}.resources.{side}.filter(k, k.contains('/') && "
            f"{named('k', patterns)} && sign(quantity({c}.resources.{side}[k])) != 0).map(k, {rank} + k) : [])"
        )

    gpu_first = "(k == '@resourceName@' ? '0' : '{}')"
    parts = [
        ranked("limits", "@devices@", gpu_first.format(1)),
        ranked("requests", "@devices@", gpu_first.format(2)),
        ranked("limits", "@companions@", "'3'"),
        ranked("requests", "@companions@", "'4'"),
        "['5@resourceName@']",
    ]
    return f"({' + '.join(parts)}).min().substring(1)"


# GPU_DEVICE_NODE (/dev/nvidia(\d+)\b, Python's Unicode \d and \b) in RE2, never looser: ASCII
# digits then a boundary RE2 sees (it counts any non-ASCII character as one), or a non-ASCII
# character after the ASCII digits (a Unicode digit Python's \d takes).
_GKE_GPU: Final = (r"/dev/nvidia[0-9]+\b", r"/dev/nvidia[0-9]*[^\x00-\x7f]")


def gets_gpu_container(c: str) -> str:
    """gpus.source(c) is not None, without the cluster view (as an admission policy runs): a device
    or companion resource with a count other than 0, a DRA claim, or a GKE device annotation
    naming an NVIDIA device node. (KAI's fraction container is covered by GPU_POD's KAI_POD.)"""
    gke = f"object.metadata.annotations[{lit(GKE_DEVICES)} + {c}.name]"
    return (
        f"(size({device_names(c)}) > 0 || size({device_names(c, '@companions@')}) > 0 || "
        f"(has({c}.resources) && has({c}.resources.claims) && size({c}.resources.claims) > 0) || "
        f"(has(object.metadata.annotations) && ({lit(GKE_DEVICES)} + {c}.name) in object.metadata.annotations && "
        f"({' || '.join(f'{gke}.matches({lit(r)})' for r in _GKE_GPU)})))"
    )


def pinned_to(labels: str) -> str:
    """PodView.pinned_to any of `labels` (a CEL list): nodeSelector, or a required node-affinity
    expression with In or Exists (terms are ORed: one is enough to land there)."""
    terms = "object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    return (
        f"((has(object.spec.nodeSelector) && object.spec.nodeSelector.exists(k, k in {labels})) || "
        f"(has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && "
        "has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) && "
        f"type({terms}) == list && {terms}.exists(t, has(t.matchExpressions) && "
        f"t.matchExpressions.exists(x, x.operator in ['In', 'Exists'] && x.key in {labels}))))"
    )


# gpus.pinned_to_gpu_nodes: a GPU node label (nodeSelector, required affinity), a GPU machine family.
PINNED_TO_GPU_NODES: Final = (
    f"({pinned_to('@nodeLabels@')} || "
    f"(has(object.spec.nodeSelector) && {lit(INSTANCE_TYPE)} in object.spec.nodeSelector && "
    f"@instanceTypes@.exists(p, object.spec.nodeSelector[{lit(INSTANCE_TYPE)}].startsWith(p))))"
)

# gpus.gets_gpu without the cluster view: a container gets a GPU, the pod has DRA claims (any may
# be a GPU: the view alone can tell a claim's device classes), or it is a KAI fraction pod; and
# gpus.gpu_pod: that, or pinned to GPU nodes.
GETS_GPU: Final = (
    f"({every_container()}).exists(c, {gets_gpu_container('c')}) || "
    f"(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) || {KAI_POD}"
)
GPU_POD: Final = f"{GETS_GPU} || {PINNED_TO_GPU_NODES}"


def any_resource(c: str, cond: Callable[[str], str]) -> str:
    """Some resource name `k` of container `c`, in limits or requests, with `cond(count)` true
    (a CEL condition over `k` and the count's expression)."""
    return " || ".join(
        f"(has({c}.resources) && has({c}.resources.{side}) && "
        f"{c}.resources.{side}.exists(k, {cond(f'{c}.resources.{side}[k]')}))"
        for side in ("limits", "requests")
    )


def _node_wide(c: str) -> str:
    """gpus.node_wide(c) is not None: a count other than 0 of a vendor's node-wide resource
    (@nodeWide@ is empty unless another vendor is on, as gpus.node_agent asks)."""
    return any_resource(c, lambda v: f"k in @nodeWide@ && sign(quantity({v})) != 0")


def zero_requests(c: str) -> str:
    """gpus.zero_request, every one: [side, name] of each explicit 0 of a GPU device resource of
    container `c`, limits first. (A map key iterated by filter is dyn to the API server's type
    checker, and a list literal must be of one type: string(k), or the policy fails to compile.)"""
    return " + ".join(
        f"((has({c}.resources) && has({c}.resources.{side})) ? {c}.resources.{side}.filter(k, k.contains('/') && "
        f"{named('k', '@devices@')} && sign(quantity({c}.resources.{side}[k])) == 0)"
        f".map(k, [{lit(side)}, string(k)]) : [])"
        for side in ("limits", "requests")
    )


def _zero_request(c: str) -> str:
    """gpus.zero_request(c) is not None: an explicit 0 of a GPU device resource."""
    return any_resource(c, lambda v: f"k.contains('/') && {named('k', '@devices@')} && sign(quantity({v})) == 0")


# gpus.node_agent: one copy per node (hostPID, a DaemonSet's template or pod) that asks the device
# plugin for no GPU (a node-wide resource aside) and is there for the GPUs: a node-wide resource,
# pinned to GPU nodes, an agent image, or an explicit 0 of a GPU resource.
NODE_AGENT: Final = (
    "(((has(object.spec.hostPID) && object.spec.hostPID) || object.kind == 'DaemonSet' || "
    "(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
    "has(r.controller) && r.controller && r.kind == 'DaemonSet'))) && "
    f"!({every_container()}).exists(c, ({gets_gpu_container('c')} || c.name == ({KAI_CONTAINER_NAME})) && "
    f"!({_node_wide('c')})) && "
    f"(({every_container()}).exists(c, {_node_wide('c')} || {_zero_request('c')} || "
    "(has(c.image) && @agentImages@.exists(a, c.image.startsWith(a)))) || "
    f"{PINNED_TO_GPU_NODES}))"
)


# gpus.agent_account: the exemptServiceAccounts entry that would exempt the pod.
AGENT_ACCOUNT: Final = f"(request.namespace != '' ? request.namespace : '<namespace>') + '/' + {SERVICE_ACCOUNT}"


def agent_lead() -> str:
    """CEL of what engine.pod_violations puts before every fix of a node agent (needs the variable
    nodeAgent, NODE_AGENT): the exemption the platform can grant it, or ''."""
    return f"(variables.nodeAgent ? {lit(AGENT_EXEMPTS[0])} + {AGENT_ACCOUNT} + {lit(AGENT_EXEMPTS[1])} : '')"


# The characters str.upper() turns into each ASCII capital: its lower case, and these two (a
# scan of every code point in tests/test_native_rules.py proves the table whole).
UPPER_FROM: Final = {"I": "\u0131", "S": "\u017f"}
# str.strip()'s whitespace (str.isspace), none above U+3000 (the same test scans for more).
SPACE: Final = "".join(ch for ch in map(chr, range(0x3001)) if ch.isspace())


def upper_pattern(words: Iterable[str]) -> str:
    """An RE2 pattern for `s.strip().upper() in words` (ASCII capitals, digits and `_`): each
    letter a class of what upper-cases to it, between runs of whitespace."""

    def letter(ch: str) -> str:
        if not ch.isalpha():
            return ch
        return "[" + ch + ch.lower() + UPPER_FROM.get(ch, "") + "]"

    space = "[" + SPACE + "]*"
    return "^" + space + "(" + "|".join("".join(map(letter, w)) for w in sorted(words)) + ")" + space + "$"


def pod_vendor() -> str:
    """gpus.pod_vendor's name, or '' for NVIDIA: the first other vendor, if on, whose resource
    domain a container asks for, whose agent image one runs, or whose node label pins the pod."""
    from .vendors import OTHERS

    out = "''"
    for v in reversed(OTHERS):
        domains, images = literals(v.domains), literals(v.agent_images)
        in_domains = f"{domains}.exists(d, k.startsWith(d))"  # any count: the name says the vendor

        def named_by_vendor(_count: str, cond: str = in_domains) -> str:
            return cond

        asks = any_resource("c", named_by_vendor)
        cond = (
            f"(({every_container()}).exists(c, (has(c.image) && {images}.exists(a, c.image.startsWith(a))) || "
            f"{asks}) || {pinned_to(literals(v.node_labels))})"
        )
        out = f"((@{v.key}@ && {cond}) ? {lit(v.name)} : {out})"
    return out


@dataclass(frozen=True, slots=True)
class Root:
    """Where the pod a twin judges is: the Pod itself, or a built-in controller's pod template.
    Twins are written for a Pod (`object.spec`, `object.metadata`, `@path@` in messages);
    `rooted` moves them onto a template, so a Deployment is judged by the same CEL."""

    name: str  # "pod", or the template path's words (a template policy's name ends with them)
    cel: str  # CEL of the object holding spec and metadata
    path: str  # the pod spec's field path in messages
    resources: tuple[tuple[str, str], ...]  # (API group, plural) the policy matches
    # A template that sits in a JobSpec (objects.JOB_KINDS, as PodView.job_path): CEL true for the
    # objects of this root whose template does ("false": none, "true": all), the JobSpec's CEL and
    # its field path in messages (`@inJob@`, `@jobSpec@`, `@jobPath@`).
    in_job: str = "false"
    job_cel: str = ""
    job_path: str = ""


def _roots() -> tuple[Root, ...]:
    """Pods, then one root per template path of the built-in controllers (templates.WORKLOADS),
    so Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and ReplicationControllers share
    one policy per rule. Custom resources' templates sit in lists and maps (`[*]`, `*`), which a
    twin's container-list variables cannot range over: the workloads webhook keeps them."""
    from .objects import JOB_KINDS
    from .templates import WORKLOADS

    by_path: dict[tuple[str, ...], list[tuple[str, str, str]]] = {}
    for w in WORKLOADS:
        if w.kind != "Pod" and w.templates.required:
            (path,) = w.templates.paths
            by_path.setdefault(path, []).append((w.group, w.plural, w.kind))
    out = [Root("pod", "object", "spec", (("", "pods"),))]
    for path, found in by_path.items():
        assert not any("*" in key for key in path), path
        jobs = [kind for _, _, kind in found if kind in JOB_KINDS]
        in_job = "false" if not jobs else "true" if len(jobs) == len(found) else f"object.kind in {literals(jobs)}"
        job = path[:-1] if jobs and path[-1] == "template" else ()
        out.append(
            Root(
                "-".join(path).lower(),
                "object." + ".".join(path),
                ".".join((*path, "spec")),
                tuple((group, plural) for group, plural, _ in found),
                in_job if job else "false",
                "object." + ".".join(job) if job else "",
                ".".join(job),
            )
        )
    return tuple(out)


ROOTS: Final = _roots()
# A pod (template) with DRA claims is the webhook's alone: whether a claim holds a GPU only the
# cluster view can tell (its device classes are on the ResourceClaim, another object), and a twin
# that counted every claim as a GPU refused legitimate pods (a privileged pod with a NIC claim).
# The API server requires every container's claim to name one of the pod's, so the pod's list
# says it. In both the pods webhook (failurePolicy Fail) is sent such pods by the rules' own
# triggers; in native the chart sends it every such pod (webhook.buildtime.chart). Never looser:
# while no replica answers, such a pod is refused, not admitted.
CLAIMS: Final = "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"
NO_CLAIMS: Final = ("no-dra-claims", f"!{CLAIMS}")
# A template policy's extra condition: finalizers must be removable from anything being deleted
# (decide.validate skips such updates too). It reads the controller's own metadata: not rooted.
NOT_DELETING: Final = ("not-being-deleted", "!has(object.metadata.deletionTimestamp)")


def exception_guard(rule: str, exceptions: Iterable[PolicyException], meta: str, today: str) -> str:
    """engine.excepted in CEL, for a twin's validation of `rule`: "(E) || " where E is true for a
    pod an exception in force excuses (its namespace, every podLabels pair on `meta`'s labels), or
    "" when none names the rule. CEL has no clock: what is in force is decided when the policy is
    rendered (`today`), so an exception that expires later stays in the policy until the next
    render; the webhook (the backup in enforcement both) and `gpu-policy audit` know the date.
    The chart's gpu-policy.excepted helper writes the same text."""
    terms = []
    for e in exceptions:
        if rule not in e.rules or e.expires < today:
            continue
        term = f"request.namespace == {lit(e.namespace)}"
        for key, value in e.pod_labels:
            term += (
                f" && has({meta}) && has({meta}.labels) && {lit(key)} in {meta}.labels && "
                f"{meta}.labels[{lit(key)}] == {lit(value)}"
            )
        terms.append(f"({term})")
    return f"({' || '.join(terms)}) || " if terms else ""


# What `rooted` fills in from the root, not from the chart's values.
ROOT_PLACEHOLDERS: Final = frozenset({"path", "inJob", "jobSpec", "jobPath"})


def rooted(cel: str, root: Root) -> str:
    """A twin's CEL with its pod at `root`: `object.spec.` and `object.metadata.` become the
    template's (whose metadata may be absent, so `has()` of its annotations is guarded), and
    `@path@` becomes the pod spec's field path in messages; where the template sits in a JobSpec,
    `@inJob@`, `@jobSpec@` and `@jobPath@` become the root's (Root.in_job)."""
    if root.cel != "object":

        def move(m: re.Match[str]) -> str:
            if m[1] is None:
                return f"(has({root.cel}.metadata) && has({root.cel}.metadata.annotations))"
            return f"{root.cel}.{m[1]}."

        cel = _ROOTED.sub(move, cel)  # one pass: what it writes is never rewritten again
    if "@jobSpec@" in cel or "@inJob@" in cel or "@jobPath@" in cel:
        assert root.job_cel, f"{root.name}: a twin reading the JobSpec runs only where a template sits in one"
        cel = cel.replace("@inJob@", root.in_job).replace("@jobSpec@", root.job_cel).replace("@jobPath@", root.job_path)
    return cel.replace("@path@", root.path)


_ROOTED: Final = re.compile(r"has\(object\.metadata\.annotations\)|\bobject\.(spec|metadata)\.")
