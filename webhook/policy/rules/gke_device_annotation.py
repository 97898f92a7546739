"""gke-device-annotation: GKE's device-injection annotation hands out no more GPUs than the pod asked for.

Restricted field: metadata.annotations["devices.gke.io/container.<name>"], a YAML list of
`- path: /dev/...` entries that GKE's NRI device injector gives container <name>.
Allowed: listing at most as many GPU device nodes (/dev/nvidia<N>) as the pod requests of the
GPU resource (its regular containers together, or its largest init container): the TCPX and
TCPXO samples give their network daemon the /dev/nvidia0-7 of the 8 GPUs the pod holds.
Control nodes (/dev/nvidiactl, /dev/nvidia-uvm) grant no GPU by themselves.
Denied: more GPU device nodes than that, e.g. any in a pod that requests no GPU. Every key under
devices.gke.io/ counts (`container.<name>`, `pod`, the bare key), and containerd's NRI
device-injector keys (devices.noderesource.dev/, devices.nri.io/) may list no GPU node at all.
Values are parsed as the injector parses them (YAML) and paths normalised (`/dev//nvidia0` and
`/dev/./nvidia0` are /dev/nvidia0); a value that is no such list is denied (unknown fails closed).
Which GPUs the list names cannot be checked at admission (the device plugin picks them later):
that residue is the injector's and is stated in docs/policy.md's threat model.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

import yaml

from ..hostpaths import normalise
from ..objects import PodView
from ..rule import Rule, Trigger, Where
from ..types import ContainerKind, Policy, Violation

ID = "gke-device-annotation"
PREFIX_ROOT: Final = "devices.gke.io/"


def requested(view: PodView) -> Decimal:
    """GPUs the pod holds, counted as the scheduler counts: sum of regular containers, or the
    largest init container if that is more."""
    regular = sum((c.gpu or Decimal(0) for c in view.containers if c.kind is ContainerKind.REGULAR), Decimal(0))
    init = max((c.gpu or Decimal(0) for c in view.containers if c.kind is ContainerKind.INIT), default=Decimal(0))
    return max(regular, init)


# containerd's NRI device injector (containerd/nri plugins/device-injector): the same list shape
# under its own keys; no published GPU workload uses it, so any GPU node there is denied.
NRI_PREFIXES: Final = ("devices.noderesource.dev/", "devices.nri.io/")
BARE_NRI: Final = frozenset(p[:-1] for p in NRI_PREFIXES)
GPU_NODE: Final = re.compile(r"/dev/nvidia(\d+)")
# libyaml's loader where PyYAML has it (its wheels do): the same YAML, about 9x faster than the
# pure-Python one, which cost 170 us per value.
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Device-injection keys read per pod: one per container is what GKE's samples use (TCPX: one).
# More are denied unread, so the YAML parsed per request stays small.
MAX_KEYS: Final = 64


def _devices(value: str) -> list[str] | None:
    """The device paths of an annotation's YAML list, normalised as the node resolves them
    (`//`, `.`, `..`), or None when it does not parse as such a list (unknown: denied)."""
    try:
        items = yaml.load(value, Loader=_LOADER)  # a safe loader, C or Python
    except yaml.YAMLError:
        return None
    if items is None:
        return []
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        path = item.get("path") if isinstance(item, dict) else None
        if not isinstance(path, str):
            return None
        out.append(normalise(path))
    return out


def _injecting(key: str) -> bool | None:
    """True for a GKE key, False for an NRI one, None for any other annotation."""
    if key == PREFIX_ROOT[:-1] or key.startswith(PREFIX_ROOT):
        return True
    return False if key in BARE_NRI or key.startswith(NRI_PREFIXES) else None


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    keys = [(key, gke) for key in view.annotations if (gke := _injecting(key)) is not None]
    if len(keys) > MAX_KEYS:
        return [
            Violation(
                rule=ID,
                path=f"{view.meta_path}.annotations",
                detail=f"holds {len(keys)} device-injection annotations, more than the {MAX_KEYS} gpu-policy reads",
                fix="give each container at most one devices.gke.io/container.<name> annotation",
                value=str(len(keys)),
            )
        ]
    held_by_pod: Decimal | None = None
    for key, gke in keys:
        value = view.annotations[key]
        paths = _devices(value)
        path = f'{view.meta_path}.annotations["{key}"]'
        if paths is None:
            out.append(
                Violation(
                    rule=ID,
                    path=path,
                    detail="is not a YAML list of {path: /dev/...} entries, so which devices it injects is unknown",
                    fix="write it as a list of `- path: /dev/...` entries, or remove it",
                    value=repr(value[:60]),
                )
            )
            continue
        devices = sorted({m[1] for p in paths if (m := GPU_NODE.fullmatch(p))}, key=int)
        if not devices:
            continue
        if held_by_pod is None:
            held_by_pod = requested(view)
        held = held_by_pod if gke else Decimal(0)
        if len(devices) <= held:
            continue
        shown = ", ".join(f"/dev/nvidia{d}" for d in devices)
        rest = key.partition("/")[2]
        target = (
            f'container "{rest[len("container.") :]}"'
            if rest.startswith("container.")
            else "every container of the pod"
        )
        out.append(
            Violation(
                rule=ID,
                path=path,
                detail=f"gives {target} {shown} but the pod requests {held} {policy.resource_name}: GPUs around "
                "the device plugin",
                fix=f'list no more GPU devices than the pod requests with resources.limits["{policy.resource_name}"]',
                value=shown,
            )
        )
    return out


RULE: Rule = Rule(
    webhook_only="the annotation is a YAML list, and CEL has no YAML parser",
    id=ID,
    check=check,
    summary="A `devices.gke.io` annotation (any key: `container.<name>`, `pod`, the bare key) lists no more "
    "`/dev/nvidia<N>` device nodes (paths normalised, YAML parsed) than the pod requests of the GPU resource; "
    "containerd's NRI device-injector keys (`devices.noderesource.dev/`, `devices.nri.io/`) list none; an "
    "unparsable list is denied.",
    why="GKE's NRI device injector gives the named container those device nodes whatever it requested; the TCPX "
    "samples use it for the GPUs the pod already holds, a pod without GPUs would take them from others.",
    reads=("metadata.annotations", "containers[*].resources"),
    triggers=(
        Trigger(Where.ANNOTATION, "devices.gke.io"),
        Trigger(Where.ANNOTATION, "devices.noderesource.dev"),
        Trigger(Where.ANNOTATION, "devices.nri.io"),
    ),
    example={
        "metadata": {
            "annotations": {"devices.gke.io/container.sidecar": "- path: /dev/nvidia0\n- path: /dev/nvidia1\n"}
        },
        "spec": {"containers": [{"name": "sidecar", "image": "ubuntu:22.04"}]},
    },
)
