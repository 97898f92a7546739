"""amd-runtime-envfrom (deny, while vendors.amd.runtimeEnv is on): where nodes run the AMD Container
Runtime, envFrom must not be able to set a variable it reads as a device list.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].envFrom[*].prefix
Flagged (AMD on): an envFrom item whose prefix does not rule out `DOCKER_RESOURCE_*`, or
`AMD_VISIBLE_DEVICES` where `env` does not set it (isolation's own `none` sets it in every container
without an AMD GPU, and the validating webhook sees the pod after it).

Why: the AMD runtime (ROCm/container-toolkit internal/oci/oci.go getAMDEnv) reads every variable
named AMD_VISIBLE_DEVICES or starting with DOCKER_RESOURCE_, the last one winning, and the kubelet
hands the pod's variables to the runtime in Go map order (kubelet_pods.go makeEnvironmentVariables),
so a ConfigMap key DOCKER_RESOURCE_X=all may come after isolation's AMD_VISIBLE_DEVICES=none and
win. A look-up proves nothing: the owner may change the ConfigMap after admission. It and AMD's
isolation follow one switch, vendors.amd.runtimeEnv (off by default: the AMD GPU operator does not
install that runtime, only `amd-ctk` for Docker does): both assume the same nodes, so a fleet
without the runtime gets neither an AMD variable in every container nor a refused envFrom.
"""

from __future__ import annotations

from typing import Final

from .. import cel
from ..cel import EnvFromOpen, lit
from ..containers import loads
from ..gpus import kai_env_from
from ..objects import PodView
from ..rule import NativeRule, Rule, Trigger, Where
from ..types import Policy, Violation
from ..vendors import AMD, prefix_reaches

ID = "amd-runtime-envfrom"
DETAIL: Final = ", which the AMD Container Runtime reads as the GPUs to add (the owner can change it after admission)"
FIX: Final = (
    "give ",
    " a prefix that rules out DOCKER_RESOURCE_, such as APP_, or list the keys the container needs with "
    "env[].valueFrom",
)


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    if AMD not in policy.vendors or not policy.amd_runtime_env:
        return out
    for c in view.containers:
        if not c.raw_env_from:
            continue
        for i, (kind, name, prefix) in enumerate(c.env_from):
            names = [n for n in prefix_reaches(prefix, AMD) if n.endswith("*") or n not in c.watched]
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


# ---- The CEL twin (a ValidatingAdmissionPolicy): with AMD on, per container list, the first
# container with an envFrom item whose prefix reaches AMD's names (vendors.prefix_reaches: the
# exact names env does not set, then the DOCKER_RESOURCE_* family), KAI's own ConfigMap aside.
_NAMES: Final = "[" + ", ".join(lit(n) for n in AMD.grant_env) + "]"
_FAMILIES: Final = "[" + ", ".join(lit(p) for p in AMD.grant_env_prefixes) + "]"


def _reaches(c: str, prefix: str) -> str:
    return (
        f"{_NAMES}.filter(n, n.startsWith({prefix}) && !(has({c}.env) && {c}.env.exists(e, e.name == n))) + "
        f"{_FAMILIES}.filter(p, p.startsWith({prefix}) || {prefix}.startsWith(p)).map(p, p + '*')"
    )


def _amd_on(_c: str) -> str:
    return "@amdRuntime@"


NATIVE: Final = NativeRule(*cel.env_from_checks(ID, EnvFromOpen(_reaches, _amd_on, DETAIL, FIX)))


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="Where nodes run the AMD Container Runtime (`vendors.amd.runtimeEnv`, off by default): no `envFrom` "
    "item whose `prefix` "
    "could set a `DOCKER_RESOURCE_*` variable, or `AMD_VISIBLE_DEVICES` where `env` does not set it.",
    why="That runtime reads every such variable and the last one wins, but the kubelet passes the pod's variables "
    "in no defined order, so a ConfigMap key can beat isolation's `AMD_VISIBLE_DEVICES=none`.",
    reads=("containers[*].envFrom", "containers[*].env"),
    triggers=(Trigger(Where.ENV_FROM),),
    native=NATIVE,
    webhook_only="",
    example={"spec": {"containers": [{"name": "t", "envFrom": [{"configMapRef": {"name": "settings"}}]}]}},
    switch="vendors.amd.runtimeEnv",
)
