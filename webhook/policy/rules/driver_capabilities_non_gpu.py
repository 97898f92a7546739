"""driver-capabilities-non-gpu (warn by default): no NVIDIA_DRIVER_CAPABILITIES=all outside GPU containers.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].env[*] where
  name == "NVIDIA_DRIVER_CAPABILITIES", in containers that request no GPU
Flagged: a value whose comma-separated list holds `all` (the toolkit's keyword, case-sensitive).
Not flagged: GPU containers (capabilities are theirs to choose), other values (`compute,utility`).
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import lit
from ..gpus import source
from ..objects import PodView
from ..quantity import describe
from ..rule import NativeRule, Rule, Trigger, Where
from ..types import Mode, Policy, Violation

ID = "driver-capabilities-non-gpu"
NAME = "NVIDIA_DRIVER_CAPABILITIES"
DETAIL: Final = (
    " in a container that requests no GPU: should isolation lapse, it would get every driver capability "
    "(graphics, video, display) of every GPU its image names"
)
FIX: Final = f"remove {NAME} from containers without a GPU (or list only what a GPU container needs)"


def check(view: PodView, policy: Policy) -> list[Violation]:
    return [
        c.violation(
            ID,
            f"{c.env_field}[{entry.index}]",
            f"sets {NAME}={describe(entry.value)}{DETAIL}",
            FIX,
            describe(entry.value),
        )
        for c in view.containers
        if NAME in c.watched and source(c, view, policy) is None  # the env first: it is rarely set
        for entry in c.env(NAME)
        if not entry.value_from and "all" in (item.strip() for item in entry.value.split(","))
    ]


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container that gets
# no GPU (gpus.source without the cluster view: any DRA claim may be a GPU, and the view's answer
# for a claim reaches the webhook, which every GPU pod is still sent) with an entry whose value's
# comma-separated items hold `all` once str.strip() has trimmed them (cel.SPACE is its whitespace).
_ALL: Final = lit("(^|,)[" + cel.SPACE + "]*all[" + cel.SPACE + "]*(,|$)")


def _all(e: str) -> str:
    return f"({e}.name == {lit(NAME)} && !has({e}.valueFrom) && has({e}.value) && {e}.value.matches({_ALL}))"


def _then(c: str, name: str) -> tuple[tuple[tuple[str, str], ...], str]:
    j = f"variables.entry{name}"
    tail = (
        f"'.env[' + string({j}) + '] sets {NAME}=' + {cel.quoted(f'{c}.env[{j}].value')} + "
        f"{lit(DETAIL + '; fix: ')} + {cel.agent_lead()} + {lit(FIX)}"
    )
    return ((f"entry{name}", f"lists.range(size({c}.env)).filter(j, {_all(f'{c}.env[j]')})[0]"),), tail


def _picks(c: str) -> str:
    return (
        f"has({c}.env) && {c}.env.exists(e, {_all('e')}) && !{cel.gets_gpu_container(c)} && "
        f"{c}.name != ({cel.KAI_CONTAINER_NAME})"
    )


NATIVE: Final = NativeRule(*cel.first_container_checks(ID, cel.First("all", _picks, _then)))


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A container that requests no GPU does not set `NVIDIA_DRIVER_CAPABILITIES` to a list holding `all`.",
    why="Copied GPU settings in a non-GPU container are dormant only while isolation holds: if the mutating "
    "webhook is skipped (outage with `failurePolicy: Ignore`) the container gets every driver capability of "
    "every GPU its image names.",
    reads=("containers[*].env", "containers[*].resources"),
    triggers=(Trigger(Where.CONTAINER_ENV, NAME),),
    native=NATIVE,
    webhook_only="",
    example={"spec": {"containers": [{"name": "web", "env": [{"name": NAME, "value": "all"}]}]}},
    default_mode=Mode.WARN,
)
