"""no-gpu-runtime-class: the GPU operator's management runtime classes are for GPU pods only.

Restricted field: spec.runtimeClassName, when it is one of gpuRuntimeClasses (default nvidia,
nvidia-legacy, nvidia-cdi).
Allowed: pods that get a GPU through the device plugin (a device or companion resource) or a
DRA claim: on clusters that ship GPU pods with `runtimeClassName: nvidia`, they keep working.
Denied: every other pod. With CDI enabled the GPU operator reserves the `nvidia` class for its
own pods "so that they get access to all GPUs"; a pod without a GPU request that picks it is
one step (a lapse of isolation, an image default) from every GPU on the node.
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import Check, lit
from ..gpus import source
from ..objects import PodView
from ..rule import NativeRule, Rule, Trigger, Where
from ..types import Policy, Violation

ID = "no-gpu-runtime-class"
DETAIL: Final = " in a pod that requests no GPU: the GPU operator gives this runtime class's pods every GPU on the node"
FIX: Final = ("remove runtimeClassName, or request GPUs with resources.limits[", "]")


def check(view: PodView, policy: Policy) -> list[Violation]:
    if view.runtime_class not in policy.gpu_runtime_classes:
        return []
    if any((s := source(c, view, policy)) is not None and s.how != "kai" for c in view.containers):
        return []
    return [
        Violation(
            rule=ID,
            path=f"{view.path}.runtimeClassName",
            detail=f'is "{view.runtime_class}"{DETAIL}',
            fix=f'"{policy.resource_name}"'.join(FIX),
            value=f'"{view.runtime_class}"',
        )
    ]


# ---- The CEL twin (a ValidatingAdmissionPolicy): a GPU runtime class, and no container that gets a
# GPU as gpus.source says (KAI's fraction container does not count, as above).
_CLASS: Final = "object.spec.runtimeClassName"
NATIVE: Final = NativeRule(
    (("nodeAgent", cel.NODE_AGENT),),
    (
        Check(
            f"(has({_CLASS}) && {_CLASS} in @runtimeClasses@) ? "
            f"({cel.every_container()}).exists(c, {cel.gets_gpu_container('c')}) : true",
            f"@prefix@ + {lit(ID + ' (pod: @path@.runtimeClassName is ' + chr(34))} + {_CLASS} + "
            f"{lit(chr(34) + DETAIL + '; fix: ')} + {cel.agent_lead()} + {lit(FIX[0] + chr(34))} + "
            f"'@resourceName@' + {lit(chr(34) + FIX[1])} + ')'",
        ),
    ),
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A pod with a runtime class of `gpuRuntimeClasses` (default `nvidia`, `nvidia-legacy`, `nvidia-cdi`) "
    "gets a GPU through a device or companion resource or a DRA claim.",
    why="With CDI on, the GPU operator reserves the `nvidia` class for its management pods so that they see every "
    "GPU; a pod without a GPU request that picks it is a step from all of them.",
    reads=("runtimeClassName", "containers[*].resources"),
    triggers=(Trigger(Where.RUNTIME_CLASS, setting="gpuRuntimeClasses"),),
    native=NATIVE,
    webhook_only="",
    example={"spec": {"runtimeClassName": "nvidia", "containers": [{"name": "t", "image": "ubuntu:22.04"}]}},
)
