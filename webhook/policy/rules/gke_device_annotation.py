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
Which GPUs the list names is decided later (the device plugin picks them): with the cluster view
a pod may name device nodes only when it holds every GPU of each node it may land on; without it
the count alone is checked, the residue docs/policy.md's boundary states.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

import yaml

from ..hostpaths import normalise
from ..objects import PodView
from ..preflight import analyse
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


# containerd's NRI device injector (containerd/nri plugins/device-injector getAnnotation): each
# domain read as `<domain>/container.<name>`, `<domain>/pod` or the bare `<domain>`, in both the
# current and the old spelling. Devices are named by major:minor (the path is cosmetic), CDI
# devices by name, mounts are host bind mounts Pod Security Admission never sees: none of it is
# a GPU workload's (none published uses it), so any entry is denied; a node agent that needs the
# injector runs exempt.
NRI_DOMAINS: Final = (
    "devices.noderesource.dev",
    "devices.nri.io",
    "cdi-devices.noderesource.dev",
    "cdi-devices.nri.io",
    "mounts.noderesource.dev",
    "mounts.nri.io",
)
NRI_PREFIXES: Final = tuple(d + "/" for d in NRI_DOMAINS)
BARE_NRI: Final = frozenset(NRI_DOMAINS)
# CRI-O's device annotation (cri-o server/container_create_linux.go specAddDevices, allowed for the
# default runtime handler): `host[:container[:perms]]`, honoured for what allowed_devices lists,
# by default only these two, which no GPU is.
CRIO_DEVICES: Final = frozenset({"devices.crio.io", "io.kubernetes.cri-o.Devices"})
CRIO_DEFAULT_ALLOWED: Final = frozenset({"/dev/fuse", "/dev/net/tun"})
# HAMi's scheduler-to-device-plugin handshake (HAMi pkg/util GetPendingPod, plugin Allocate): the
# device plugin serves the first pending pod on the node that carries them, with the GPUs they
# name. Only HAMi's scheduler writes them, by UPDATE after creation; on a CREATE they are forged.
HAMI_HANDSHAKE: Final = ("hami.io/vgpu-node", "hami.io/bind-phase", "hami.io/bind-time")
HAMI_DEVICES_SUFFIXES: Final = ("-devices-to-allocate", "-devices-allocated")
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


def _empty(value: str) -> bool:
    """An injector value that asks for nothing: empty, null or an empty list."""
    try:
        return yaml.load(value, Loader=_LOADER) in (None, [])
    except yaml.YAMLError:
        return False


def _injecting(key: str) -> bool | None:
    """True for a GKE key, False for an NRI one, None for any other annotation."""
    if key == PREFIX_ROOT[:-1] or key.startswith(PREFIX_ROOT):
        return True
    return False if key in BARE_NRI or key.startswith(NRI_PREFIXES) else None


def _crio_devices(value: str) -> list[str]:
    """The host devices of a CRI-O device annotation beyond its default allowed_devices."""
    hosts = [entry.split(":")[0].strip() for entry in value.split(",") if entry.strip()]
    return [h for h in hosts if normalise(h) not in CRIO_DEFAULT_ALLOWED]


def _hami_handshake(key: str) -> bool:
    return key in HAMI_HANDSHAKE or (key.startswith("hami.io/") and key.endswith(HAMI_DEVICES_SUFFIXES))


def _other_annotations(view: PodView, policy: Policy) -> list[Violation]:
    """CRI-O's device annotation beyond /dev/fuse and /dev/net/tun; HAMi's handshake on a Pod."""
    out = []
    for key, value in view.annotations.items():
        path = f'{view.meta_path}.annotations["{key}"]'
        if key in CRIO_DEVICES:
            extra = _crio_devices(value)
            if extra:
                out.append(
                    Violation(
                        rule=ID,
                        path=path,
                        detail=f"gives the pod {', '.join(extra)}: CRI-O adds them to its containers, around the "
                        "device plugin, wherever its allowed_devices lists them",
                        fix="remove the annotation (only /dev/fuse and /dev/net/tun, CRI-O's defaults, are "
                        f'allowed) and request GPUs with resources.limits["{policy.resource_name}"]',
                        value=repr(value[:60]),
                    )
                )
        elif view.kind == "Pod" and _hami_handshake(key):
            out.append(
                Violation(
                    rule=ID,
                    path=path,
                    detail="is HAMi's scheduler-to-device-plugin handshake, written by HAMi's scheduler after "
                    "creation: set by the pod, it picks which physical GPUs HAMi's device plugin hands over",
                    fix="remove it; HAMi's scheduler sets it when it binds the pod",
                    value=repr(value[:60]),
                )
            )
    return out


def check(view: PodView, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    if not view.annotations:
        return out
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
        path = f'{view.meta_path}.annotations["{key}"]'
        if not gke:
            if not _empty(value):
                out.append(_nri(key, value, path))
            continue
        paths = _devices(value)
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
        held = held_by_pod
        if len(devices) <= held:
            whole = _whole_node(view, policy, held)
            if whole is None:
                continue
            out.append(
                Violation(
                    rule=ID,
                    path=path,
                    detail=f"names {', '.join(f'/dev/nvidia{d}' for d in devices)}, but the pod holds {held} of the "
                    f"{whole} GPUs of a node it may land on: which of them the device plugin gives it is decided "
                    "later, so the names may be GPUs of other pods",
                    fix=f"hold every GPU of the node ({whole}) when naming its device nodes, as GKE's TCPX samples do",
                    value=", ".join(f"/dev/nvidia{d}" for d in devices),
                )
            )
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
    return out + _other_annotations(view, policy)


def _whole_node(view: PodView, policy: Policy, held: Decimal) -> Decimal | None:
    """With the cluster view: the GPU count of a node the pod may land on that has more GPUs
    than it holds (so a named device node may be another pod's), or None."""
    found = analyse(view, policy)
    if found is None:
        return None
    sizes = [g.resources.get(policy.resource_name, Decimal(0)) for g, _names in found.matched]
    larger = [n for n in sizes if n > held]
    return max(larger) if larger else None


def _nri(key: str, value: str, path: str) -> Violation:
    what = "host bind mounts" if key.startswith("mounts.") else "devices"
    return Violation(
        rule=ID,
        path=path,
        detail=f"makes containerd's NRI device injector add {what} to the container, around the device plugin "
        "and Pod Security Admission (devices by major:minor, whatever the path says)",
        fix="remove it; a node agent that needs the injector runs in an exempt namespace or under an exempt service "
        "account",
        value=repr(value[:60]),
    )


RULE: Rule = Rule(
    webhook_only="the annotation is a YAML list, and CEL has no YAML parser",
    id=ID,
    check=check,
    summary="Device-injection annotations: a `devices.gke.io` annotation (any key: `container.<name>`, `pod`, the "
    "bare key) lists no more `/dev/nvidia<N>` device nodes (paths normalised, YAML parsed) than the pod requests of "
    "the GPU resource, and (with the cluster view) names them only in a pod that holds every GPU of its node; "
    "containerd's NRI device-injector keys (`devices.`, `cdi-devices.`, `mounts.` under `noderesource.dev` and "
    "`nri.io`, bare or with `/...`) hold nothing; CRI-O's `devices.crio.io` names only `/dev/fuse` and "
    "`/dev/net/tun`; a Pod is created without HAMi's scheduler handshake (`hami.io/vgpu-node`, `bind-phase`, "
    "`*-devices-to-allocate`); an unparsable list is denied.",
    why="GKE's NRI device injector gives the named container those device nodes whatever it requested; the TCPX "
    "samples use it for the GPUs the pod already holds, a pod without GPUs would take them from others.",
    reads=("metadata.annotations", "containers[*].resources"),
    triggers=(
        Trigger(Where.ANNOTATION, "devices.gke.io"),
        Trigger(Where.ANNOTATION, "devices.noderesource.dev"),
        Trigger(Where.ANNOTATION, "devices.nri.io"),
        Trigger(Where.ANNOTATION, "mounts.noderesource.dev"),
        Trigger(Where.ANNOTATION, "mounts.nri.io"),
        Trigger(Where.ANNOTATION, "devices.crio.io"),
        Trigger(Where.ANNOTATION, "io.kubernetes.cri-o.Devices"),
        Trigger(Where.ANNOTATION, "hami.io/"),
    ),
    example={
        "metadata": {
            "annotations": {"devices.gke.io/container.sidecar": "- path: /dev/nvidia0\n- path: /dev/nvidia1\n"}
        },
        "spec": {"containers": [{"name": "sidecar", "image": "ubuntu:22.04"}]},
    },
)
