"""gpu-namespace-allowed (off by default): GPU pods only in the namespaces the platform names.

Looked at: pods and pod templates that get a GPU however the model knows (a device or
companion resource, a DRA claim, a KAI fraction). Allowed: in a namespace listed in
gpuNamespaces, or whose labels match gpuNamespaceSelector (a label selector: matchLabels and
matchExpressions, as Kubernetes reads them). Labels come from the cluster view (a watch of
namespaces); while it has not seen the namespace (not synced, or the namespace was created a
moment ago) the rule fails closed and says so: an unknown namespace is never a GPU namespace by
accident. Exempt namespaces are never judged.

Why: shared GPU clusters grant GPUs per team; Deckhouse ships this very rule ("deny GPU pods
unless the namespace carries label X") and fails closed too.
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import Check, lit
from ..gpus import gets_gpu
from ..namespaces import NAME_LABEL, Unknown, facts
from ..objects import PodView
from ..rule import GPU_POD, NativeRule, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-namespace-allowed"
FIX = "ask the platform to label the namespace to match gpuNamespaceSelector, or to list it in gpuNamespaces"


def matches(labels: dict[str, str], policy: Policy) -> bool:
    """Label selector semantics: every matchLabels pair and every expression holds; an empty
    selector selects nothing here (a selector that allows every namespace is no allow-list)."""
    if not policy.gpu_namespace_labels and not policy.gpu_namespace_expressions:
        return False
    if any(labels.get(k) != v for k, v in policy.gpu_namespace_labels):
        return False
    for key, op, values in policy.gpu_namespace_expressions:
        present = key in labels
        if (
            (op == "In" and (not present or labels[key] not in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def wanted(policy: Policy) -> str:
    """The selector as a person writes it: `gpu.deckhouse.io/enabled=true,team in (a,b)`."""
    parts = [f"{k}={v}" for k, v in policy.gpu_namespace_labels]
    for key, op, values in policy.gpu_namespace_expressions:
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(values)})")
        else:
            parts.append(key if op == "Exists" else f"!{key}")
    return ",".join(parts)


UNLISTED: Final = ("may not run GPU pods: it is not in gpuNamespaces", "ask the platform to list it in gpuNamespaces")
UNMATCHED: Final = ("does not carry labels matching ", ": GPU pods are for the namespaces that do")


def check(view: PodView, policy: Policy) -> list[Violation]:
    namespace = view.namespace
    if namespace in policy.gpu_namespaces or not gets_gpu(view, policy):
        return []
    fix = FIX
    if not policy.gpu_namespace_labels and not policy.gpu_namespace_expressions:
        detail, fix = UNLISTED
    else:
        found = facts(namespace, policy)
        if found is Unknown.NOT_SYNCED:
            detail = (
                f"may run GPU pods only if its labels match {wanted(policy)}, and gpu-policy does not see namespace "
                "labels yet (its cluster view is not synced): failing closed, retry in a moment"
            )
        elif found is Unknown.NOT_SEEN:
            detail = (
                "is not yet in gpu-policy's view of namespaces (created a moment ago?): failing closed until it is; "
                f"GPU pods need labels matching {wanted(policy)}"
            )
        elif matches({**dict(found.labels), NAME_LABEL: namespace}, policy):
            return []
        else:
            detail = wanted(policy).join(UNMATCHED)
    # metadata.namespace: the object's, a template's too
    return [Violation(ID, "metadata.namespace", detail, fix, value=f'"{namespace}"')]


# ---- The CEL twin: the labels of the namespace the API server hands the policy (namespaceObject,
# which always carries kubernetes.io/metadata.name), matched as `matches` matches them; the
# selector and the listed namespaces inlined at render time (@gpuNamespaces@, @nsLabels@,
# @nsExpressions@, and @nsWanted@ as `wanted` writes it). In the API server the namespace is always
# known, so the webhook's "not synced yet" and "not seen yet" cannot arise there.
# gpus.gets_gpu without the cluster view (any DRA claim may be a GPU: stricter, never looser).
_LABELS: Final = "(has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {})"
# Each matchExpression as [[key, operator], values] (values [""] for Exists and DoesNotExist): lists
# of strings only, as the API server's CEL wants an aggregate literal of one type.
_EXPRESSION: Final = (
    "(e[0][1] == 'In' ? (e[0][0] in variables.nsLabels && variables.nsLabels[e[0][0]] in e[1]) : "
    "e[0][1] == 'NotIn' ? !(e[0][0] in variables.nsLabels && variables.nsLabels[e[0][0]] in e[1]) : "
    "e[0][1] == 'Exists' ? e[0][0] in variables.nsLabels : !(e[0][0] in variables.nsLabels))"
)
_SELECTED: Final = (
    "(size(@nsLabels@) > 0 || size(@nsExpressions@) > 0) && "
    "@nsLabels@.all(k, k in variables.nsLabels && variables.nsLabels[k] == @nsLabels@[k]) && "
    f"@nsExpressions@.all(e, {_EXPRESSION})"
)
_DETAIL: Final = (
    f"(size(@nsLabels@) > 0 || size(@nsExpressions@) > 0 ? {lit(UNMATCHED[0])} + @nsWanted@ + {lit(UNMATCHED[1])} "
    f"+ '; fix: ' + {cel.agent_lead()} + {lit(FIX)} : {lit(UNLISTED[0])} + '; fix: ' + {cel.agent_lead()} + "
    f"{lit(UNLISTED[1])})"
)

NATIVE: Final = NativeRule(
    (
        ("getsGpu", cel.GETS_GPU),
        ("nsLabels", _LABELS),
        ("selected", _SELECTED),
        ("nodeAgent", cel.NODE_AGENT),
    ),
    (
        Check(
            "!variables.getsGpu || request.namespace in @gpuNamespaces@ || variables.selected",
            f"@prefix@ + {lit(ID + ' (pod: metadata.namespace ')} + {_DETAIL} + ')'",
        ),
    ),
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A pod or template that gets a GPU runs in a namespace listed in `gpuNamespaces` or labelled to match "
    "`gpuNamespaceSelector`; an unknown namespace fails closed (off by default).",
    why="Shared GPU clusters grant GPUs per team. The labels come from a watch of namespaces; until it has seen "
    "one, no GPU pod runs there by accident.",
    reads=("metadata.namespace", "containers[*].resources", "resourceClaims"),
    triggers=GPU_POD,
    example={
        "metadata": {"namespace": "team-a"},
        "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    },
    default_mode=Mode.OFF,
    watches_namespaces=True,
    native=NATIVE,
    webhook_only="",
)
