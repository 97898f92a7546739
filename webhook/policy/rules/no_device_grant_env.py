"""no-device-grant-env: nobody hands a container IMEX channels, MIG control or the node's
NVSwitch, InfiniBand, GDS and gdrcopy devices by hand.

Restricted fields: spec.{initContainers,containers,ephemeralContainers}[*].env[*]
  where name is NVIDIA_IMEX_CHANNELS, NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES or a
  gated variable (NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_GDRCOPY, NVIDIA_NVSWITCH)
Allowed values: the exact literals that grant nothing on every toolkit ("", "void", "none").
Never `valueFrom`.

Why every container, GPU or not: the toolkit reads NVIDIA_IMEX_CHANNELS on its own, whatever
NVIDIA_VISIBLE_DEVICES says (internal/config/image `CUDA.ImexChannelRequests`), and
nvidia-container-cli then creates /dev/nvidia-caps-imex-channels/channelN on the host: a way into
another job's NVLink memory domain. Kubernetes hands out IMEX channels through NVIDIA's DRA
driver (a ComputeDomain claim, delivered by CDI), never through this variable. The MIG control
variables give control of every MIG device of a GPU (the toolkit wants CAP_SYS_ADMIN for them).
The gated variables, `enabled` in a container with a GPU, add every such device node of the host
(internal/modifier/cdi.go gatedDevices): RDMA HCAs come from the network operator's resources,
GPUDirect Storage and NVSwitch from the node's own setup, never from the pod.
"""

from __future__ import annotations

from typing import Final

from ..cel import EnvGrant, env_checks, lit, quoted
from ..nvidia import GATED, IMEX_CHANNELS, MIG_CONFIG, MIG_MONITOR, NO_DEVICES, grants_devices
from ..objects import PodView
from ..quantity import describe
from ..rule import NativeRule, Rule, Trigger, Where
from ..types import Policy, Violation

ID = "no-device-grant-env"
NAMES = (IMEX_CHANNELS, MIG_CONFIG, MIG_MONITOR, *GATED)
UNCOUNTED: Final = ", which hands out devices no scheduler counted"
IMEX_FIX: Final = "remove the variable; IMEX channels come from a ComputeDomain claim of NVIDIA's DRA driver"
MIG_FIX: Final = "remove the variable; MIG is configured by the GPU operator's MIG manager on the node"
GATED_FIX: Final = (
    "remove the variable: it adds every such device of the node; RDMA devices come from the network operator's "
    "resources (rdma/..., nvidia.com/hostdev), GPUDirect Storage and NVSwitch from the node's own setup"
)


def _fix(name: str) -> str:
    return IMEX_FIX if name == IMEX_CHANNELS else GATED_FIX if name in GATED else MIG_FIX


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for c in view.containers:
        if not c.watched:
            continue
        for name in NAMES:
            for entry in c.env(name):
                if entry.value_from:
                    detail = f"sets {name} through valueFrom, which admission cannot check"
                    shown = "valueFrom"
                elif grants_devices(entry.value):
                    detail = f"sets {name}={describe(entry.value)}{UNCOUNTED}"
                    shown = describe(entry.value)
                else:
                    continue
                out.append(c.violation(ID, f"{c.env_field}[{entry.index}]", detail, _fix(name), shown))
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy): the same entries, the same words.
def _family(names: tuple[str, ...], fix: str) -> EnvGrant:
    return EnvGrant(
        match=lambda n: "(" + " || ".join(f"{n} == '{name}'" for name in names) + ")",
        allowed=NO_DEVICES,
        detail=lambda n, v: f"'sets ' + {n} + '=' + {quoted(v)} + {lit(UNCOUNTED)}",
        fix=lambda n, _hint: lit(fix),
    )


NATIVE: NativeRule = NativeRule(
    *env_checks(
        ID,
        (
            _family((IMEX_CHANNELS,), IMEX_FIX),
            _family((MIG_CONFIG, MIG_MONITOR), MIG_FIX),
            _family(GATED, GATED_FIX),
        ),
    )
)


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="No container sets `NVIDIA_IMEX_CHANNELS`, `NVIDIA_MIG_CONFIG_DEVICES`, `NVIDIA_MIG_MONITOR_DEVICES` "
    "or a gated variable (`NVIDIA_GDS`, `NVIDIA_MOFED`, `NVIDIA_GDRCOPY`, `NVIDIA_NVSWITCH`) to anything but exactly "
    "`void`, `none` or empty, nor through `valueFrom`.",
    why="The toolkit reads `NVIDIA_IMEX_CHANNELS` whatever `NVIDIA_VISIBLE_DEVICES` says and creates the IMEX "
    "channel devices on the host; the MIG variables give control of every MIG device. Kubernetes hands IMEX "
    "channels out through DRA ComputeDomains; a gated variable `enabled` adds every NVSwitch, HCA, nvidia-fs or "
    "gdrdrv node of the host.",
    reads=("containers[*].env",),
    triggers=tuple(Trigger(Where.GRANTING_ENV, name) for name in NAMES),
    example={"spec": {"containers": [{"name": "t", "env": [{"name": IMEX_CHANNELS, "value": "0"}]}]}},
    native=NATIVE,
    webhook_only="",
)
