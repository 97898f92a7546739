"""What each container of an admitted pod really sees on a GPU node: a model written from the source
of the parts that run there, independent of the policy it judges (it imports nothing of webhook/).

The pod author is the attacker and also picks the image and the ConfigMaps: the model assumes the
worst of what admission cannot see (image ENV `NVIDIA_VISIBLE_DEVICES=all` and `CUDA_VERSION`
without `NVIDIA_REQUIRE_CUDA`; every envFrom source holding whatever keys serve the attacker).

Sources, each step in the order the node runs it:
1. kubelet, pkg/kubelet/lifecycle/predicate.go `removeMissingExtendedResources`: extended resources
   the node does not advertise are dropped from the pod before admission, so no device plugin
   allocates them (only a pod bound by spec.nodeName reaches such a node; the scheduler places
   pods only where the resource is allocatable).
2. kubelet, pkg/kubelet/kubelet_pods.go `GenerateRunContainerOptions`: the device manager's
   `opts.Envs` (the plugin's Allocate answer: NVIDIA_VISIBLE_DEVICES=<its devices>) first, then
   `makeEnvironmentVariables`: envFrom items in order (key -> prefix+key), then `env` entries in
   order, each value `$(VAR)`-expanded against what is defined so far (third_party/forked/golang/
   expansion `Expand`: `$(NAME)` with any NAME, `$$` -> `$`, an unknown reference kept as
   written), all into one map (last wins); the runtime (containerd `WithEnv`,
   replaceOrAppendEnvValues) puts those after the image ENV, last wins again.
3. CDI (tags.cncf.io/container-device-interface `ContainerEdits.Apply`): a DRA driver's devices
   arrive as CDI edits applied after the env, replacing a variable of the same name; NVIDIA's DRA
   driver writes NVIDIA_VISIBLE_DEVICES=void there.
4. The NVIDIA toolkit (NVIDIA/nvidia-container-toolkit): current, internal/config/image/
   cuda_image.go `DevicesFromEnvvars` + devices.go `NewVisibleDevices`; legacy (<= 1.10),
   cmd/nvidia-container-runtime-hook/container_config.go `getDevicesFromEnvvar`; IMEX channels
   `ImexChannelRequests` read on their own; a privileged container sees every device node;
   a file under /var/run/nvidia-container-devices is a device grant (`getDevicesFromMounts`).
5. Annotations: CDI annotations (`cdi.k8s.io/`), GKE's and containerd's NRI device injectors
   (`devices.gke.io/`, `devices.noderesource.dev/`, `devices.nri.io/`) add device nodes.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

VISIBLE = "NVIDIA_VISIBLE_DEVICES"
IMEX = "NVIDIA_IMEX_CHANNELS"
GRANTING = (VISIBLE, IMEX, "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
ALLOCATED = "\x00allocated"  # the value the device plugin (or CDI) sets: the container's own devices

# Go's unicode.IsSpace, which strings.TrimSpace uses: not Python's str.isspace (\x1c-\x1f).
_GO_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def go_trim_space(s: str) -> str:
    start, end = 0, len(s)
    while start < end and s[start] in _GO_SPACE:
        start += 1
    while end > start and s[end - 1] in _GO_SPACE:
        end -= 1
    return s[start:end]


def expand(value: str, defined: Mapping[str, str]) -> str:
    """third_party/forked/golang/expansion `Expand`, relaxed names included: `$(NAME)` is replaced when
    NAME is defined, `$$` is one `$`, anything else (an unknown name, `$(` never closed, a lone `$`)
    is kept as written."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = value.find(")", i + 2)
                if close == -1:
                    out.append(value[i:])  # no closing paren: the rest is literal
                    break
                name = value[i + 2 : close]
                out.append(defined[name] if name in defined else value[i : close + 1])
                i = close + 1
                continue
            out.append(ch)
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def toolkit_current(env: Mapping[str, str], var: str = VISIBLE) -> str:
    """'none', 'all', 'allocated' or 'devices' for the current toolkit's reading of `var`."""
    legacy_image = bool(env.get("CUDA_VERSION")) and not env.get("NVIDIA_REQUIRE_CUDA")
    if var not in env:
        return "all" if (legacy_image and var == VISIBLE) else "none"
    items = [go_trim_space(d) for d in env[var].split(",")]
    items = [d for d in items if d]
    if not items or "void" in items:
        return "none"
    if "none" in items:
        return "none"
    if "all" in items:
        return "all"
    return "allocated" if items == [ALLOCATED] else "devices"


def toolkit_legacy(env: Mapping[str, str], var: str = VISIBLE) -> str:
    legacy_image = bool(env.get("CUDA_VERSION")) and not env.get("NVIDIA_REQUIRE_CUDA")
    if var not in env:
        return "all" if (legacy_image and var == VISIBLE) else "none"
    value = env[var]
    if value in ("", "void", "none"):
        return "none"
    return "allocated" if value == ALLOCATED else "devices"  # the CLI gets the text: "all" among it


@dataclass(frozen=True)
class Node:
    """A GPU node: what its device plugins advertise and how its toolkit is configured."""

    name: str = "gpu-node-1"
    advertised: frozenset[str] = frozenset({"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/gpu.shared"})


def env_plugin(resource: str) -> bool:
    """A resource whose device plugin answers Allocate with NVIDIA_VISIBLE_DEVICES: NVIDIA's
    (k8s-device-plugin: whole GPUs, MIG, renamed shared slots) and HAMi's gpumem (HAMi's webhook
    adds nvidia.com/gpu beside it). Not the network operator's nvidia.com/hostdev, not a NIC."""
    return (
        resource == "nvidia.com/gpu"
        or resource.startswith("nvidia.com/mig-")
        or resource.endswith((".shared", "-shared"))
        or resource == "nvidia.com/gpumem"
    )


@dataclass
class Seen:
    """What one container ends up with; `beyond` lists every way it reached devices it was not given."""

    name: str
    beyond: list[str] = field(default_factory=list)


# An image's ENV is out of admission's sight: CUDA images bake `all`; a legacy image (CUDA_VERSION
# without NVIDIA_REQUIRE_CUDA) means `all` when the variable is unset. (An image that bakes
# NVIDIA_IMEX_CHANNELS is the node's to refuse: docs/policy.md's threat model.)
ATTACKER_IMAGE_ENV = {VISIBLE: "all", "CUDA_VERSION": "12.4.1"}


def _containers(spec: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or ()


def _resources(c: Mapping[str, Any]) -> dict[str, Any]:
    res = c.get("resources") or {}
    out = dict(res.get("requests") or {})
    out.update(res.get("limits") or {})
    return out


def _nonzero(v: Any) -> bool:
    return str(v).strip() not in ("0", "0.0", "", "0m")


def pod_env(c: Mapping[str, Any], plugin_env: Mapping[str, str]) -> dict[str, str]:
    """The container's final environment: image < plugin < (envFrom, then env, one map)."""
    env = dict(ATTACKER_IMAGE_ENV)
    env.update(plugin_env)
    tmp: dict[str, str] = {}
    for item in c.get("envFrom") or ():
        prefix = item.get("prefix") or ""
        # The attacker's ConfigMap: a key for every granting name the prefix can reach.
        for name in GRANTING:
            if name.startswith(prefix):
                tmp[name] = "all" if name == VISIBLE else "0"
    for entry in c.get("env") or ():
        if entry.get("valueFrom") is not None:
            tmp[entry["name"]] = "all" if entry["name"] == VISIBLE else "0"  # the attacker's ConfigMap or field
            continue
        value = entry.get("value") or ""
        tmp[entry["name"]] = expand(value, tmp) if value else ""
    env.update(tmp)
    return env


def _annotation_devices(annotations: Mapping[str, str], container: str) -> list[str]:
    out: list[str] = []
    for key, value in annotations.items():
        if not key.startswith(("devices.gke.io/", "devices.noderesource.dev/", "devices.nri.io/")):
            continue
        target = key.split("/", 1)[1]
        if target not in ("", "pod", f"container.{container}"):
            continue
        try:
            items = yaml.safe_load(value)
        except yaml.YAMLError:
            continue  # the injector refuses it too
        for item in items if isinstance(items, list) else ():
            path = item.get("path") if isinstance(item, dict) else None
            if isinstance(path, str) and re.fullmatch(r"/dev/nvidia\d+", "/" + posixpath.normpath(path).lstrip("/")):
                out.append(path)
    return out


def what_it_sees(pod: Mapping[str, Any], node: Node = Node()) -> list[Seen]:
    """For each container of `pod` (as admitted, patch applied), the ways it sees devices beyond
    what it was allocated. Empty `beyond` everywhere is the invariant."""
    spec = pod.get("spec") or {}
    bound = bool(spec.get("nodeName"))
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    held_gpus = 0
    out: list[Seen] = []
    for c in _containers(spec):
        resources = {k: v for k, v in _resources(c).items() if _nonzero(v)}
        # 1. the kubelet keeps only what the node advertises; a scheduled pod landed on a node that
        # advertises all it asked for, a pod bound by nodeName on `node` whatever it has
        kept = {k for k in resources if "/" not in k or not bound or k in node.advertised}
        plugin = {VISIBLE: ALLOCATED} if any(env_plugin(k) for k in kept) else {}
        if any(k.startswith("deviceclass.resource.kubernetes.io/") for k in kept):
            plugin = {}  # DRA's extended-resource claim: CDI, below
        if plugin:
            held_gpus += 1
        env = pod_env(c, plugin)
        # 3. CDI edits of a DRA claim come last and replace the variable
        if (c.get("resources") or {}).get("claims") or any(
            k.startswith("deviceclass.resource.kubernetes.io/") for k in kept
        ):
            env[VISIBLE] = "void"
        seen = Seen(c.get("name", ""))
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            seen.beyond.append("privileged: every device node")
        for reading in (toolkit_current(env), toolkit_legacy(env)):
            if reading in ("all", "devices"):
                seen.beyond.append(f"{VISIBLE}={env.get(VISIBLE)!r} read as {reading}")
                break
        if toolkit_current(env, IMEX) != "none" and env.get(IMEX) != "all":
            seen.beyond.append(f"{IMEX}={env.get(IMEX)!r}")
        for mount in c.get("volumeMounts") or ():
            if "nvidia-container-devices" in str(mount.get("mountPath", "")):
                seen.beyond.append(f"device-list mount {mount.get('mountPath')}")
        extra = _annotation_devices(annotations, c.get("name", ""))
        if extra:
            seen.beyond.append(f"annotation devices {extra}")  # judged against the pod's count below
        out.append(seen)
    for key in annotations:
        if key.startswith(("cdi.k8s.io/", "nvidia.cdi.k8s.io/")):
            out.append(Seen("<pod>", [f"CDI annotation {key}"]))
    for volume in spec.get("volumes") or ():
        host = (volume.get("hostPath") or {}).get("path")
        if isinstance(host, str) and posixpath.normpath("/" + host.lstrip("/")).startswith(("/dev", "/run/cdi")):
            out.append(Seen("<pod>", [f"hostPath {host}"]))
    # GKE's injector: device nodes within the count the pod holds are its own (which ones is the
    # injector's honesty, not admission's: docs/policy.md's threat model).
    for s in out:
        s.beyond = [b for b in s.beyond if not (b.startswith("annotation devices") and b.count("/dev") <= held_gpus)]
    return out
