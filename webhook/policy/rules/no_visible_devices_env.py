"""no-visible-devices-env: nobody picks GPUs by hand with NVIDIA_VISIBLE_DEVICES.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].env[*]
  where name == "NVIDIA_VISIBLE_DEVICES" (case-sensitive, as the runtime reads it)
Allowed values: values that grant no device: "void", "none", "" (and lists the toolkit
resolves to none, e.g. "none,all"). Never `valueFrom`: its value is unknown at admission.

Why: the variable bypasses the device plugin. The scheduler loses track of which cards
are in use and two pods end up on the same GPU. Every entry is checked, not only the last
one the runtime honours, because `kubectl apply` may drop one of two duplicates.
"""

from __future__ import annotations

from ..nvidia import VISIBLE_DEVICES, grants_devices
from ..objects import PodView, env_entries
from ..quantity import describe
from ..types import Policy, Rule, Violation

ID = "no-visible-devices-env"
FIX = 'remove the variable and request GPUs with resources.limits["nvidia.com/gpu"]'


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        for i, entry in env_entries(c, VISIBLE_DEVICES):
            if entry.get("valueFrom") is not None:
                detail = f"sets {VISIBLE_DEVICES} through valueFrom, which admission cannot check"
                out.append(c.violation(ID, f"env[{i}]", detail, FIX, "valueFrom"))
                continue
            value = entry.get("value") or ""
            if grants_devices(value):
                detail = f"sets {VISIBLE_DEVICES}={describe(value)}, which bypasses the device plugin"
                out.append(c.violation(ID, f"env[{i}]", detail, FIX, describe(value)))
    return out


RULE = Rule(
    id=ID,
    check=check,
    summary="no NVIDIA_VISIBLE_DEVICES that grants GPUs behind the scheduler's back",
    triggers=lambda _p: (VISIBLE_DEVICES,),
)
