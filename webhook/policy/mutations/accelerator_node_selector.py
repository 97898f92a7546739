"""accelerator-node-selector: a GPU pod that names no GPU model gets the cluster's default.

GPU models are picked with a node label (`accelerator: nvidia-t4`). When
acceleratorNodeSelector.default is set, a pod that requests a GPU and constrains the label
neither in nodeSelector nor in required node affinity gets nodeSelector[<label>]=<default>,
so it lands on the model the platform team chose instead of whichever GPU node is free.
A pod with spec.nodeName is already bound (static scheduling, DaemonSet-style placement): a
selector the node may not match would only make the kubelet reject it, so it is left alone.
"""

from __future__ import annotations

from ..objects import PodView
from ..patch import add, escape
from ..rule import GPU_REQUEST, Mutation
from ..types import NO_CHANGES, Changes, Policy

ID = "accelerator-node-selector"


def enabled(policy: Policy) -> bool:
    return bool(policy.accelerator_default)


def mutate(view: PodView, policy: Policy) -> Changes:
    default = policy.accelerator_default
    label = policy.accelerator_label
    if not default or not view.requests_gpu or view.pinned_to(label) or view.node_name:
        return NO_CHANGES
    if view.node_selector is None:
        op = add(f"{view.pointer}/nodeSelector", {label: default})
    else:
        op = add(f"{view.pointer}/nodeSelector/{escape(label)}", default)
    return Changes([op], [f"{ID}: set nodeSelector {label}={default} (this pod requests a GPU but named no GPU model)"])


MUTATION: Mutation = Mutation(
    id=ID,
    mutate=mutate,
    summary="When `acceleratorNodeSelector.default` is set, a pod that requests a GPU and constrains the label "
    "key neither in `nodeSelector` nor in required node affinity gets `nodeSelector[<labelKey>] = <default>`. "
    "Pods already bound with `spec.nodeName` are left alone (the kubelet would reject a selector its node "
    "does not match).",
    reads=("containers[*].resources", "nodeSelector", "affinity", "nodeName"),
    triggers=GPU_REQUEST,
    switch="acceleratorNodeSelector.default",
    enabled=enabled,
    webhook_only="a convenience, not a guarantee: when it lapses in an outage the pod lands on any GPU model, "
    "which the scheduler allows anyway",
)
