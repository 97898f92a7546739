"""known-accelerator (warn by default; needs the cluster view): a selected GPU model exists.

Looked at: the values a pod selects for a GPU node label (acceleratorNodeSelector.labelKey and
gpuNodeLabels): nodeSelector entries, and required node affinity `In` values when every term
asks for one.
Flagged: a value no node has (`accelerator: nvidia-a100` on a cluster of T4s). The scheduler
says only `didn't match Pod's node affinity/selector`; the message lists the values nodes do
carry. Silent without a synced view; with nodes added on demand (autoscaling from zero) a
value may exist only once a pod asks for it, which is why the default is warn.
"""

from __future__ import annotations

from ..objects import PodView
from ..preflight import analyse
from ..rule import CLUSTER_VIEW, GPU_POD, Rule
from ..types import Mode, Policy, Violation

ID = "known-accelerator"


def check(view: PodView, policy: Policy) -> list[Violation]:
    found = analyse(view, policy)
    if found is None:
        return []
    out: list[Violation] = []
    for u in found.unknown:
        wanted = " or ".join(u.wanted)
        have = f"nodes have {u.key}={', '.join(u.existing)}" if u.existing else f"no node carries the label {u.key}"
        out.append(
            Violation(
                rule=ID,
                path=u.path,
                detail=f"selects {u.key}={wanted}, which no node has: {have}",
                fix="select a value that exists"
                + (f" ({', '.join(u.existing)})" if u.existing else "")
                + ", or add nodes of that model (autoscaled from zero, this warning can be expected)",
                value=wanted,
            )
        )
    return out


RULE: Rule = Rule(
    webhook_only=CLUSTER_VIEW,
    id=ID,
    check=check,
    summary="The GPU model a pod selects (a GPU node label value) exists on some node (needs the cluster view).",
    why="The scheduler only says `didn't match Pod's node affinity/selector`; the message lists the GPU models "
    "the nodes do have.",
    reads=("nodeSelector", "affinity.nodeAffinity"),
    triggers=GPU_POD,
    example={
        "spec": {
            "nodeSelector": {"accelerator": "nvidia-a100"},
            "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        }
    },
    example_nodes=(
        {
            "metadata": {"name": "t4-pool-1", "labels": {"accelerator": "nvidia-t4"}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}},
        },
    ),
    default_mode=Mode.WARN,
)
