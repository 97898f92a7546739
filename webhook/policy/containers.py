"""One container read into a typed view: its kind (init, regular, ephemeral), resources, the GPU
count, the watched env entries (NVIDIA_VISIBLE_DEVICES and friends) with where each sits,
envFrom sources, volume mounts, DRA claims and security context. Built once per container by the
walk in webhook.policy.objects; rules read these fields and never the raw dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from .nvidia import GRANTING
from .quantity import QuantityError, parse_quantity
from .shapes import ShapeError, as_flag, as_list, as_mapping, as_string, dig, objects_at, quote_key, type_name
from .types import ContainerKind, Policy, Violation
from .vendors import VENDORS

# Env names the rules and mutations read; `build_view` records where each one occurs so
# nobody rescans env lists (they are the bulk of a pod spec). Every env entry's name is checked;
# only these names' values are read and checked. (The server once narrowed the set per request by
# scanning the raw body for the names: with the compiled core, three scans of the body cost more
# than walking every env list.)
# Every vendor's granting variables are watched whether or not it is on (the walk knows no
# policy); names that start with a vendor's granting prefix (AMD's DOCKER_RESOURCE_) are too.
WATCHED: Final = frozenset(
    {*GRANTING, "LD_LIBRARY_PATH", "NVIDIA_DRIVER_CAPABILITIES", *(n for v in VENDORS for n in v.grant_env)}
)
WATCHED_PREFIXES: Final = tuple(p for v in VENDORS for p in v.grant_env_prefixes)


# The classes built on every request (EnvVar, Container, PodView) have an explicit __init__:
# mypyc compiles it to C, where the one dataclasses generates stays interpreted Python (about
# 1 us per Container or PodView, a third of the compiled core's time for a typical pod). Not
# frozen for the same reason (an explicit __init__ cannot set a frozen field); nothing changes
# them after the walk but the two memo fields.
@dataclass(slots=True, init=False)
class EnvVar:
    """One env entry with a watched name: where it is and what it sets."""

    index: int
    value: str  # "" when unset or set through valueFrom
    value_from: bool
    # (ConfigMap name, key) when set through valueFrom.configMapKeyRef (how KAI Scheduler's
    # webhook hands a fraction container its GPU), else None.
    config_map_key: tuple[str, str] | None

    def __init__(self, index: int, value: str, value_from: bool, config_map_key: tuple[str, str] | None = None) -> None:
        self.index = index
        self.value = value
        self.value_from = value_from
        self.config_map_key = config_map_key


# One envFrom item: ("ConfigMap" | "Secret" | "", name, prefix).
EnvSource = tuple[str, str, str]


def loads(kind: str, name: str, prefix: str) -> str:
    """How a message says what an envFrom item loads: 'loads ConfigMap "x" with no prefix'."""
    source = f'{kind} "{name}"' if kind else "its source"
    how = f'prefix "{prefix}"' if prefix else "no prefix"
    return f"loads {source} with {how}"


@dataclass(slots=True, init=False)
class Container:
    """One container of any kind, with the fields the rules read already type-checked.

    Built on every request, so its __init__ is written out: mypyc compiles an explicit __init__
    to C, where the dataclass-generated one stays interpreted. Not frozen for the same reason (an
    explicit __init__ cannot set frozen fields); nothing changes one after it is built. The other
    per-request records (Violation, Changes, Verdict, review.Request, decide.Outcome) point here."""

    kind: ContainerKind
    field: str  # kind.field, as a plain attribute (an Enum's properties cost a call each)
    label: str  # kind.label ("init container"), likewise
    index: int
    path: str  # field path, as messages show it: "spec.template.spec.containers[0]"
    name: str
    image: str
    spec_path: str  # field path of the pod spec, e.g. "spec.template.spec"
    spec_pointer: str  # JSON pointer of the pod spec, e.g. "/spec"
    has_env: bool  # whether `env` exists (a patch appends to it or creates it)
    watched: dict[str, list[EnvVar]]  # WATCHED name -> its entries, in order
    raw_env_from: Any  # read through `env_from`, which checks its shape on first use
    raw_mounts: Any  # read through `mount_paths`, likewise
    limits: dict[str, Any] | None
    requests: dict[str, Any] | None
    claims: tuple[str, ...]  # resources.claims[*].name (DRA)
    privileged: bool
    added_capabilities: tuple[str, ...]
    gpu: Decimal | None  # parsed GPU count (limits, else requests); None when unset or unparsable
    # How this container gets a GPU, worked out once by webhook.policy.gpus (None: not yet asked).
    gpu_source: Any
    own_path: str  # a container-like object outside a pod spec: its field path
    resources_field: str  # "resourcesPerNode" in Kubeflow Trainer v2's TrainJob
    env_field: str  # where the env list is, relative to the container (VLLMRuntime: vllmConfig.env)
    # A plain GPU count instead of limits (the vLLM production stack's deploymentConfig.resources.gpu):
    # its field path, which messages about the GPU resource name instead of limits[...].
    gpu_field: str
    sidecar: bool  # an init container with restartPolicy Always (runs beside the app containers)
    _env_from: tuple[EnvSource, ...] | None
    _mount_paths: tuple[str, ...] | None

    def __init__(
        self,
        kind: ContainerKind,
        field: str,
        label: str,
        index: int,
        path: str,
        name: str,
        image: str,
        spec_path: str,
        spec_pointer: str,
        has_env: bool,
        watched: dict[str, list[EnvVar]],
        raw_env_from: Any,
        raw_mounts: Any,
        limits: dict[str, Any] | None,
        requests: dict[str, Any] | None,
        claims: tuple[str, ...],
        privileged: bool,
        added_capabilities: tuple[str, ...],
        gpu: Decimal | None,
        own_path: str = "",
        resources_field: str = "resources",
        env_field: str = "env",
        gpu_field: str = "",
        sidecar: bool = False,
    ) -> None:
        self.kind = kind
        self.field = field
        self.label = label
        self.index = index
        self.path = path
        self.name = name
        self.image = image
        self.spec_path = spec_path
        self.spec_pointer = spec_pointer
        self.has_env = has_env
        self.watched = watched
        self.raw_env_from = raw_env_from
        self.raw_mounts = raw_mounts
        self.limits = limits
        self.requests = requests
        self.claims = claims
        self.privileged = privileged
        self.added_capabilities = added_capabilities
        self.gpu = gpu
        self.gpu_source = None
        self.own_path = own_path
        self.resources_field = resources_field
        self.env_field = env_field
        self.gpu_field = gpu_field
        self.sidecar = sidecar
        self._env_from = None
        self._mount_paths = None

    # envFrom and volumeMounts are read by one rule each, and only for some pods: they are
    # shape-checked here on first use (a ShapeError then, like any other) rather than on every walk.
    @property
    def env_from(self) -> tuple[EnvSource, ...]:
        if self._env_from is None:
            self._env_from = () if self.raw_env_from is None else _env_from(self.raw_env_from, self)
        return self._env_from

    @property
    def mount_paths(self) -> tuple[str, ...]:
        """volumeMounts[*].mountPath, in order."""
        if self._mount_paths is None:
            self._mount_paths = () if self.raw_mounts is None else _mount_paths(self.raw_mounts, self)
        return self._mount_paths

    def mounts(self, volume: str) -> bool | None:
        """How this container mounts `volume`: None not at all, True writable by some mount
        (readOnly not true), False read-only only. Writable is what turns a host file into a way
        to change the node; a socket needs no write (connect() works on a read-only mount)."""
        if self.raw_mounts is None:
            return None
        _ = self.mount_paths  # shape-checked once, on first use
        found: bool | None = None
        for m in self.raw_mounts:
            if isinstance(m, dict) and m.get("name") == volume:
                found = found or m.get("readOnly") is not True
        return found

    @property
    def pointer(self) -> str:
        """JSON pointer, as patches need it: "/spec/containers/0"."""
        return f"{self.spec_pointer}/{self.field}/{self.index}"

    def env(self, name: str) -> list[EnvVar]:
        """The entries named `name` (one of WATCHED; case-sensitive, as the kubelet compares)."""
        return self.watched.get(name, [])

    def resource_path(self, side: str, name: str) -> str:
        """The field of a resource quantity, relative to the container, as messages name it."""
        if self.gpu_field:
            return self.gpu_field
        return f"{self.resources_field}.{side}{quote_key(name)}"

    def names_resource(self, resource: str) -> bool:
        """Whether limits or requests name `resource` at all (whatever the value)."""
        return (self.limits is not None and resource in self.limits) or (
            self.requests is not None and resource in self.requests
        )

    def violation(self, rule: str, field: str, detail: str, fix: str, value: str | None = None) -> Violation:
        """A violation of `rule` at this container's `field` (e.g. "securityContext.privileged")."""
        return Violation(
            rule=rule,
            path=f"{self.path}.{field}",
            detail=detail,
            fix=fix,
            container=self.name,
            container_kind=self.label,
            value=value,
        )


def read_mapped_container(node: dict[str, Any], path: str, policy: Policy, fields: tuple[str, str]) -> Container:
    """A container whose env and resources sit elsewhere in the object (VLLMRuntime: vllmConfig.env
    and deploymentConfig.resources, where `gpu: "1"` is a count of the GPU resource)."""
    env_field, resources_field = fields
    shaped: dict[str, Any] = {"name": node.get("name") or path}
    env = dig(node, env_field)
    if env is not None:
        shaped["env"] = env
    resources = dig(node, resources_field)
    gpu_field = ""
    if isinstance(resources, dict) and "limits" not in resources and "requests" not in resources:
        if resources.get("gpu") is not None:
            shaped["resources"] = {"limits": {policy.resource_name: resources["gpu"]}}
            gpu_field = f"{resources_field}.gpu"
    elif resources is not None:
        shaped["resources"] = resources
    c = read_container(shaped, ContainerKind.REGULAR, "containers", "container", 0, path, "", policy, path, env_field)
    c.resources_field = resources_field
    c.gpu_field = gpu_field
    return c


def read_container(
    raw: Any,
    kind: ContainerKind,
    kind_field: str,
    kind_label: str,
    index: int,
    spec_path: str,
    spec_pointer: str,
    policy: Policy,
    own_path: str = "",
    env_field: str = "env",
) -> Container:
    # For messages (built once per container); a container-like object has its own path.
    path = own_path or f"{spec_path}.{kind_field}[{index}]"
    if not isinstance(raw, dict):
        raise ShapeError(path, f"must be an object, got {type_name(raw)}")
    c = raw
    name = c.get("name", "")
    if not isinstance(name, str):
        raise ShapeError(f"{path}.name", f"must be a string, got {type_name(name)}")
    if not name and own_path:
        name = own_path  # Argo's container and NIMService's spec have no name: messages show where it is
    image = c.get("image") or ""  # templates may leave it to a controller; JSON null is ""
    if not isinstance(image, str):
        if not own_path:
            raise ShapeError(f"{path}.image", f"must be a string, got {type_name(image)}")
        image = ""  # NIMService's image is {repository, tag}: nothing a rule reads

    env = c.get("env")
    watched: dict[str, list[EnvVar]] = {}
    if env is not None and not isinstance(env, list):  # mutations append to it: always checked
        raise ShapeError(f"{path}.{env_field}", f"must be a list, got {type_name(env)}")
    if env:
        for i, entry in enumerate(env):
            if not isinstance(entry, dict):
                raise ShapeError(f"{path}.{env_field}[{i}]", f"must be an object, got {type_name(entry)}")
            env_name = entry.get("name")
            if not isinstance(env_name, str):
                raise ShapeError(f"{path}.{env_field}[{i}].name", "must be a string")
            if env_name in WATCHED or env_name.startswith(WATCHED_PREFIXES):  # only values we read are checked
                value = entry.get("value")
                if value is not None and not isinstance(value, str):
                    raise ShapeError(f"{path}.{env_field}[{i}].value", f"must be a string, got {type_name(value)}")
                source = entry.get("valueFrom")
                found = EnvVar(i, value or "", source is not None, _config_map_key(source, f"{path}.{env_field}[{i}]"))
                watched.setdefault(env_name, []).append(found)

    limits = requests = None
    claims: tuple[str, ...] = ()
    resources_field = "resources"
    resources = c.get("resources")
    if resources is None and own_path and c.get("resourcesPerNode") is not None:
        resources_field = "resourcesPerNode"  # Kubeflow Trainer v2's TrainJob.spec.trainer
        resources = c["resourcesPerNode"]
    if resources is not None:
        if not isinstance(resources, dict):
            raise ShapeError(f"{path}.{resources_field}", f"must be an object, got {type_name(resources)}")
        limits = as_mapping(resources.get("limits"), path, f"{resources_field}.limits")
        requests = as_mapping(resources.get("requests"), path, f"{resources_field}.requests")
        if resources.get("claims") is not None:
            claims = _claims(resources["claims"], path)

    privileged = False
    caps: tuple[str, ...] = ()
    security = c.get("securityContext")
    if security is not None:
        if not isinstance(security, dict):
            raise ShapeError(f"{path}.securityContext", f"must be an object, got {type_name(security)}")
        flag = security.get("privileged")
        if flag is not None:
            privileged = as_flag(flag, path, "securityContext.privileged")
        capabilities = security.get("capabilities")
        if capabilities is not None:
            as_mapping(capabilities, path, "securityContext.capabilities")
            added = as_list(capabilities.get("add"), path, "securityContext.capabilities.add") or []
            for i, cap in enumerate(added):
                as_string(cap, path, f"securityContext.capabilities.add[{i}]")
            caps = tuple(added)

    return Container(
        kind=kind,
        field=kind_field,
        label=kind_label,
        index=index,
        path=path,
        name=name,
        image=image,
        spec_path=spec_path,
        spec_pointer=spec_pointer,
        has_env=env is not None,
        watched=watched,
        raw_env_from=c.get("envFrom"),
        raw_mounts=c.get("volumeMounts"),
        limits=limits,
        requests=requests,
        claims=claims,
        privileged=privileged,
        added_capabilities=caps,
        gpu=_gpu_count(limits, requests, policy.resource_name),
        own_path=own_path,
        resources_field=resources_field,
        env_field=env_field,
        sidecar=kind is ContainerKind.INIT and c.get("restartPolicy") == "Always",
    )


def _env_from(value: Any, c: Container) -> tuple[EnvSource, ...]:
    out: list[EnvSource] = []
    for i, item in enumerate(objects_at(value, c.path, "envFrom")):
        prefix = item.get("prefix")
        if prefix is not None and not isinstance(prefix, str):
            raise ShapeError(f"{c.path}.envFrom[{i}].prefix", f"must be a string, got {type_name(prefix)}")
        source: EnvSource = ("", "", prefix or "")
        for field, what in _ENV_SOURCES:
            ref = item.get(field)
            if ref is not None:
                name = ref.get("name") if isinstance(ref, dict) else 0
                if name is not None and not isinstance(name, str):  # JSON null decodes to "" in Go
                    raise ShapeError(f"{c.path}.envFrom[{i}].{field}", "must be an object with a string name")
                source = (what, name or "", prefix or "")
        out.append(source)
    return tuple(out)


_ENV_SOURCES: Final[tuple[tuple[str, str], ...]] = (("configMapRef", "ConfigMap"), ("secretRef", "Secret"))


def _config_map_key(source: Any, path: str) -> tuple[str, str] | None:
    """(name, key) of valueFrom.configMapKeyRef, or None for any other source."""
    if source is None:
        return None
    if not isinstance(source, dict):
        raise ShapeError(f"{path}.valueFrom", f"must be an object, got {type_name(source)}")
    ref = source.get("configMapKeyRef")
    if ref is None:
        return None
    if not isinstance(ref, dict):
        raise ShapeError(f"{path}.valueFrom.configMapKeyRef", f"must be an object, got {type_name(ref)}")
    name, key = ref.get("name") or "", ref.get("key") or ""
    if not isinstance(name, str) or not isinstance(key, str):
        raise ShapeError(f"{path}.valueFrom.configMapKeyRef", "must have a string name and key")
    return (name, key)


def _mount_paths(value: Any, c: Container) -> tuple[str, ...]:
    out: list[str] = []
    for i, mount in enumerate(objects_at(value, c.path, "volumeMounts")):
        mount_path = mount.get("mountPath")
        if not isinstance(mount_path, str):
            raise ShapeError(f"{c.path}.volumeMounts[{i}].mountPath", f"must be a string, got {type_name(mount_path)}")
        out.append(mount_path)
    return tuple(out)


def _claims(value: Any, path: str) -> tuple[str, ...]:
    items = as_list(value, path, "resources.claims") or ()
    out: list[str] = []
    for i, claim in enumerate(items):
        name = claim.get("name") if isinstance(claim, dict) else None
        if not isinstance(name, str):
            raise ShapeError(f"{path}.resources.claims[{i}]", "must be an object with a string name")
        out.append(name)
    return tuple(out)


def _gpu_count(limits: dict[str, Any] | None, requests: dict[str, Any] | None, resource: str) -> Decimal | None:
    # Limits decide (they are what the device plugin allocates); templates may carry
    # only one side, so fall back to requests.
    for side in [limits, requests]:
        if side is not None and resource in side:
            try:
                return parse_quantity(side[resource])
            except QuantityError:
                return None
    return None
