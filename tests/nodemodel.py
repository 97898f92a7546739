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
   (`devices.gke.io/`; containerd/nri plugins/device-injector getAnnotation: `devices.`,
   `cdi-devices.`, `mounts.` under `noderesource.dev` and `nri.io`, bare or per container or pod)
   add device nodes by major:minor and any host bind mount; the NVIDIA runtime's NRI plugin reads
   `nvidia.cdi.k8s.io` bare too; CRI-O adds `devices.crio.io` hosts its allowed_devices lists;
   HAMi's device plugin serves the GPUs a pod's `hami.io/*-devices-to-allocate` names.
6. The device cgroup (runc libcontainer/specconv AllowedDevices; cgroup v2's eBPF filter): a device
   node is opened only if the runtime allowed its major:minor (privileged: all; a device plugin's
   DeviceSpec, CDI, the NVIDIA hook: those), so a hostPath of /dev gives nothing; CAP_SYS_ADMIN
   rewrites the container's own rules (measured: docs/policy.md), so it counts as privileged.
7. The toolkit's gated variables (internal/modifier/cdi.go gatedDevices): NVIDIA_GDS, NVIDIA_MOFED,
   NVIDIA_GDRCOPY, NVIDIA_NVSWITCH exactly `enabled`, in a container with any GPU, add every such
   node of the host; a mount whose destination starts with /var/run/nvidia-container-devices (a
   text prefix, no slash: requestsFromMounts) from /dev/null is a device request.

The boundary (docs/policy.md): the invariant is stated for node-isolated pods. A pod that asks for
no GPU and is privileged, adds SYS_ADMIN, shares the host's PID namespace with SYS_PTRACE or mounts a host
path that reaches a device channel (a plugin or runtime socket; CDI, toolkit or runtime files
writable) is outside it: `outside()` names why, and the policy must report it (node-wide-access).
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
GATED = ("NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_GDRCOPY", "NVIDIA_NVSWITCH")
GRANTING = (VISIBLE, IMEX, "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES", *GATED)
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
NRI_DOMAINS = tuple(
    f"{kind}.{domain}" for kind in ("devices", "cdi-devices", "mounts") for domain in ("noderesource.dev", "nri.io")
)
# Host paths through which a container changes what the node gives containers (sockets: read-only
# too), written from the kubelet's, runtimes' and toolkit's paths, not from the policy's table.
SOCKETS = (
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/plugins_registry",
    "/var/lib/kubelet/plugins",
    "/run/containerd",
    "/var/run/containerd",
    "/run/crio",
    "/var/run/docker.sock",
    "/run/nri",
)
FILES = ("/etc/cdi", "/var/run/cdi", "/run/cdi", "/run/nvidia", "/usr/local/nvidia", "/etc/nvidia-container-runtime")
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
    gpus: int = 8  # whole GPUs: a device name GKE's injector takes is the pod's own only if it holds them all


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


def _clean(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


def _reaches(host: str, roots: tuple[str, ...]) -> bool:
    h = _clean(host).replace("/var/run/", "/run/")
    for root in roots:
        r = _clean(root).replace("/var/run/", "/run/")
        if h == "/" or h == r or h.startswith(r + "/") or r.startswith(h + "/"):
            return True
    return False


def _annotation_devices(annotations: Mapping[str, str], container: str) -> list[str]:
    """GKE's injector: the GPU device nodes its entries name for `container`."""
    out: list[str] = []
    for key, value in annotations.items():
        if not (key == "devices.gke.io" or key.startswith("devices.gke.io/")):
            continue
        target = key.split("/", 1)[1] if "/" in key else ""
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


def _injector(annotations: Mapping[str, str]) -> list[str]:
    """Annotations another injector reads as devices or mounts (any non-empty entry)."""
    out = []
    for key, value in annotations.items():
        empty = value.strip() in ("", "[]", "null")
        domain = key.split("/", 1)[0]
        if domain in NRI_DOMAINS and not empty:
            out.append(f"NRI {key}")
        elif domain in ("nvidia.cdi.k8s.io", "cdi.k8s.io") and not empty:
            out.append(f"CDI annotation {key}")
        elif key in ("devices.crio.io", "io.kubernetes.cri-o.Devices"):
            hosts = [e.split(":")[0].strip() for e in value.split(",") if e.strip()]
            if any(_clean(h) not in ("/dev/fuse", "/dev/net/tun") for h in hosts):
                out.append(f"CRI-O {key}")
        elif key.startswith("hami.io/") and key.endswith("-devices-to-allocate"):
            out.append(f"HAMi handshake {key}")
    return out


def outside(pod: Mapping[str, Any]) -> list[str]:
    """Why a pod is outside the node-isolated ground (empty: inside)."""
    spec = pod.get("spec") or {}
    why = []
    mounted: dict[str, bool] = {}  # volume name -> some mount of it is writable
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            why.append(f"{c.get('name')}: privileged")
        caps = [str(x).strip().upper().removeprefix("CAP_") for x in ((sc.get("capabilities") or {}).get("add") or ())]
        if {"SYS_ADMIN", "ALL"} & set(caps):
            why.append(f"{c.get('name')}: SYS_ADMIN")
        for m in c.get("volumeMounts") or ():
            mounted[m.get("name")] = mounted.get(m.get("name"), False) or m.get("readOnly") is not True
    ptrace = any(
        str(x).strip().upper().removeprefix("CAP_") == "SYS_PTRACE"
        for c in _containers(spec)
        for x in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or ()
    )
    if spec.get("hostPID") and ptrace:  # other pods' open GPU descriptors (pidfd_getfd, ptrace)
        why.append("hostPID with SYS_PTRACE")
    for volume in spec.get("volumes") or ():
        host = (volume.get("hostPath") or {}).get("path")
        if isinstance(host, str) and volume.get("name") in mounted:
            roots = SOCKETS + ((*FILES, "/proc", "/sys") if mounted[volume.get("name")] else ())
            if _reaches(host, roots):
                why.append(f"hostPath {host}")
    return why


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
            held_gpus += int(float(str(resources.get("nvidia.com/gpu", 1)))) if "nvidia.com/gpu" in kept else 1
        env = pod_env(c, plugin)
        # 3. CDI edits of a DRA claim come last and replace the variable
        claims = (c.get("resources") or {}).get("claims") or any(
            k.startswith("deviceclass.resource.kubernetes.io/") for k in kept
        )
        if claims:
            env[VISIBLE] = "void"
        seen = Seen(c.get("name", ""))
        sc = c.get("securityContext") or {}
        caps = {str(x).strip().upper().removeprefix("CAP_") for x in ((sc.get("capabilities") or {}).get("add") or ())}
        if sc.get("privileged") or {"SYS_ADMIN", "ALL"} & caps:
            seen.beyond.append("privileged: every device node")  # 6: SYS_ADMIN rewrites the device cgroup
        readings = (toolkit_current(env), toolkit_legacy(env))
        for reading in readings:
            if reading in ("all", "devices"):
                seen.beyond.append(f"{VISIBLE}={env.get(VISIBLE)!r} read as {reading}")
                break
        if toolkit_current(env, IMEX) != "none" and env.get(IMEX) != "all":
            seen.beyond.append(f"{IMEX}={env.get(IMEX)!r}")
        # 7. gated variables act in a container that has any GPU (its own, or one granted above)
        has_gpu = bool(plugin) or bool(claims) or any(r != "none" for r in readings)
        for name in GATED:
            if has_gpu and env.get(name) == "enabled":
                seen.beyond.append(f"{name}=enabled: every such device of the node")
        for mount in c.get("volumeMounts") or ():
            # 7. the toolkit's text prefix; the source may be /dev/null (a host file, an NRI mount, a PV)
            if _clean(str(mount.get("mountPath", ""))).startswith(DEVICE_LIST_ROOT) or _clean(
                str(mount.get("mountPath", ""))
            ).startswith("/run/nvidia-container-devices"):
                seen.beyond.append(f"device-list mount {mount.get('mountPath')}")
        extra = _annotation_devices(annotations, c.get("name", ""))
        if extra:
            seen.beyond.append(f"annotation devices {extra}")  # judged against the pod's GPUs below
        out.append(seen)
    for reason in _injector(annotations):
        out.append(Seen("<pod>", [reason]))
    # GKE's injector: device nodes the pod holds are its own only when it holds every GPU of the
    # node (which ones the device plugin gives it is decided later).
    whole = held_gpus >= node.gpus
    for s in out:
        s.beyond = [b for b in s.beyond if not (b.startswith("annotation devices") and whole)]
    return out
