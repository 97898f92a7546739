"""driver-capabilities-non-gpu (warn by default): no NVIDIA_DRIVER_CAPABILITIES=all outside GPU containers.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].env[*] where
  name == "NVIDIA_DRIVER_CAPABILITIES", in containers that request no GPU
Flagged: a value whose comma-separated list holds `all` (the toolkit's keyword, case-sensitive).
Not flagged: GPU containers (capabilities are theirs to choose), other values (`compute,utility`).
"""

from __future__ import annotations

from ..gpus import source
from ..objects import PodView
from ..quantity import describe
from ..rule import Rule, Trigger, Where
from ..types import Mode, Policy, Violation

ID = "driver-capabilities-non-gpu"
NAME = "NVIDIA_DRIVER_CAPABILITIES"


def check(view: PodView, policy: Policy) -> list[Violation]:
    return [
        c.violation(
            ID,
            f"{c.env_field}[{entry.index}]",
            f"sets {NAME}={describe(entry.value)} in a container that requests no GPU: should isolation lapse, "
            "it would get every driver capability (graphics, video, display) of every GPU its image names",
            f"remove {NAME} from containers without a GPU (or list only what a GPU container needs)",
            describe(entry.value),
        )
        for c in view.containers
        if NAME in c.watched and source(c, view, policy) is None  # the env first: it is rarely set
        for entry in c.env(NAME)
        if not entry.value_from and "all" in (item.strip() for item in entry.value.split(","))
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A container that requests no GPU does not set `NVIDIA_DRIVER_CAPABILITIES` to a list holding `all`.",
    why="Copied GPU settings in a non-GPU container are dormant only while isolation holds: if the mutating "
    "webhook is skipped (outage with `failurePolicy: Ignore`) the container gets every driver capability of "
    "every GPU its image names.",
    reads=("containers[*].env", "containers[*].resources"),
    triggers=(Trigger(Where.CONTAINER_ENV, NAME),),
    example={"spec": {"containers": [{"name": "web", "env": [{"name": NAME, "value": "all"}]}]}},
    default_mode=Mode.WARN,
)
