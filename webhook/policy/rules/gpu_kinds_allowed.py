"""gpu-kinds-allowed (off by default): which kinds of GPU a namespace may use.

The kinds, as a pod gets them (webhook.policy.gpus's model):
- `whole`: whole devices of a device-plugin GPU resource (nvidia.com/gpu: 1), or GKE's device
  annotation;
- `shared`: a share of one card: a decimal count (nvidia.com/gpu: 0.5, on clusters with GPU
  sharing), a KAI fraction (gpu-fraction / gpu-memory), HAMi's or xGPU's companion resources
  (nvidia.com/gpumem) with or without a device;
- `time-sliced`: a time-sliced or MPS slot (the gpuSharedResources, e.g. nvidia.com/gpu.shared);
- `mig:<profile>`: a MIG device of the mixed strategy (nvidia.com/mig-1g.5gb is mig:1g.5gb);
- `dra:<device class>`: a DRA claim, by the device class the cluster view resolves it to
  (dra:? while it cannot: no view, or the claim not seen yet).

Allowed: the namespace's `gpu-policy.io/gpu-kinds` annotation (comma-separated patterns, e.g.
`whole, mig:1g.*, dra:gpu.nvidia.com`) when it has one, else gpuKindsAllowed from the config
(default: every kind). `mig` and `dra` alone mean every profile and class. A namespace the view
has not seen gets the config's list; an annotation that does not parse fails closed.

Why: fractions do not isolate memory ("it's the user responsibility to play nice",
KAI-Scheduler#45), time slices share a card's faults, MIG slices are cheap to hand out: platforms
allow each per team, and today build it by hand on Gatekeeper and Kyverno.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from ..containers import Container
from ..gpus import Source, is_companion, is_device, is_shared, kai_pod, may_be_gpu_claim, source, whole
from ..namespaces import GPU_KINDS_ANNOTATION, Unknown, facts
from ..nodes import claim_classes
from ..objects import PodView
from ..quantity import QuantityError, parse_quantity
from ..rule import CLAIM_CLASSES, GPU_POD, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-kinds-allowed"
KINDS = ("whole", "shared", "time-sliced", "mig", "dra")
ALL_KINDS = ("whole", "shared", "time-sliced", "mig:*", "dra:*")  # as parse_kinds writes them
_MIG = re.compile(r"/mig-([^/]+)$")
_PATTERN = re.compile(r"[A-Za-z0-9.*?_\-\[\]]+")


def parse_kinds(text: str | list[str]) -> tuple[tuple[str, ...], str]:
    """Patterns from a list or a comma-separated annotation, and "" or what is wrong with them."""
    entries = text.split(",") if isinstance(text, str) else text
    out: list[str] = []
    for raw in entries:
        entry = raw.strip() if isinstance(raw, str) else raw
        if not isinstance(entry, str) or not entry:
            return (), f"{raw!r} is not a GPU kind"
        kind, _, pattern = entry.partition(":")
        if kind not in KINDS:
            return (), f'"{entry}" is not a GPU kind: one of {", ".join(KINDS)} (mig and dra may add :<pattern>)'
        if pattern and (kind not in ("mig", "dra") or not _PATTERN.fullmatch(pattern)):
            return (), f'"{entry}": only mig and dra take a pattern (mig:1g.*, dra:gpu.nvidia.com)'
        out.append(f"{kind}:{pattern or '*'}" if kind in ("mig", "dra") else kind)
    return tuple(out), ""


def _quantity(c: Container, name: str) -> str:
    for side in (c.limits, c.requests):
        if side and name in side:
            return str(side[name])
    return ""


def _resource_kinds(c: Container, policy: Policy) -> list[tuple[str, str]]:
    """(kind, what the container asks for) for each GPU resource it names with a count above 0."""
    out: list[tuple[str, str]] = []
    companions: list[str] = []
    for name in dict.fromkeys([*(c.limits or {}), *(c.requests or {})]):
        if "/" not in name:
            continue
        value = _quantity(c, name)
        try:
            amount = parse_quantity(value)
        except (QuantityError, ValueError):
            continue  # gpu-quantity reports it
        if amount <= 0:
            continue
        shown = f"{name}: {value}"
        if is_device(name, policy):
            mig = _MIG.search(name)
            if is_shared(name, policy):
                out.append(("time-sliced", shown))
            elif mig is not None:
                out.append((f"mig:{mig.group(1)}", shown))
            else:
                out.append(("whole" if whole(amount) else "shared", shown))
        elif is_companion(name, policy):
            companions.append(shown)
    if companions:  # HAMi/xGPU slice the card they sit on: the device is a share, not a whole card
        out = [("shared", shown) if kind == "whole" else (kind, shown) for kind, shown in out]
        out.append(("shared", companions[0]))
    return out


def _claim_kinds(claim: str, view: PodView, policy: Policy) -> list[tuple[str, str]]:
    if not may_be_gpu_claim(claim, view, policy):
        return []
    classes = claim_classes(view, claim, policy.cluster) if policy.cluster is not None else None
    shown = f'DRA claim "{claim}"'
    if not classes:
        return [("dra:?", shown)]
    return [(f"dra:{c}", shown) for c in classes]


def used(view: PodView, policy: Policy) -> list[tuple[str, str, Container | None]]:
    """Every GPU kind the pod uses: (kind, what asks for it, the container or None for the pod)."""
    out: list[tuple[str, str, Container | None]] = []
    claimed: set[str] = set()
    for c in view.containers:
        found: Source | None = source(c, view, policy)
        if found is None:
            continue
        if found.how == "kai":
            out.append(("shared", f"KAI fraction ({found.name} annotation)", c))
        elif found.how == "annotation":
            out.append(("whole", f'GKE device annotation "{found.name}"', c))
        else:
            out.extend((kind, shown, c) for kind, shown in _resource_kinds(c, policy))
        for claim in c.claims:
            claimed.add(claim)
            out.extend((kind, shown, c) for kind, shown in _claim_kinds(claim, view, policy))
    for claim in view.resource_claims:
        if claim not in claimed:
            out.extend((kind, shown, None) for kind, shown in _claim_kinds(claim, view, policy))
    key = kai_pod(view, policy) if not out else None
    if key is not None:  # KAI's integration off: the pod still asks for a fraction
        out.append(("shared", f"KAI fraction ({key} annotation)", None))
    return out


def allowed(namespace: str, policy: Policy) -> tuple[tuple[str, ...], str, str]:
    """(patterns, where they come from, what is wrong with the namespace's annotation or "")."""
    found = facts(namespace, policy)
    if isinstance(found, Unknown) or not found.gpu_kinds:
        return policy.gpu_kinds_allowed, "gpuKindsAllowed", ""
    patterns, problem = parse_kinds(found.gpu_kinds)
    return patterns, f"the namespace's {GPU_KINDS_ANNOTATION} annotation", problem


def check(view: PodView, policy: Policy) -> list[Violation]:
    kinds = used(view, policy)
    if not kinds:
        return []
    patterns, origin, problem = allowed(view.namespace, policy)
    if problem:
        return [
            Violation(
                rule=ID,
                path="metadata.namespace",
                detail=f"carries an annotation {GPU_KINDS_ANNOTATION} that does not parse ({problem}): failing closed",
                fix=f"ask the platform to fix the namespace's {GPU_KINDS_ANNOTATION} annotation",
                value=f'"{view.namespace}"',
            )
        ]
    if patterns == ALL_KINDS:
        return []
    out: list[Violation] = []
    listed = ", ".join(p.removesuffix(":*") for p in patterns) or "none"
    for kind, shown, c in kinds:
        if any(fnmatchcase(kind, p) for p in patterns):
            continue
        what = "a DRA claim whose device class gpu-policy cannot resolve yet" if kind == "dra:?" else f"a {kind} GPU"
        detail = f"uses {what} ({shown}); this namespace may use {listed} ({origin})"
        fix = f"ask for a kind this namespace allows, or ask the platform to allow {kind.split(':')[0]} here"
        if c is None:
            where = f"{view.path}.resourceClaims" if kind.startswith("dra:") else f"{view.meta_path}.annotations"
            out.append(Violation(ID, where, detail, fix))
        else:
            out.append(c.violation(ID, "resources", detail, fix))
    return out


RULE: Rule = Rule(
    webhook_only=CLAIM_CLASSES,
    id=ID,
    check=check,
    summary="A pod uses only the GPU kinds (whole, shared, time-sliced, mig:<profile>, dra:<class>) its namespace's "
    "`gpu-policy.io/gpu-kinds` annotation, else `gpuKindsAllowed`, allows (off by default).",
    why="Fractions do not isolate memory and time slices share faults: platforms allow each per team, by hand on "
    "Gatekeeper or Kyverno today.",
    reads=("metadata.namespace", "containers[*].resources", "resourceClaims", "metadata.annotations"),
    triggers=GPU_POD,
    example={
        "metadata": {"namespace": "notebooks"},
        "spec": {"containers": [{"name": "lab", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]},
    },
    default_mode=Mode.OFF,
    watches_namespaces=True,
)
