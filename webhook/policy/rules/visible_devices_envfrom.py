"""visible-devices-envfrom (warn by default): envFrom in a GPU pod can carry NVIDIA_VISIBLE_DEVICES.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].envFrom in GPU pods
Flagged: a container with envFrom and no explicit NVIDIA_VISIBLE_DEVICES entry, unless
isolation gives it one (a container that requests no GPU, with isolation on). An explicit
`env` entry wins over envFrom, which is why isolated containers are safe and why the fix is
an explicit entry or a clean ConfigMap.
"""

from __future__ import annotations

from ..containers import EnvSource
from ..gpus import gpu_pod, isolated
from ..nvidia import VISIBLE_DEVICES
from ..objects import PodView
from ..rule import GPU_POD, Rule
from ..types import Mode, Policy, Violation

ID = "visible-devices-envfrom"


def _sources(env_from: tuple[EnvSource, ...]) -> str:
    return ", ".join(f'{kind} "{name}"' for kind, name in env_from if kind) or "its sources"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not gpu_pod(view, policy):  # first: envFrom is walked (and shape-checked) only when read
        return []
    return [
        c.violation(
            ID,
            "envFrom",
            f"loads {_sources(c.env_from)}, which admission cannot see: a {VISIBLE_DEVICES} key there "
            "would pick GPUs behind the device plugin's back",
            f"make sure they hold no {VISIBLE_DEVICES} key (an explicit env entry wins over envFrom)",
        )
        for c in view.containers
        if c.env_from and VISIBLE_DEVICES not in c.watched and not isolated(c, view, policy)
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="In GPU pods, a container with `envFrom` and no explicit `NVIDIA_VISIBLE_DEVICES` entry "
    "(containers that isolation gives `void` are fine).",
    why="A ConfigMap or Secret key named `NVIDIA_VISIBLE_DEVICES` reaches the container at run time, unseen "
    "by admission; an explicit `env` entry wins over `envFrom`.",
    reads=("containers[*].envFrom", "containers[*].env", "containers[*].resources", "nodeSelector", "affinity"),
    triggers=GPU_POD,
    example={
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "envFrom": [{"configMapRef": {"name": "settings"}}],
                }
            ]
        }
    },
    default_mode=Mode.WARN,
)
