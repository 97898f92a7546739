"""visible-devices-envfrom (warn by default): envFrom in a GPU pod can carry NVIDIA_VISIBLE_DEVICES.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].envFrom in GPU pods
Flagged: a container with envFrom and no explicit NVIDIA_VISIBLE_DEVICES entry, unless the
isolate-non-gpu mutation gives it one (a container that requests no GPU, with isolation on).

Why: a ConfigMap or Secret key named NVIDIA_VISIBLE_DEVICES reaches the container at run
time, and admission never sees the ConfigMap's contents. An explicit `env` entry wins over
envFrom, which is why isolated containers are safe and why the fix is an explicit entry or a
clean ConfigMap.
"""

from __future__ import annotations

from ..mutations.isolate_non_gpu import will_isolate
from ..nvidia import VISIBLE_DEVICES
from ..objects import PodView
from ..types import Mode, Policy, Rule, Violation, gpu_pod

ID = "visible-devices-envfrom"


def _sources(env_from: list[object]) -> str:
    names = []
    for source in env_from:
        if isinstance(source, dict):
            for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                ref = source.get(field)
                if isinstance(ref, dict):
                    names.append(f'{kind} "{ref.get("name", "")}"')
    return ", ".join(names) or "its sources"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not any(c.raw.get("envFrom") for c in view.containers) or not view.is_gpu_pod(policy):
        return []
    out: list[Violation] = []
    for c in view.containers:
        env_from = c.raw.get("envFrom")
        if not env_from or not isinstance(env_from, list) or VISIBLE_DEVICES in c.watched:
            continue
        if will_isolate(c, policy):
            continue
        out.append(
            c.violation(
                ID,
                "envFrom",
                f"loads {_sources(env_from)}, which admission cannot see: a {VISIBLE_DEVICES} key there "
                "would pick GPUs behind the device plugin's back",
                f"make sure they hold no {VISIBLE_DEVICES} key (an explicit env entry wins over envFrom)",
            )
        )
    return out


RULE = Rule(
    id=ID,
    check=check,
    summary="envFrom in GPU pods may smuggle NVIDIA_VISIBLE_DEVICES (warn)",
    triggers=gpu_pod,
    default_mode=Mode.WARN,
)
