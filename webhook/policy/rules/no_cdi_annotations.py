"""no-cdi-annotations: users do not inject CDI devices through pod annotations.

Restricted fields: metadata.annotations (of the pod, or of the pod template)
Denied: keys starting with "nvidia.cdi.k8s.io/" or "cdi.k8s.io/".

Why: where the NVIDIA runtime's NRI plugin or CDI annotations are enabled, an annotation
such as `nvidia.cdi.k8s.io/container.main: nvidia.com/gpu=all` injects every GPU into the
container, whatever it requested. GPU system pods that need it run in exempt namespaces.
"""

from __future__ import annotations

from ..objects import PodView
from ..types import Policy, Rule, Violation

ID = "no-cdi-annotations"
PREFIXES = ("nvidia.cdi.k8s.io/", "cdi.k8s.io/")


def check(view: PodView, policy: Policy) -> list[Violation]:
    annotations = view.metadata.get("annotations")
    if not isinstance(annotations, dict):
        return []
    return [
        Violation(
            rule=ID,
            path=f'{view.meta_path}.annotations["{key}"]',
            detail="injects devices through CDI, around the device plugin and the scheduler",
            fix='remove the annotation and request GPUs with resources.limits["nvidia.com/gpu"]',
            value=f'"{value}"' if isinstance(value, str) else None,
        )
        for key, value in annotations.items()
        if isinstance(key, str) and key.startswith(PREFIXES)
    ]


RULE = Rule(
    id=ID,
    check=check,
    summary="no CDI device-injection annotations",
    triggers=lambda _p: ("cdi.k8s.io/",),
)
