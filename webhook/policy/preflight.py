"""Pre-flight: will this GPU pod ever schedule on the cluster as it is? One analysis, three rules.

The rules gpu-fits-some-node, known-accelerator and gpu-resource-advertised each report one
way a GPU pod sits Pending forever (`0/N nodes are available: N Insufficient nvidia.com/gpu`),
in words that name what the cluster does offer. They share this analysis, computed once per
pod view. It returns None (every rule silent) when there is no synced cluster view, when the
pod asks nothing of GPU nodes, or when a scheduling field cannot be read: the pre-flight rules
never judge on missing data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from .containers import Container
from .gpus import is_companion, is_device
from .nodes import (
    DRA_EXTENDED_PREFIX,
    Placement,
    Requirement,
    Unreadable,
    knows_any,
    matching,
    named_nodes,
    placement,
    pod_requests,
)
from .objects import PodView
from .quantity import QuantityError, parse_quantity
from .shapes import quote_key
from .types import ClusterView, NodeGroup, Policy

_NONE: Final = object()  # cached "no analysis" (None means "not computed yet")


@dataclass(frozen=True, slots=True)
class Unknown:
    """A GPU node label value the pod selects that no node has."""

    path: str
    key: str
    wanted: tuple[str, ...]
    existing: tuple[str, ...]  # the values nodes do have (sorted)


@dataclass(frozen=True, slots=True)
class Analysis:
    cluster: ClusterView
    where: Placement
    # GPU resources the pod requests that nodes advertise (device-plugin names; not DRA-backed)
    requests: Mapping[str, Decimal]
    matched: list[tuple[NodeGroup, tuple[str, ...]]]  # node groups the pod may land on (resources aside), their nodes
    unknown: list[Unknown]

    def selector(self) -> str:
        text = self.where.describe()
        return f" ({text})" if text else ""

    def offered(self, policy: Policy, groups: list[tuple[NodeGroup, tuple[str, ...]]] | None = None) -> list[str]:
        """GPU resources (of the GPU model) advertised by `groups` (default: every node)."""
        pool = [g for g, _ in groups] if groups is not None else self.cluster.groups
        return sorted(
            {
                r
                for g in pool
                for r, v in g.resources.items()
                if v > 0 and (is_device(r, policy) or is_companion(r, policy))
            }
        )


def analyse(view: PodView, policy: Policy) -> Analysis | None:
    cached = view.preflight
    if cached is None:
        cached = _analyse(view, policy) or _NONE
        view.preflight = cached
    return None if cached is _NONE else cached


def _analyse(view: PodView, policy: Policy) -> Analysis | None:
    cluster = policy.cluster
    if cluster is None:
        return None
    try:
        where = placement(view)
        requested = pod_requests(view)
    except Unreadable:
        return None
    dra = cluster.dra_extended
    requests = {
        name: count
        for name, count in requested.items()
        if is_device(name, policy) and not name.startswith(DRA_EXTENDED_PREFIX) and dra is not None and name not in dra
    }
    pinned = named_nodes(where)
    if pinned and not knows_any(cluster, pinned):
        # A node the view has not seen yet (a DaemonSet's pod for a node that just joined): the
        # view lags the API server by moments, and missing data is never a reason to warn.
        return None
    unknown = _unknown_values(view, where, cluster, policy)
    if not requests and not unknown:
        return None
    return Analysis(cluster, where, requests, matching(cluster, where, requested), unknown)


def _unknown_values(view: PodView, where: Placement, cluster: ClusterView, policy: Policy) -> list[Unknown]:
    """GPU node label values the pod selects that no node has: in nodeSelector, or in required
    node affinity when every term asks for such a value (terms are ORed: one live term is enough)."""
    keys = (policy.accelerator_label, *policy.gpu_node_labels)
    out: list[Unknown] = []
    existing: dict[str, tuple[str, ...]] = {}

    def values(key: str) -> tuple[str, ...]:
        if key not in existing:
            existing[key] = tuple(sorted(cluster.label_values(key)))
        return existing[key]

    for key, value in where.selector.items():
        if key in keys and value not in values(key):
            out.append(Unknown(f"{view.path}.nodeSelector{quote_key(key)}", key, (value,), values(key)))
    if where.terms:
        dead: list[tuple[int, int, Requirement]] = []
        for t, term in enumerate(where.terms):
            found = next(
                (
                    (t, e, r)
                    for e, r in enumerate(term)
                    if not r.field and r.operator == "In" and r.key in keys and not set(r.values) & set(values(r.key))
                ),
                None,
            )
            if found is None:
                return out  # a term that may match: the pod can still land somewhere
            dead.append(found)
        t, e, r = dead[0]
        path = (
            f"{view.path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            f".nodeSelectorTerms[{t}].matchExpressions[{e}].values"
        )
        out.append(Unknown(path, r.key, r.values, values(r.key)))
    return out


def largest_container(view: PodView, resource: str) -> tuple[Container, str] | None:
    """The container asking the most of `resource` and the side it names it on: the message's path."""
    best: tuple[Decimal, Container, str] | None = None
    for c in view.containers:
        for side_name, side in [("limits", c.limits), ("requests", c.requests)]:
            if side and resource in side:
                try:
                    amount = parse_quantity(side[resource])
                except QuantityError:
                    break
                if best is None or amount > best[0]:
                    best = (amount, c, side_name)
                break
    return None if best is None else (best[1], best[2])


def count(value: Decimal) -> str:
    return str(value.normalize()) if value == value.to_integral_value() else str(value)
