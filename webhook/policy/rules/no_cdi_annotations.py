"""no-cdi-annotations: users do not inject CDI devices through pod annotations.

Restricted fields: metadata.annotations (of the pod, or of the pod template)
Denied: keys starting with "nvidia.cdi.k8s.io/" or "cdi.k8s.io/", and those two bare (no slash).
Allowed: NVIDIA's Kata Containers GPU pass-through shape, a `cdi.k8s.io/` annotation whose value is
a list of `nvidia.com/pgpu=<id>` devices in a pod that runs under a Kata runtime class and requests
at least that many `nvidia.com/pgpu` from the sandbox device plugin. Inside the sandbox VM only
the devices the plugin passed through exist, so the annotation picks among the pod's own.
GPU system pods that need anything else run in exempt namespaces.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from ..objects import PodView
from ..quantity import QuantityError, parse_quantity
from ..rule import Rule, Trigger, Where
from ..types import Policy, Violation

ID = "no-cdi-annotations"
PREFIXES: Final[tuple[str, ...]] = ("nvidia.cdi.k8s.io/", "cdi.k8s.io/")
# The NVIDIA runtime's NRI plugin reads the bare key too, for every container of the pod (nri
# pkg/plugin GetEffectiveAnnotation: `<key>/container.<name>`, `<key>/pod`, then `<key>`).
BARE: Final = frozenset(p[:-1] for p in PREFIXES)


KATA_RESOURCE: Final = "nvidia.com/pgpu"


def _kata_passthrough(key: str, value: str, view: PodView) -> bool:
    if not key.startswith("cdi.k8s.io/") or not view.runtime_class.startswith("kata"):
        return False
    devices = [d.strip() for d in value.split(",")]
    if not devices or any(not d.startswith(KATA_RESOURCE + "=") or not d[len(KATA_RESOURCE) + 1 :] for d in devices):
        return False
    held = Decimal(0)
    for c in view.containers:
        if c.limits and KATA_RESOURCE in c.limits:
            try:
                held += parse_quantity(c.limits[KATA_RESOURCE])
            except QuantityError:
                return False  # gpu-quantity says what is wrong with it
    return len(devices) <= held


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
        if (key in BARE or key.startswith(PREFIXES)) and not _kata_passthrough(key, value, view)
    ]


RULE: Rule = Rule(
    webhook_only="it parses CDI device names (vendor/class=name) and Kata's pgpu form, which CEL cannot match exactly",
    id=ID,
    check=check,
    summary="No pod (or template) annotation `nvidia.cdi.k8s.io` or `cdi.k8s.io`, bare or starting with the key and "
    "`/`, but NVIDIA's "
    "Kata pass-through shape (`cdi.k8s.io/...: nvidia.com/pgpu=<id>` under a `kata*` runtime class, no more "
    "devices than the pod requests of `nvidia.com/pgpu`).",
    why="Where the NVIDIA runtime's NRI plugin or CDI annotations are on, "
    "`nvidia.cdi.k8s.io/container.main: nvidia.com/gpu=all` injects every GPU, whatever the pod requested.",
    reads=("metadata.annotations",),
    triggers=(Trigger(Where.ANNOTATION, "cdi.k8s.io"),),
    example={
        "metadata": {"annotations": {"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"}},
        "spec": {"containers": [{"name": "main"}]},
    },
)
