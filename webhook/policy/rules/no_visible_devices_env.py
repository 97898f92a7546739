"""no-visible-devices-env: nobody picks GPUs by hand with a runtime's device-list variable.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].env[*]
  where name == "NVIDIA_VISIBLE_DEVICES" (case-sensitive, as the runtime reads it)
Allowed values: exactly "void", "none" or "" (nvidia.NO_DEVICES), which grant nothing on every
toolkit; any other value ("none,all", " void", "void\x1c") is a grant to some reading of it
(docs/policy.md's boundary). Never `valueFrom`: its value is unknown at admission.
Every entry is checked, not only the last one the runtime honours, because `kubectl apply`
may drop one of two duplicates. With integrations.kai on, the one entry KAI Scheduler's
webhook gives a fraction pod's GPU container (a configMapKeyRef to KAI's ConfigMap) is allowed.

The other vendors' variables (webhook.policy.vendors), for each vendor that is on, the same way:
AMD_VISIBLE_DEVICES and every name starting with DOCKER_RESOURCE_ (the AMD Container Runtime reads
them all, the last one wins), allowed only as exactly "none", "void" or "" (which its parser
ignores: no GPU).
"""

from __future__ import annotations

from typing import Final

from ..cel import KAI_CONTAINER_NAME, KAI_POD, EnvGrant, env_checks, kai_entry, lit, quoted
from ..containers import Container
from ..gpus import kai_injected, kai_pod, resource_hint
from ..nvidia import NO_DEVICES, VISIBLE_DEVICES, grants_devices
from ..objects import PodView
from ..quantity import describe
from ..rule import NativeRule, Rule, Trigger, Where
from ..types import Policy, Violation
from ..vendors import AMD, OTHERS, Vendor, granting

ID = "no-visible-devices-env"
_KAI_FIX: Final = (
    "this is a KAI Scheduler GPU-sharing pod: the platform allows KAI's injected variable with "
    "integrations.kai.enabled in gpu-policy's config"
)


def _fix(c: Container, view: PodView, policy: Policy) -> str:
    if kai_pod(view, policy) is not None and not policy.kai:
        return _KAI_FIX
    return _request(c.gpu_field or f'{c.resources_field}.limits["{resource_hint(c, view, policy)}"]')


def _other_fix(c: Container, view: PodView, policy: Policy, vendor: Vendor) -> str:
    hint = resource_hint(c, view, policy)
    if not hint.startswith(vendor.domains):
        hint = vendor.resource
    return _request(f'{c.resources_field}.limits["{hint}"]')


def _request(field: str) -> str:
    return f"remove the variable and request GPUs with {field}"


def _others(c: Container, view: PodView, policy: Policy, out: list[Violation]) -> None:
    """The other vendors' granting variables in `c`, in env order."""
    found = [
        (entry, name, vendor)
        for name, entries in c.watched.items()
        if (vendor := granting(name, policy.vendors[1:])) is not None
        for entry in entries
    ]
    for entry, name, vendor in sorted(found, key=lambda f: f[0].index):
        if entry.value_from:
            detail = f"sets {name} through valueFrom, which admission cannot check"
            shown = "valueFrom"
        elif entry.value not in vendor.no_devices:
            detail = (
                f"sets {name}={describe(entry.value)}, which bypasses the device plugin: the {vendor.name} "
                "container runtime adds those GPUs"
            )
            shown = describe(entry.value)
        else:
            continue
        out.append(c.violation(ID, f"{c.env_field}[{entry.index}]", detail, _other_fix(c, view, policy, vendor), shown))


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    others = len(policy.vendors) > 1
    for c in view.containers:
        for entry in c.env(VISIBLE_DEVICES):
            if entry.value_from:
                if kai_injected(entry, c, view, policy):
                    continue  # KAI's binder fills it with the devices it allocated
                detail = f"sets {VISIBLE_DEVICES} through valueFrom, which admission cannot check"
                out.append(c.violation(ID, f"{c.env_field}[{entry.index}]", detail, _fix(c, view, policy), "valueFrom"))
            elif grants_devices(entry.value):
                detail = f"sets {VISIBLE_DEVICES}={describe(entry.value)}, which bypasses the device plugin"
                out.append(
                    c.violation(
                        ID, f"{c.env_field}[{entry.index}]", detail, _fix(c, view, policy), describe(entry.value)
                    )
                )
        if others and c.watched:
            _others(c, view, policy, out)
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy): the same entries denied with the same words, the
# fix naming the container's own resource (gpus.resource_hint; for AMD, AMD's resource unless the
# container asks for one of AMD's own).
def _plugin(hint: str) -> str:
    head, tail = _request('resources.limits["\0"]').split("\0")
    return f"{lit(head)} + {hint} + {lit(tail)}"


def _amd_hint(hint: str) -> str:
    domains = " || ".join(f"{hint}.startsWith({lit(d)})" for d in AMD.domains)
    return f"(({domains}) ? {hint} : {lit(AMD.resource)})"


def _amd(n: str) -> str:
    """vendors.granting for AMD, in CEL over the name `n`, while AMD is on."""
    names = [
        *(f"{n} == '{name}'" for name in AMD.grant_env),
        *(f"{n}.startsWith('{p}')" for p in AMD.grant_env_prefixes),
    ]
    return "(@amd@ && (" + " || ".join(names) + "))"


NATIVE: NativeRule = NativeRule(
    *env_checks(
        ID,
        (
            EnvGrant(
                match=lambda n: f"{n} == '{VISIBLE_DEVICES}'",
                allowed=NO_DEVICES,
                detail=lambda n, v: f"'sets ' + {n} + '=' + {quoted(v)} + ', which bypasses the device plugin'",
                fix=lambda n, hint: f"(variables.kaiPod && !@kai@) ? {lit(_KAI_FIX)} : {_plugin(hint)}",
                exempt=kai_entry,
            ),
            EnvGrant(
                match=_amd,
                allowed=AMD.no_devices,
                detail=lambda n, v: (
                    f"'sets ' + {n} + '=' + {quoted(v)} + ', which bypasses the device plugin: "
                    f"the {AMD.name} container runtime adds those GPUs'"
                ),
                fix=lambda n, hint: _plugin(_amd_hint(hint)),
            ),
        ),
        (("kaiContainer", KAI_CONTAINER_NAME), ("kaiPod", KAI_POD)),
    )
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="No container sets `NVIDIA_VISIBLE_DEVICES` to a value that grants a device, nor through "
    "`valueFrom`: only exactly `void`, `none` or empty are allowed (a list such as `none,all`, or a value "
    "with spaces or control characters, is a grant to some toolkit version). Every duplicate is checked; "
    "names are case-sensitive. With `integrations.kai` on, the `configMapKeyRef` KAI Scheduler's webhook "
    "gives a fraction pod's GPU container is allowed. The same for the other vendors that are on: "
    "`AMD_VISIBLE_DEVICES` and any `DOCKER_RESOURCE_*` variable (the AMD Container Runtime reads them all) only "
    "as exactly `none`, `void` or empty.",
    why="The variable bypasses the device plugin: the scheduler loses track of which cards are in use and "
    "pods fight over them. Toolkit versions read lists differently (the current one: the first keyword "
    "decides, so `0,all` is all and `ALL` is a device id), so only the exact no-device values are safe.",
    reads=("containers[*].env",),
    triggers=(
        Trigger(Where.GRANTING_ENV, VISIBLE_DEVICES),
        *(Trigger(Where.GRANTING_ENV, name) for v in OTHERS for name in v.grant_env),
        *(Trigger(Where.GRANTING_ENV_PREFIX, prefix) for v in OTHERS for prefix in v.grant_env_prefixes),
    ),
    example={"spec": {"containers": [{"name": "t", "env": [{"name": VISIBLE_DEVICES, "value": "all"}]}]}},
    native=NATIVE,
    webhook_only="",
)
