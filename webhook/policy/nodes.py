"""The cluster as the pre-flight rules see it: GPU node groups, and DRA claims resolved to classes.

The server's watcher (webhook.cluster.view) reduces every Node to the few fields that decide
where a GPU pod can land (labels, extended-resource allocatable, taints, cordon) and hands the
policy an immutable `ClusterView`. Nodes of one pool share all of those except their name, so
the view holds *groups* of identical nodes: a GPU pod is matched against a few dozen groups,
not against 5,000 nodes, and the memory is one name per node plus one record per pool.

Everything here is pure: the same view built from a node table in a test or from a live watch
gives the same answers. The matching follows the scheduler's own plugins to the letter where a
pod can be judged at admission (NodeName, NodeAffinity: nodeSelector plus required terms,
TaintToleration, NodeUnschedulable, NodeResourcesFit for extended resources) and stays silent
where it cannot (the view not synced, anything another webhook may still add to a template).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from .objects import PodView
from .quantity import QuantityError, parse_quantity
from .types import HOSTNAME, ClusterView, ContainerKind, NodeGroup, Taint

UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"
# Extended resources that nodes never advertise: DRA-backed names are satisfied from ResourceSlices.
DRA_EXTENDED_PREFIX: Final = "deviceclass.resource.kubernetes.io/"


# One node, reduced: (labels without a hostname equal to the name, allocatable extended resources,
# NoSchedule/NoExecute taints, cordoned). Nodes of one pool have equal keys; the watcher keeps
# one canonical key per distinct value, so 5,000 nodes cost 5,000 names and a few keys.
NodeKey = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, Decimal], ...], tuple[Taint, ...], bool]


def node_key(obj: Any) -> tuple[str, NodeKey] | None:
    """(name, key) of a Node object (JSON as the API server sends it), or None when it has no name.
    Fields of the wrong shape are read as absent: a node is never the reason a request fails."""
    if not isinstance(obj, dict):
        return None
    meta = _obj(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    raw_labels = _obj(meta.get("labels"))
    labels = tuple(
        sorted(
            (k, v)
            for k, v in raw_labels.items()
            if isinstance(k, str) and isinstance(v, str) and not (k == HOSTNAME and v == name)
        )
    )
    allocatable = _obj(_obj(obj.get("status")).get("allocatable"))
    resources: list[tuple[str, Decimal]] = []
    for res, value in allocatable.items():
        if isinstance(res, str) and "/" in res and not res.startswith("hugepages-"):
            try:
                resources.append((res, parse_quantity(value)))
            except QuantityError:
                continue
    spec = _obj(obj.get("spec"))
    taints: list[Taint] = []
    for t in spec.get("taints") or ():
        if isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute") and isinstance(t.get("key"), str):
            taints.append(Taint(t["key"], str(t.get("value") or ""), t["effect"]))
    return name, (labels, tuple(sorted(resources)), tuple(taints), spec.get("unschedulable") is True)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def group_nodes(nodes: Iterable[tuple[str, NodeKey]]) -> tuple[NodeGroup, ...]:
    """Groups of the nodes with equal keys."""
    by_key: dict[NodeKey, list[str]] = {}
    for name, key in nodes:
        by_key.setdefault(key, []).append(name)
    return tuple(
        NodeGroup(dict(labels), dict(resources), taints, cordoned, tuple(sorted(names)))
        for (labels, resources, taints, cordoned), names in by_key.items()
    )


def view_of_nodes(nodes: Iterable[Any], **dra: Any) -> ClusterView:
    """A ClusterView of Node objects (a node table in a test, a rule's example), with the DRA
    fields of ClusterView as keywords."""
    keys = [k for k in (node_key(n) for n in nodes) if k is not None]
    return ClusterView(groups=group_nodes(keys), nodes=len(keys), **dra)


# ---------------------------------------------------------------- what the pod asks of a node


class Unreadable(ValueError):
    """A scheduling field of a shape the view cannot judge: the pre-flight rules say nothing
    (the walk in webhook.policy.objects already denied what the API server would reject)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...]
    field: bool = False  # matchFields (metadata.name), not a label


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod may go, as the scheduler's filters read it."""

    node_name: str
    selector: Mapping[str, str]
    terms: tuple[tuple[Requirement, ...], ...] | None  # required node affinity (ORed terms); None: none
    tolerations: tuple[Mapping[str, Any], ...]
    judge_taints: bool  # Pods only: a template's tolerations may still be added by others

    def key(self) -> Any:
        """A hashable identity of the placement (the memo key of `matching`)."""
        return (
            self.node_name,
            tuple(sorted(self.selector.items())),
            self.terms,
            tuple(tuple(sorted((str(k), str(v)) for k, v in t.items())) for t in self.tolerations),
            self.judge_taints,
        )

    def describe(self) -> str:
        """The selector as people write it, for messages: "accelerator=nvidia-t4"."""
        parts = [f"{k}={v}" for k, v in self.selector.items()]
        for term in self.terms or ():
            for r in term:
                if r.operator == "In" and not r.field:
                    parts.append(
                        f"{r.key}={'|'.join(r.values)}" if len(r.values) < 4 else f"{r.key} in ({len(r.values)} values)"
                    )
                elif r.operator == "Exists":
                    parts.append(r.key)
            break  # the first term is what people read; the others are alternatives
        if self.node_name:
            parts.insert(0, f"nodeName={self.node_name}")
        return ", ".join(parts)


def placement(view: PodView) -> Placement:
    selector = view.node_selector or {}
    if not all(isinstance(v, str) for v in selector.values()):
        raise Unreadable("nodeSelector")
    return Placement(
        node_name=view.node_name,
        selector=selector,
        terms=_terms(view.raw_affinity),
        tolerations=_tolerations(view.raw_tolerations),
        judge_taints=view.is_pod,
    )


def _terms(affinity: Any) -> tuple[tuple[Requirement, ...], ...] | None:
    if not isinstance(affinity, dict):
        return None
    node = affinity.get("nodeAffinity")
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    if not isinstance(required, dict):
        return None
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        raise Unreadable("nodeSelectorTerms")
    out = []
    for term in terms:
        if not isinstance(term, dict):
            raise Unreadable("nodeSelectorTerms")
        reqs: list[Requirement] = []
        for field, is_field in [("matchExpressions", False), ("matchFields", True)]:
            for expr in term.get(field) or ():
                if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
                    raise Unreadable(field)
                values = expr.get("values") or ()
                if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
                    raise Unreadable(field)
                reqs.append(Requirement(expr["key"], str(expr.get("operator")), tuple(values), is_field))
        out.append(tuple(reqs))
    return tuple(out)


def _tolerations(value: Any) -> tuple[Mapping[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise Unreadable("tolerations")
    return tuple(value)


def _requirement_matches(r: Requirement, value: str | None) -> bool:
    if r.operator == "In":
        return value is not None and value in r.values
    if r.operator == "NotIn":
        return value is None or value not in r.values
    if r.operator == "Exists":
        return value is not None
    if r.operator == "DoesNotExist":
        return value is None
    if r.operator in ("Gt", "Lt") and value is not None and len(r.values) == 1:
        try:
            have, want = int(value), int(r.values[0])
        except ValueError:
            return False
        return have > want if r.operator == "Gt" else have < want
    return False


def _tolerated(taint: Taint, tolerations: tuple[Mapping[str, Any], ...]) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = t.get("key") or ""
        if (t.get("operator") or "Equal") == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and (t.get("value") or "") == taint.value:
            return True
    return False


def matches(group: NodeGroup, name: str, where: Placement, extended: Iterable[str] = ()) -> bool:
    """Whether the scheduler's filters let the pod onto node `name` of `group` (resources aside).

    Taints whose key is an extended resource the pod requests count as tolerated: the
    ExtendedResourceToleration admission plugin adds exactly those tolerations on clusters that
    taint GPU nodes that way (GKE, AKS), and when it is off we would rather miss a warning."""
    if where.node_name and where.node_name != name:
        return False
    for key, value in where.selector.items():
        if group.label(key, name) != value:
            return False
    if where.terms is not None and not any(
        term and all(_requirement_matches(r, name if r.field else group.label(r.key, name)) for r in term)
        for term in where.terms
    ):
        return False
    if where.judge_taints:
        skip = set(extended)
        if group.unschedulable and not _tolerated(Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"), where.tolerations):
            return False
        for taint in group.taints:
            if taint.key not in skip and not _tolerated(taint, where.tolerations):
                return False
    return True


def names_nodes(where: Placement) -> bool:
    """Whether the pod picks nodes by name: the groups must then be read node by node."""
    if where.node_name or HOSTNAME in where.selector:
        return True
    return any(r.field or r.key == HOSTNAME for term in where.terms or () for r in term)


def named_nodes(where: Placement) -> set[str]:
    """Node names the pod pins itself to (nodeName, a hostname selector, metadata.name fields)."""
    names = {where.node_name} if where.node_name else set()
    if HOSTNAME in where.selector:
        names.add(where.selector[HOSTNAME])
    for term in where.terms or ():
        for r in term:
            if r.operator == "In" and (r.field or r.key == HOSTNAME):
                names.update(r.values)
    return names


def knows_any(view: ClusterView, names: set[str]) -> bool:
    return any(n in names for g in view.groups for n in g.names)


def matching(
    view: ClusterView, where: Placement, extended: Iterable[str] = ()
) -> list[tuple[NodeGroup, tuple[str, ...]]]:
    """(group, the names of its nodes that match) for every group with a matching node.
    Memoised per placement on the view: the pods of one workload all ask the same question."""
    extended = tuple(sorted(extended))
    key = ("match", where.key(), extended)
    found: list[tuple[NodeGroup, tuple[str, ...]]] | None = view.memo.get(key)
    if found is None:
        found = _matching(view, where, extended)
        view.remember(key, found)
    return found


def _matching(
    view: ClusterView, where: Placement, extended: tuple[str, ...]
) -> list[tuple[NodeGroup, tuple[str, ...]]]:
    out: list[tuple[NodeGroup, tuple[str, ...]]] = []
    per_node = names_nodes(where)
    for group in view.groups:
        if per_node:
            names = tuple(n for n in group.names if matches(group, n, where, extended))
        else:
            names = group.names if matches(group, group.names[0], where, extended) else ()
        if names:
            out.append((group, names))
    return out


def pod_requests(view: PodView) -> dict[str, Decimal]:
    """Extended-resource requests of the pod as the scheduler counts them (resourcehelper.PodRequests):
    the sum over app containers and sidecars (init containers with restartPolicy Always) against
    the largest init container plus the sidecars started before it, per resource name. A
    container's request defaults to its limit (extended resources cannot be overcommitted)."""
    total: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    for c in view.containers:
        if c.kind is ContainerKind.EPHEMERAL:
            continue
        own: dict[str, Decimal] = {}
        for side in [c.limits, c.requests]:  # requests win: read second
            for name, value in (side or {}).items():
                if "/" in name and not name.startswith("hugepages-"):
                    try:
                        own[name] = parse_quantity(value)
                    except QuantityError:
                        raise Unreadable(name) from None
        if c.kind is ContainerKind.INIT:
            if c.sidecar:
                _add(total, own)
                _add(sidecars, own)
                effective = dict(sidecars)
            else:
                effective = dict(own)
                _add(effective, sidecars)
            for name, value in effective.items():
                if value > init_max.get(name, Decimal(0)):
                    init_max[name] = value
        else:
            _add(total, own)
    for name, value in init_max.items():
        if value > total.get(name, Decimal(0)):
            total[name] = value
    return {k: v for k, v in total.items() if v > 0}


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Decimal(0)) + value


def claim_classes(view: PodView, claim: str, cluster: ClusterView) -> tuple[str, ...] | None:
    """The device classes the pod's claim `claim` (spec.resourceClaims[*].name) requests, or None
    when the view cannot say (the claim object not seen yet, DRA not watched)."""
    ref = view.claim_refs.get(claim)
    if ref is None:
        return None
    kind, name = ref
    table = cluster.claim_templates if kind == "template" else cluster.claims
    if table is None:
        return None
    return table.get((view.namespace, name))
