"""What the access rules know of a pod's namespace: its labels and gpu-policy's annotation.

The facts come from the cluster view's watch of namespaces (webhook.cluster.view keeps
`types.NamespaceFacts` per namespace, and only while a rule that reads them is on). Three answers,
kept apart on purpose because the rules treat them differently:

- `Facts`: the namespace as the view last saw it;
- `NOT_SYNCED`: the view has no namespaces at all (not watched, not synced yet, or no RBAC);
- `NOT_SEEN`: the view is synced but has not seen this namespace (created a moment ago).

gpu-namespace-allowed fails closed on both unknowns; gpu-max-per-pod and gpu-kinds-allowed fall
back to their config, since an unknown namespace can only have left their config's value in place.

Keys gpu-policy reads on namespaces, set by whoever may update a namespace (cluster admins, in
most RBAC setups; never a pod author):
- label `gpu-policy.io/max-gpus-per-pod`: the namespace's own gpuMaxPerPod;
- annotation `gpu-policy.io/gpu-kinds`: the namespace's own gpuKindsAllowed, comma-separated.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from .types import NamespaceFacts, Policy

NAME_LABEL: Final = "kubernetes.io/metadata.name"  # every namespace's own name (the view leaves it out)
MAX_GPUS_LABEL: Final = "gpu-policy.io/max-gpus-per-pod"
GPU_KINDS_ANNOTATION: Final = "gpu-policy.io/gpu-kinds"


class Unknown(Enum):
    """Why a namespace's facts are not known (a type of its own: never mistaken for facts)."""

    NOT_SYNCED = "not synced"
    NOT_SEEN = "not seen"


def facts(namespace: str, policy: Policy) -> NamespaceFacts | Unknown:
    """The view's facts of `namespace`, or why they are unknown."""
    known = policy.cluster.namespaces if policy.cluster is not None else None
    if known is None:
        return Unknown.NOT_SYNCED
    found = known.get(namespace)
    return Unknown.NOT_SEEN if found is None else found


def label(found: NamespaceFacts, key: str) -> str | None:
    for k, v in found.labels:
        if k == key:
            return v
    return None
