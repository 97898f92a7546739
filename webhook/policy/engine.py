"""The policy engine: find violations in an object, sort them by mode, mutate a Pod.

No I/O and no transport: the protocol layer (webhook.admission) calls exactly these
functions for the server and the offline CLI alike.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any, Final

from .gpus import AGENT_EXEMPTS, AGENT_LEAD, agent_account, is_companion, is_device, node_agent
from .mutations import isolate_non_gpu
from .nodes import view_of_nodes
from .objects import PodView, build_pod_view, build_views, find_templates
from .patch import join
from .registry import MUTATIONS, OBJECT_RULES, RULES, check_pod
from .rule import SWITCHES, ObjectRule, Rule
from .shapes import ShapeError
from .switches import RulesOn
from .types import MAX_WARNING, Changes, Mode, Plan, Policy, PolicyException, Violation

ALL_RULES: Final[tuple[Rule | ObjectRule, ...]] = (*RULES, *OBJECT_RULES)
RULE_IDS: Final[tuple[str, ...]] = tuple(r.id for r in ALL_RULES)
DEFAULT_MODES: Final[dict[str, Mode]] = {r.id: r.default_mode for r in ALL_RULES}
OBJECT_RULES_BY_KIND: Final[dict[tuple[str, str], tuple[ObjectRule, ...]]] = {
    (group, kind): tuple(r for r in OBJECT_RULES if any(k[:2] == (group, kind) for k in r.kinds))
    for rule in OBJECT_RULES
    for group, kind, _plural in rule.kinds
}

NODE_AGENT: Final = "gpu-node-agent"
DENY_PREFIX: Final = "violates GPU policy: "
WARN_PREFIX: Final = "would violate GPU policy: "


def pod_views(obj: Any, group: str, kind: str, policy: Policy, namespace: str = "") -> list[PodView] | None:
    """Every pod template in `obj` (the Pod itself for a Pod), or None for kinds without templates.

    `namespace` is the request's ("" reads the object's metadata).
    """
    templates = find_templates(group, kind, policy)
    if templates is None:
        return None
    return build_views(obj, templates, policy, kind, namespace)


def pod_view(obj: Any, policy: Policy, namespace: str = "") -> PodView:
    """The view of a Pod (a Pod's one template is itself: nothing to look for)."""
    return build_pod_view(obj, policy, namespace)


def plan(policy: Policy) -> Plan:
    """What `policy` runs, derived once per Policy object and kept on it (Policy.plan)."""
    found = policy.plan
    if found is None:
        mutations = tuple(i for i, m in enumerate(MUTATIONS) if m.enabled(policy))
        found = Plan(
            RulesOn.of(lambda rule: policy.mode(rule) is not Mode.OFF),
            mutations,
            tuple(i for i in mutations if not MUTATIONS[i].opt_out),
        )
        object.__setattr__(policy, "plan", found)  # a memo of its own fields: frozen otherwise
    return found


def pod_violations(pod: PodView, policy: Policy) -> list[Violation]:
    """Every violation of every pod rule that is not off, in registry then field order. For a
    GPU node agent each fix leads with the exemption: the workload fix ("request GPUs", "use an
    emptyDir") is no help to GPU Feature Discovery or an exporter, which need what they ask for."""
    found = check_pod(pod, policy, plan(policy).on)
    if found and node_agent(pod, policy):
        return [_agent_fix(v, pod) for v in found]
    return found


def _agent_fix(v: Violation, pod: PodView) -> Violation:
    if v.rule == NODE_AGENT or v.fix.startswith(AGENT_LEAD):  # its fix is the exemption already
        return v
    fix = agent_account(pod).join(AGENT_EXEMPTS) + v.fix
    return Violation(v.rule, v.path, v.detail, fix, v.container, v.container_kind, v.value, v.scope)


_MAX_NODES: Final = 200_000  # an admission body is at most a few MiB: a bound, not a limit in practice


# The rules that read namespaces from the cluster view (Rule.watches_namespaces).
NAMESPACE_RULES: Final = tuple(r.id for r in RULES if r.watches_namespaces)


def watches_namespaces(policy: Policy) -> bool:
    """Whether a rule on in `policy` reads namespaces: the server then watches them (and the chart,
    from the same flag through webhook.buildtime.generate, grants list/watch on them)."""
    return any(policy.mode(rule) is not Mode.OFF for rule in NAMESPACE_RULES)


def example_policy(rule: Rule | ObjectRule, policy: Policy) -> Policy:
    """`policy` as a rule's example is judged by: with the example's node table as the cluster
    view when it has one (the pre-flight rules are silent without a cluster)."""
    if isinstance(rule, Rule) and rule.switch:
        switched: dict[str, Any] = {SWITCHES[rule.switch]: True}
        policy = replace(policy, **switched)
    if isinstance(rule, Rule) and rule.example_nodes:
        return replace(policy, cluster=view_of_nodes(rule.example_nodes))
    return policy


def example_views(rule: Rule, policy: Policy) -> list[PodView]:
    """The pod views of a rule's example: a Pod (the usual example, `kind` left out), or an object
    with pod templates (gpu-job-deadline's Job)."""
    example = rule.example
    kind = example.get("kind", "Pod")
    if kind == "Pod":
        pod = {"apiVersion": "v1", "kind": "Pod", **example}
        pod["metadata"] = {"name": "p", **example.get("metadata", {})}
        return [pod_view(pod, policy)]
    group = str(example.get("apiVersion", "v1")).rpartition("/")[0]
    views = pod_views(example, group, kind, policy)
    assert views, f"{rule.id}: its example {kind} holds no pod template"
    return views


def unpoliced_gpu_requests(obj: Any, policy: Policy, limit: int = 5) -> list[str]:
    """Field paths of container-like objects holding GPU-model resources anywhere in `obj`: for a
    kind the policy does not know, so a GPU workload is never a silent skip. An object counts
    when its `resources` (or `resourcesPerNode`) has limits or requests naming a GPU resource, or
    a plain `gpu` count (the vLLM production stack's VLLMRuntime deploymentConfig)."""
    found: list[str] = []
    # Each node pushed is one (parent, key) link: a path string is built only for what is
    # reported, and the budget counts pushes, so memory and work are linear in what is looked at.
    links: list[tuple[int, str | int]] = [(-1, "")]
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack and len(found) < limit:
        node, at = stack.pop()
        if isinstance(node, dict):
            for field in ("resources", "resourcesPerNode"):
                res = node.get(field)
                if isinstance(res, dict) and res.get("gpu") not in (None, 0, "0", ""):
                    found.append(_link_path(links, at))
                    break
                if isinstance(res, dict) and any(
                    isinstance(side, dict)
                    and any(isinstance(k, str) and (is_device(k, policy) or is_companion(k, policy)) for k in side)
                    for side in (res.get("limits"), res.get("requests"))
                ):
                    found.append(_link_path(links, at))
                    break
            else:
                children: Any = reversed(list(node.items()))
                for key, value in children:
                    if isinstance(value, dict | list):
                        if len(links) >= _MAX_NODES:
                            return found
                        links.append((at, str(key)))
                        stack.append((value, len(links) - 1))
        elif isinstance(node, list):
            for i in range(len(node) - 1, -1, -1):
                if isinstance(node[i], dict | list):
                    if len(links) >= _MAX_NODES:
                        return found
                    links.append((at, i))
                    stack.append((node[i], len(links) - 1))
    return found


def _link_path(links: list[tuple[int, str | int]], at: int) -> str:
    """The field path of node `at`, from its chain of (parent, key) links."""
    parts: list[str] = []
    while at > 0:
        parent, key = links[at]
        parts.append(f"[{key}]" if isinstance(key, int) else (f".{key}" if parent > 0 else key))
        at = parent
    return "".join(reversed(parts)) or "(the object)"


def exempt(pod: PodView, policy: Policy) -> bool:
    """Whether the pod (template) runs as an exempt service account (exemptServiceAccounts).

    Like Pod Security Admission's exemptions, set by the platform in config, never by a pod
    author: only someone who may create pods in that namespace can run as its service
    accounts, so `monitoring/dcgm-exporter` trusts that namespace's owners, not every user.
    """
    accounts = policy.exempt_service_accounts
    return bool(accounts) and f"{pod.namespace}/{pod.service_account}" in accounts


def find_violations(obj: Any, group: str, kind: str, policy: Policy, namespace: str = "") -> list[Violation] | None:
    """Every violation in `obj`, or None when its kind is not policed at all."""
    object_rules = OBJECT_RULES_BY_KIND.get((group, kind))
    if object_rules is not None:
        if not isinstance(obj, dict):
            raise ShapeError("object", "must be an object")
        return [v for r in object_rules if policy.mode(r.id) is not Mode.OFF for v in r.check(obj, policy)]
    day = today() if policy.exceptions else ""
    if kind == "Pod" and not group:
        pod = build_pod_view(obj, policy, namespace)
        return [] if exempt(pod, policy) else _found(pod, policy, day)
    pods = pod_views(obj, group, kind, policy, namespace)
    if pods is None:
        return None
    return [v for pod in pods if not exempt(pod, policy) for v in _found(pod, policy, day)]


def _found(pod: PodView, policy: Policy, day: str) -> list[Violation]:
    """A view's violations, less what an exception in force excuses (`day` "": none configured)."""
    found = pod_violations(pod, policy)
    return excepted(found, pod, policy, day) if day and found else found


def today() -> str:
    """The UTC date, "YYYY-MM-DD": what an exception's `expires` is compared with (read once per
    request, and only where exceptions are configured)."""
    return time.strftime("%Y-%m-%d", time.gmtime())


# `gpu-policy audit` calls an exception expiring this many days ahead.
EXPIRING_DAYS: Final = 14


def exception_states(policy: Policy, day: str) -> list[tuple[PolicyException, str, int]]:
    """Each configured exception with its state on `day`: ("expired", days since its last day),
    ("expiring", days left, at most EXPIRING_DAYS), or ("active", days left); expired first."""
    import datetime

    now = datetime.date.fromisoformat(day)
    out = []
    for e in policy.exceptions:
        left = (datetime.date.fromisoformat(e.expires) - now).days
        state = "expired" if left < 0 else "expiring" if left <= EXPIRING_DAYS else "active"
        out.append((e, state, -left if left < 0 else left))
    order = {"expired": 0, "expiring": 1, "active": 2}
    return sorted(out, key=lambda t: (order[t[1]], t[0].expires, t[0].name))


def excepted(found: list[Violation], pod: PodView, policy: Policy, day: str) -> list[Violation]:
    """`found` without what an exception in force excuses (its rule, the pod's namespace, every
    podLabels pair; in force through its `expires` day, UTC). A violation only an expired
    exception covered stands, and its fix says which exception ended when, and who owns it: the
    team learns why a pod admitted yesterday is refused today."""
    labels = pod.raw_labels if isinstance(pod.raw_labels, dict) else {}
    out = []
    for v in found:
        covering = [e for e in policy.exceptions if e.covers(v.rule, pod.namespace, labels)]
        if not covering:
            out.append(v)
        elif not any(day <= e.expires for e in covering):
            e = max(covering, key=lambda x: x.expires)
            out.append(
                Violation(
                    v.rule,
                    v.path,
                    v.detail,
                    f"the exception {e.name!r} (owner {e.owner}) expired on {e.expires}, so {v.rule} applies "
                    f"again: renew it in exceptions, or {v.fix}",
                    v.container,
                    v.container_kind,
                    v.value,
                    v.scope,
                )
            )
    return out


@dataclass(slots=True, init=False)
class Verdict:
    """Violations by the mode their rule is in (OFF never appears). (An explicit __init__: see
    containers.Container.)"""

    by_mode: dict[Mode, list[Violation]]

    def __init__(self, by_mode: dict[Mode, list[Violation]] | None = None) -> None:
        self.by_mode = {} if by_mode is None else by_mode

    def of(self, mode: Mode) -> list[Violation]:
        return self.by_mode.get(mode, [])

    def held(self) -> set[int]:
        """ids of the violations rollout audit holds back from denying (file_under files each under
        warn and audit alike): what enforcing would refuse. Empty unless both lists exist."""
        audited, warned = self.by_mode.get(Mode.AUDIT), self.by_mode.get(Mode.WARN)
        return {id(v) for v in audited} & {id(v) for v in warned} if audited and warned else set()

    def once(self) -> list[tuple[Mode, Violation, bool]]:
        """(mode, violation, held) with each violation once: a held one under warn only."""
        held = self.held()
        return [
            (mode, v, id(v) in held)
            for mode, found in self.by_mode.items()
            for v in found
            if not (held and mode is Mode.AUDIT and id(v) in held)
        ]

    @property
    def allowed(self) -> bool:
        return not self.by_mode.get(Mode.DENY)

    def message(self) -> str:
        return DENY_PREFIX + _listed([v.describe() for v in self.of(Mode.DENY)[: MAX_LISTED + 1]], self.of(Mode.DENY))

    def warnings(self) -> list[str]:
        found = self.of(Mode.WARN)
        out = [short_warning(WARN_PREFIX, v) for v in found[:MAX_LISTED]]
        if len(found) > MAX_LISTED:
            out.append(f"{WARN_PREFIX}and {len(found) - MAX_LISTED} more warnings like these")
        return out

    def audit_annotations(self) -> dict[str, str]:
        by_rule: dict[str, list[Violation]] = {}
        for v in self.of(Mode.AUDIT):
            by_rule.setdefault(v.rule, []).append(v)
        return {
            rule: WARN_PREFIX + _listed([v.describe(with_fix=False) for v in found[: MAX_LISTED + 1]], found)
            for rule, found in by_rule.items()
        }


# An answer names at most this many violations of one kind and counts the rest: a pod of 70,000
# privileged GPU containers once got a 16.5 MiB message, and audit annotations were built
# quadratically. The first ones show what to fix; the count says how much there is.
MAX_LISTED: Final = 20


def _listed(texts: list[str], found: list[Violation]) -> str:
    if len(found) <= MAX_LISTED:
        return ", ".join(texts)
    return ", ".join(texts[:MAX_LISTED]) + f", and {len(found) - MAX_LISTED} more violations like these"


def judge(found: list[Violation], policy: Policy, before: list[Violation] | None = None) -> Verdict:
    """Sort violations by mode. With `before` (an UPDATE), judge only what the update introduces.

    A violation already present in the old object is not the update's doing: denying it
    would block unrelated changes such as removing a finalizer or scaling a Deployment
    that predates the policy.
    """
    if before:
        seen = {v.key for v in before}
        found = [v for v in found if v.key not in seen]
    verdict = Verdict()
    for v in found:
        file_under(verdict, v, policy)
    return verdict


def file_under(verdict: Verdict, v: Violation, policy: Policy) -> None:
    """Put `v` under its rule's mode (nowhere when off); a rule rollout audit holds back from
    denying (Policy.audited) warns and is recorded as an audit annotation too, as a Pod Security
    Admission namespace labelled both warn and audit would."""
    mode = policy.mode(v.rule)
    if mode is not Mode.OFF:
        verdict.by_mode.setdefault(mode, []).append(v)
    if v.rule in policy.audited:
        verdict.by_mode.setdefault(Mode.AUDIT, []).append(v)


def short_warning(prefix: str, v: Violation) -> str:
    """Keep a warning under the length Kubernetes keeps, dropping the fix before cutting."""
    text = prefix + v.describe()
    if len(text) > MAX_WARNING:
        text = prefix + v.describe(with_fix=False)
    return clip(text)


def clip(text: str, limit: int = MAX_WARNING) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def opted_out(pod: PodView, policy: Policy) -> bool:
    return pod.annotations.get(policy.opt_out_annotation) == "false"


def mutate(pod: PodView, policy: Policy) -> Changes:
    """JSONPatch operations for a Pod; templates are never mutated (their pods will be).

    The opt-out annotation turns off the mutations that allow it (Mutation.opt_out), never
    isolation: an annotation any pod author can set must not be a way to see every GPU.
    """
    if not pod.is_pod or exempt(pod, policy):
        return Changes([], [])
    active = plan(policy)
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for i in active.mutations_without_opt_out if opted_out(pod, policy) else active.mutations:
        changes = MUTATIONS[i].mutate(pod, policy)
        join(ops, changes.ops)
        warnings.extend(changes.warnings)
    return Changes(ops, warnings)


def mutate_new_ephemeral(pod: PodView, policy: Policy, existing: Collection[str]) -> Changes:
    """Patches for the pods/ephemeralcontainers subresource: only new ephemeral containers change."""
    if exempt(pod, policy):
        return Changes([], [])
    return isolate_non_gpu.mutate_new_ephemeral(pod, policy, existing)
