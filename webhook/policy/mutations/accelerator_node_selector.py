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
from ..patch import Op, add, escape
from ..types import Mutation, Policy, gpu_resource

ID = "accelerator-node-selector"


def mutate(view: PodView, policy: Policy) -> tuple[list[Op], list[str]]:
    default = policy.accelerator_default
    label = policy.accelerator_label
    if not default or not view.requests_gpu or view.pinned_to(label) or view.spec.get("nodeName"):
        return [], []
    if view.node_selector is None:
        op = add(f"{view.pointer}/nodeSelector", {label: default})
    else:
        op = add(f"{view.pointer}/nodeSelector/{escape(label)}", default)
    return [op], [f"{ID}: set nodeSelector {label}={default} (this pod requests a GPU but named no GPU model)"]


MUTATION = Mutation(id=ID, mutate=mutate, triggers=gpu_resource)
