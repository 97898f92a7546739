"""no-cdi-annotations: users do not inject CDI devices through pod annotations.

Restricted fields: metadata.annotations (of the pod, or of the pod template)
Denied: keys starting with "nvidia.cdi.k8s.io/" or "cdi.k8s.io/".
GPU system pods that need it run in exempt namespaces.
"""

from __future__ import annotations

from typing import Final

from ..objects import PodView
from ..rule import Rule, Trigger, Where
from ..types import Policy, Violation

ID = "no-cdi-annotations"
PREFIXES: Final[tuple[str, ...]] = ("nvidia.cdi.k8s.io/", "cdi.k8s.io/")


def check(view: PodView, policy: Policy) -> list[Violation]:
    return [
        Violation(
            rule=ID,
            path=f'{view.meta_path}.annotations["{key}"]',
            detail="injects devices through CDI, around the device plugin and the scheduler",
            fix=f'remove the annotation and request GPUs with resources.limits["{policy.resource_name}"]',
            value=f'"{value}"',
        )
        for key, value in view.annotations.items()
        if key.startswith(PREFIXES)
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="No pod (or template) annotation starting with `nvidia.cdi.k8s.io/` or `cdi.k8s.io/`.",
    why="Where the NVIDIA runtime's NRI plugin or CDI annotations are on, "
    "`nvidia.cdi.k8s.io/container.main: nvidia.com/gpu=all` injects every GPU, whatever the pod requested.",
    reads=("metadata.annotations",),
    triggers=(Trigger(Where.ANNOTATION, "cdi.k8s.io/"),),
    example={
        "metadata": {"annotations": {"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"}},
        "spec": {"containers": [{"name": "main"}]},
    },
)
