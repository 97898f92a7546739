"""gke-device-annotation: GKE's device-injection annotation hands out no more GPUs than the pod asked for.

Restricted field: metadata.annotations["devices.gke.io/container.<name>"], a YAML list of
`- path: /dev/...` entries that GKE's NRI device injector gives container <name>.
Allowed: listing at most as many GPU device nodes (/dev/nvidia<N>) as the pod requests of the
GPU resource (its regular containers together, or its largest init container): the TCPX and
TCPXO samples give their network daemon the /dev/nvidia0-7 of the 8 GPUs the pod holds.
Control nodes (/dev/nvidiactl, /dev/nvidia-uvm) grant no GPU by themselves.
Denied: more GPU device nodes than that, e.g. any in a pod that requests no GPU.
"""

from __future__ import annotations

from decimal import Decimal

from ..gpus import GKE_DEVICES as PREFIX
from ..gpus import GPU_DEVICE_NODE as _GPU_NODE
from ..objects import PodView
from ..rule import Rule, Trigger, Where
from ..types import ContainerKind, Policy, Violation

ID = "gke-device-annotation"


def requested(view: PodView) -> Decimal:
    """GPUs the pod holds, counted as the scheduler counts: sum of regular containers, or the
    largest init container if that is more."""
    regular = sum((c.gpu or Decimal(0) for c in view.containers if c.kind is ContainerKind.REGULAR), Decimal(0))
    init = max((c.gpu or Decimal(0) for c in view.containers if c.kind is ContainerKind.INIT), default=Decimal(0))
    return max(regular, init)


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    for key, value in view.annotations.items():
        if not key.startswith(PREFIX):
            continue
        devices = sorted(set(_GPU_NODE.findall(value)), key=int)
        held = requested(view)
        if len(devices) <= held:
            continue
        shown = ", ".join(f"/dev/nvidia{d}" for d in devices)
        out.append(
            Violation(
                rule=ID,
                path=f'{view.meta_path}.annotations["{key}"]',
                detail=f'gives container "{key[len(PREFIX) :]}" {shown} but'
                f" the pod requests {held} "
                f"{policy.resource_name}: GPUs around the device plugin",
                fix=f'list no more GPU devices than the pod requests with resources.limits["{policy.resource_name}"]',
                value=shown,
            )
        )
    return out


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A `devices.gke.io/container.<name>` annotation lists no more `/dev/nvidia<N>` device nodes than the "
    "pod requests of the GPU resource.",
    why="GKE's NRI device injector gives the named container those device nodes whatever it requested; the TCPX "
    "samples use it for the GPUs the pod already holds, a pod without GPUs would take them from others.",
    reads=("metadata.annotations", "containers[*].resources"),
    triggers=(Trigger(Where.ANNOTATION, "devices.gke.io/"),),
    example={
        "metadata": {
            "annotations": {"devices.gke.io/container.sidecar": "- path: /dev/nvidia0\n- path: /dev/nvidia1\n"}
        },
        "spec": {"containers": [{"name": "sidecar", "image": "ubuntu:22.04"}]},
    },
)
