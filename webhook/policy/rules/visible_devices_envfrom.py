"""visible-devices-envfrom: envFrom must not be able to set a device-granting variable where the
node's environment carries the container's GPU.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].envFrom[*].prefix
Flagged: an envFrom item of a container whose GPU comes through the node's environment (a
device-plugin or companion resource, KAI's entry) whose prefix does not rule out a granting
variable (NVIDIA_VISIBLE_DEVICES, NVIDIA_IMEX_CHANNELS, the MIG control variables) that the
container does not set explicitly in `env`.

Why deny, not look the ConfigMap up: the kubelet reads the ConfigMap or Secret when the container
starts, and its owner can change it any time after admission; a look-up proves nothing. The
kubelet merges envFrom first, then the device plugin's variables, then `env`, so a key there
overrides the plugin's NVIDIA_VISIBLE_DEVICES and the container sees every GPU. A prefix that
no granting name starts with (`APP_`), or the keys listed with `env[].valueFrom`, keeps the
ConfigMap and rules that out. With integrations.kai on, the `<prefix>-<index>-evar` ConfigMap
KAI's webhook gives a fraction container is trusted as its configMapKeyRef is. Containers
isolation voids are not flagged: isolation appends its
`void` entries after envFrom (webhook.policy.mutations.isolate_non_gpu).
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import EnvFromOpen, lit
from ..containers import Container, loads
from ..gpus import kai_env_from, plugin_env_gpu
from ..nvidia import GRANTING, prefix_reaches
from ..objects import PodView
from ..rule import GPU_POD, NativeRule, Rule
from ..types import Policy, Violation

ID = "visible-devices-envfrom"
DETAIL: Final = (
    ", which the NVIDIA runtime reads as the devices to add, over the device plugin's (the owner can change it "
    "after admission)"
)
FIX: Final = (
    "load the keys the container needs one by one with env[].valueFrom.secretKeyRef or configMapKeyRef, each "
    "keeping its name; or give ",
    " a prefix such as APP_ (which renames every key); where the GPU nodes' runtime reads no device request from "
    "env, the platform sets nodeProfile.toolkitReadsEnv: false",
)


def reached(c: Container, prefix: str) -> tuple[str, ...]:
    """The granting variables an envFrom item with `prefix` can still set in `c` (an explicit
    `env` entry of the same name wins over envFrom)."""
    return tuple(name for name in prefix_reaches(prefix) if name not in c.watched)


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    if not policy.toolkit_reads_env:
        return out  # nodeProfile: the runtime takes no device request from env
    for c in view.containers:
        if not c.raw_env_from or not plugin_env_gpu(c, view, policy):
            continue
        for i, (kind, name, prefix) in enumerate(c.env_from):
            names = reached(c, prefix)
            if not names or (kind == "ConfigMap" and kai_env_from(name, c, view, policy)):
                continue
            out.append(
                c.violation(
                    ID,
                    f"envFrom[{i}]",
                    f"{loads(kind, name, prefix)}: a key there becomes {' or '.join(names)}{DETAIL}",
                    f"envFrom[{i}]".join(FIX),
                    prefix,
                )
            )
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy): per container list, the first container whose GPU
# comes through the node's environment (gpus.plugin_env_gpu) with an envFrom item that reaches a
# granting name its env does not set (KAI's own ConfigMap aside), as the loop above finds it.
_GRANTING: Final = "[" + ", ".join(lit(n) for n in GRANTING) + "]"


def _reaches(c: str, prefix: str) -> str:
    """reached(): the granting names `prefix` reaches that container `c`'s env does not set."""
    return f"{_GRANTING}.filter(n, n.startsWith({prefix}) && !(has({c}.env) && {c}.env.exists(e, e.name == n)))"


def _gpu_on(c: str) -> str:
    return f"(@toolkitEnv@ && {cel.plugin_env_gpu(c)})"


NATIVE: Final = NativeRule(*cel.env_from_checks(ID, EnvFromOpen(_reaches, _gpu_on, DETAIL, FIX)))


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="Where the GPU nodes' runtime reads device requests from env (`nodeProfile.toolkitReadsEnv`, its "
    "default): in a container whose GPU comes through the node's environment (device-plugin or companion "
    "resource), every `envFrom` item has a `prefix` that rules out `NVIDIA_VISIBLE_DEVICES`, "
    "`NVIDIA_IMEX_CHANNELS`, the MIG control and gated variables (unless `env` sets them explicitly).",
    why="The kubelet puts envFrom before the device plugin's variables but its keys are the ConfigMap owner's to "
    "change after admission: a `NVIDIA_VISIBLE_DEVICES` key there overrides the plugin and the container sees "
    "every GPU. Containers isolation voids are safe: its entry comes last.",
    reads=("containers[*].envFrom", "containers[*].env", "containers[*].resources"),
    triggers=GPU_POD,
    switch="nodeProfile.toolkitReadsEnv",
    native=NATIVE,
    webhook_only="",
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
)
