"""no-visible-devices-env: nobody picks GPUs by hand with NVIDIA_VISIBLE_DEVICES.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].env[*]
  where name == "NVIDIA_VISIBLE_DEVICES" (case-sensitive, as the runtime reads it)
Allowed values: values that grant no device: "void", "none", "" (and lists the toolkit
resolves to none, e.g. "none,all"). Never `valueFrom`: its value is unknown at admission.
Every entry is checked, not only the last one the runtime honours, because `kubectl apply`
may drop one of two duplicates.
"""

from __future__ import annotations

from ..nvidia import VISIBLE_DEVICES, grants_devices
from ..objects import PodView
from ..quantity import describe
from ..types import Policy, Rule, Trigger, Violation, Where

ID = "no-visible-devices-env"
FIX = 'remove the variable and request GPUs with resources.limits["nvidia.com/gpu"]'


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        for entry in c.env(VISIBLE_DEVICES):
            if entry.value_from:
                detail = f"sets {VISIBLE_DEVICES} through valueFrom, which admission cannot check"
                out.append(c.violation(ID, f"env[{entry.index}]", detail, FIX, "valueFrom"))
            elif grants_devices(entry.value):
                detail = f"sets {VISIBLE_DEVICES}={describe(entry.value)}, which bypasses the device plugin"
                out.append(c.violation(ID, f"env[{entry.index}]", detail, FIX, describe(entry.value)))
    return out


RULE = Rule(
    id=ID,
    check=check,
    summary="No container sets `NVIDIA_VISIBLE_DEVICES` to a value that grants a device, nor through "
    "`valueFrom`; `void`, `none`, empty (and lists the toolkit resolves to none, such as `none,all`) are "
    "allowed. Every duplicate is checked; names are case-sensitive.",
    why="The variable bypasses the device plugin: the scheduler loses track of which cards are in use and "
    "pods fight over them. The toolkit splits on commas and the first keyword decides (`0,all` is all; "
    "`ALL` is a device id).",
    reads=("containers[*].env",),
    triggers=(Trigger(Where.CONTAINER_ENV, VISIBLE_DEVICES),),
    example={"spec": {"containers": [{"name": "t", "env": [{"name": VISIBLE_DEVICES, "value": "all"}]}]}},
)
