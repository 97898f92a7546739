"""Finding the pod spec inside an object and reading it into a checked, typed view.

Rules never walk raw dicts: `build_view` walks each object once, checks the type of every
field a rule or mutation reads, and raises `ShapeError` naming the field path when something
is not what the Kubernetes API allows. The view holds only typed fields, so a rule cannot
skip a shape check by accident, and "malformed" is always a clear error, never a silent allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final

from .quantity import QuantityError, parse_quantity
from .templates import BUILTIN, Key, Shape, Templates, expand, field_path, pointer
from .types import ContainerKind, Policy, Violation

# Env names the rules and mutations read; `build_view` records where each one occurs so
# nobody rescans env lists (they are the bulk of a pod spec). Every env entry's name is checked;
# only these names' values are read and checked. (The server once narrowed the set per request by
# scanning the raw body for the names: with the compiled core, three scans of the body cost more
# than walking every env list.)
WATCHED: Final = frozenset({"NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "NVIDIA_DRIVER_CAPABILITIES"})
# The claim references of a pod without spec.resourceClaims (nearly all): one shared, read-only
# mapping instead of an empty dict per view.
NO_CLAIMS: Final[Mapping[str, tuple[str, str]]] = MappingProxyType({})


class ShapeError(ValueError):
    """The object does not have the shape the Kubernetes API gives it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


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


# One envFrom item: ("ConfigMap" | "Secret" | "", name).
EnvSource = tuple[str, str]


@dataclass(frozen=True, slots=True)
class HostPath:
    index: int  # in spec.volumes
    path: str


@dataclass(slots=True, init=False)
class Container:
    """One container of any kind, with the fields the rules read already type-checked."""

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


# Kinds whose pod templates sit in a JobSpec (its activeDeadlineSeconds bounds the whole Job).
JOB_KINDS: Final = frozenset({"Job", "CronJob", "JobSet"})


@dataclass(slots=True, init=False)
class PodView:
    """A pod spec (of a Pod or of a template) and where it sits in its object."""

    path: str  # field path of the pod spec, e.g. "spec.template.spec"
    meta_path: str  # field path of the template's metadata, e.g. "spec.template.metadata"
    pointer: str  # JSON pointer of the pod spec, e.g. "/spec"
    annotations: dict[str, str]
    containers: list[Container]
    node_selector: dict[str, Any] | None
    affinity_keys: frozenset[str]  # label keys pinned by required node affinity (In / Exists)
    raw_volumes: Any  # read through `host_paths`, which checks its shape on first use
    host_pid: bool
    host_ipc: bool
    node_name: str
    is_pod: bool
    kind: str  # the object's kind ("Pod", "DaemonSet", ...)
    owner_kind: str  # a Pod's controller (ownerReferences[controller=true].kind), else ""
    namespace: str
    scheduler_name: str
    service_account: str
    resource_claims: tuple[str, ...]  # spec.resourceClaims[*].name (DRA)
    runtime_class: str
    # Read only by the pre-flight rules (webhook.policy.nodes), which check their shape themselves:
    # the walk never pays for them.
    raw_affinity: Any
    raw_tolerations: Any
    # spec.resourceClaims[*].name -> ("template" | "claim", the object it names), for DRA resolution
    claim_refs: Mapping[str, tuple[str, str]]
    # A template in a JobSpec (Job, CronJob, JobSet): the JobSpec's field path ("" otherwise), and
    # whether it or the pod spec sets activeDeadlineSeconds (gpu-job-deadline).
    job_path: str
    job_deadline: bool
    _host_paths: tuple[HostPath, ...] | None
    preflight: Any  # webhook.policy.preflight's analysis, computed once for its three rules

    def __init__(
        self,
        path: str,
        meta_path: str,
        pointer: str,
        annotations: dict[str, str],
        containers: list[Container],
        node_selector: dict[str, Any] | None,
        affinity_keys: frozenset[str],
        raw_volumes: Any,
        host_pid: bool,
        host_ipc: bool,
        node_name: str,
        is_pod: bool,
        kind: str,
        owner_kind: str,
        namespace: str,
        scheduler_name: str,
        service_account: str,
        resource_claims: tuple[str, ...],
        runtime_class: str,
        raw_affinity: Any = None,
        raw_tolerations: Any = None,
        claim_refs: Mapping[str, tuple[str, str]] = NO_CLAIMS,
        job_path: str = "",
        job_deadline: bool = False,
    ) -> None:
        self.path = path
        self.meta_path = meta_path
        self.pointer = pointer
        self.annotations = annotations
        self.containers = containers
        self.node_selector = node_selector
        self.affinity_keys = affinity_keys
        self.raw_volumes = raw_volumes
        self.host_pid = host_pid
        self.host_ipc = host_ipc
        self.node_name = node_name
        self.is_pod = is_pod
        self.kind = kind
        self.owner_kind = owner_kind
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.service_account = service_account
        self.resource_claims = resource_claims
        self.runtime_class = runtime_class
        self.raw_affinity = raw_affinity
        self.raw_tolerations = raw_tolerations
        self.claim_refs = claim_refs
        self.job_path = job_path
        self.job_deadline = job_deadline
        self._host_paths = None
        self.preflight = None

    @property
    def host_paths(self) -> tuple[HostPath, ...]:
        """The hostPath volumes (one rule reads them: checked on first use, not on every walk)."""
        if self._host_paths is None:
            self._host_paths = () if self.raw_volumes is None else _host_paths(self.raw_volumes, self.path)
        return self._host_paths

    @property
    def requests_gpu(self) -> bool:
        """A count above 0 of the configured GPU resource (gpuResourceName) in any container."""
        return any(c.gpu is not None and c.gpu > 0 for c in self.containers)

    def pinned_to(self, label: str) -> bool:
        """True when the pod asks for nodes carrying `label`: nodeSelector, or any required
        node-affinity term with In/Exists (terms are ORed, so one term is enough to land there)."""
        if self.node_selector is not None and label in self.node_selector:
            return True
        return label in self.affinity_keys

    @property
    def daemon(self) -> bool:
        """A DaemonSet's template, or a Pod a DaemonSet made: one copy on every node."""
        return self.kind == "DaemonSet" or self.owner_kind == "DaemonSet"


def group_of(api_version: object) -> str:
    """ "apps/v1" -> "apps"; "v1" -> "" (the core group)."""
    if not isinstance(api_version, str):
        return ""
    return api_version.rpartition("/")[0] if "/" in api_version else ""


# JSON and YAML decode to plain dicts and lists; `isinstance(x, dict)` is a fast C check where
# `isinstance(x, Mapping)` goes through the ABC machinery on every field.
# Paths are passed in two parts and joined only when there is an error to report: building
# every field's path string up front cost more than the checks themselves.
def _join(base: str, suffix: str) -> str:
    return f"{base}.{suffix}" if base and suffix else base or suffix


def _mapping(value: Any, base: str, suffix: str = "", *, optional: bool = True) -> dict[str, Any] | None:
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise ShapeError(_join(base, suffix), f"must be an object, got {_type(value)}")
    return value


def _list(value: Any, base: str, suffix: str = "") -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ShapeError(_join(base, suffix), f"must be a list, got {_type(value)}")
    return value


def _string(value: Any, base: str, suffix: str = "") -> str:
    if not isinstance(value, str):
        raise ShapeError(_join(base, suffix), f"must be a string, got {_type(value)}")
    return value


def _flag(value: Any, base: str, suffix: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ShapeError(_join(base, suffix), f"must be a boolean, got {_type(value)}")
    return value


def _type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


# Plain tuples: an Enum member's attributes cost a descriptor call each on the hot path.
_KINDS: Final[tuple[tuple[ContainerKind, str, str], ...]] = tuple((k, k.field, k.label) for k in ContainerKind)


def find_templates(group: str, kind: str, policy: Policy) -> Templates | None:
    """Where `kind`'s pod templates are: the configured table first, then the built-in one."""
    found = policy.custom_templates.get((group, kind))
    if found is not None:
        return found
    builtin = BUILTIN.get((group, kind))
    return builtin.templates if builtin is not None else None


def build_views(
    obj: Any,
    templates: Templates,
    policy: Policy,
    kind: str = "Pod",
    namespace: str = "",
) -> list[PodView]:
    """A view of every pod template `templates` finds in `obj` (one for a Pod or a Deployment).

    `namespace` is the request's; "" reads the object's metadata.namespace (offline files)."""
    if not isinstance(obj, dict):
        raise ShapeError("object", f"must be an object, got {_type(obj)}")
    if not namespace:
        meta = obj.get("metadata")
        found = meta.get("namespace") if isinstance(meta, dict) else None
        namespace = found if isinstance(found, str) else ""
    if templates.required:
        return [build_view(obj, keys, policy, kind, namespace) for keys in templates.paths]
    return [
        build_view(obj, keys, policy, kind, namespace, shape, templates.fields)
        for shape, patterns in templates.by_shape()
        for pattern in patterns
        for keys in expand(obj, pattern)
        # A glob may match fields that are not pod specs (KServe's predictor.minReplicas): only
        # objects are candidates; an object of the wrong shape is still a ShapeError.
        if shape is Shape.TEMPLATE or isinstance(_at(obj, keys), dict)
    ]


def _at(obj: Any, keys: tuple[Key, ...]) -> Any:
    for key in keys:
        obj = obj[key]
    return obj


def build_view(
    obj: dict[str, Any],
    keys: tuple[Key, ...],
    policy: Policy,
    kind: str = "Pod",
    namespace: str = "",
    shape: Shape = Shape.TEMPLATE,
    fields: tuple[str, str] | None = None,
) -> PodView:
    """Walk `obj` down `keys` to a pod template ({metadata, spec}), a pod spec, or one
    container-like object (see templates.Shape), and read it into a `PodView`."""
    node: Any = obj
    parent: Any = None
    for depth, key in enumerate(keys):
        here = field_path(keys[: depth + 1])
        if isinstance(node, dict):
            child = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            child = node[key]
        else:
            child = None
        if child is None:
            raise ShapeError(here, "is required")
        parent, node = node, child
    path = field_path(keys)
    node = _mapping(node, path or "object", optional=False)
    assert node is not None
    ptr = pointer(keys)
    meta_path = f"{path}.metadata" if path else "metadata"
    if shape is Shape.TEMPLATE:
        metadata = _mapping(node.get("metadata"), meta_path) or {}
        spec_path = f"{path}.spec" if path else "spec"
        spec = _mapping(node.get("spec"), spec_path)
        if spec is None:
            raise ShapeError(spec_path, "is required")
        spec_pointer = f"{ptr}/spec"
    elif shape is Shape.POD_SPEC:
        metadata, spec_path, spec, spec_pointer = {}, path, node, ptr
    else:
        return _container_view(node, path, policy, kind, namespace, fields)

    containers: list[Container] = []
    for container_kind, kind_field, kind_label in _KINDS:
        items = spec.get(kind_field)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ShapeError(f"{spec_path}.{kind_field}", f"must be a list, got {_type(items)}")
        for index, raw in enumerate(items):
            containers.append(
                _container(raw, container_kind, kind_field, kind_label, index, spec_path, spec_pointer, policy)
            )

    node_name = spec.get("nodeName")
    volumes = spec.get("volumes")
    host_pid = spec.get("hostPID")
    host_ipc = spec.get("hostIPC")
    scheduler = spec.get("schedulerName")
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")  # the second: deprecated alias
    claims = spec.get("resourceClaims")
    runtime = spec.get("runtimeClassName")
    claim_refs = NO_CLAIMS if claims is None else _resource_claims(claims, spec_path)
    job_path = ""
    job_deadline = False
    if kind in JOB_KINDS and keys and keys[-1] == "template" and isinstance(parent, dict):
        job_path = field_path(keys[:-1])
        job_deadline = parent.get("activeDeadlineSeconds") is not None or spec.get("activeDeadlineSeconds") is not None
    return PodView(
        path=spec_path,
        meta_path=meta_path,
        pointer=spec_pointer,
        annotations=_annotations(metadata.get("annotations"), meta_path),
        containers=containers,
        node_selector=_mapping(spec.get("nodeSelector"), spec_path, "nodeSelector"),
        affinity_keys=_required_affinity_keys(spec.get("affinity"), spec_path),
        raw_volumes=volumes,
        host_pid=host_pid is not None and _flag(host_pid, spec_path, "hostPID"),
        host_ipc=host_ipc is not None and _flag(host_ipc, spec_path, "hostIPC"),
        node_name="" if node_name is None else _string(node_name, spec_path, "nodeName"),
        is_pod=not keys,
        kind=kind,
        owner_kind=_controller_kind(metadata.get("ownerReferences"), meta_path) if not keys else "",
        namespace=namespace,
        scheduler_name="" if scheduler is None else _string(scheduler, spec_path, "schedulerName"),
        service_account="default" if account is None else _string(account, spec_path, "serviceAccountName"),
        resource_claims=tuple(claim_refs),
        runtime_class="" if runtime is None else _string(runtime, spec_path, "runtimeClassName"),
        raw_affinity=spec.get("affinity"),
        raw_tolerations=spec.get("tolerations"),
        claim_refs=claim_refs,
        job_path=job_path,
        job_deadline=job_deadline,
    )


def _container_view(
    node: dict[str, Any],
    path: str,
    policy: Policy,
    kind: str,
    namespace: str,
    fields: tuple[str, str] | None = None,
) -> PodView:
    """A view of one container-like object (Argo's container, KServe's model, NIMService's spec):
    a pod of one container, with no pod-level fields, whose messages name the object's own path.
    `fields` (env, resources) says where a kind keeps them, relative to the object."""
    if fields is None:
        c = _container(node, ContainerKind.REGULAR, "containers", "container", 0, path, "", policy, own_path=path)
    else:
        c = _mapped_container(node, path, policy, fields)
    return PodView(
        path=path,
        meta_path=f"{path}.metadata",
        pointer="",
        annotations={},
        containers=[c],
        node_selector=None,
        affinity_keys=frozenset(),
        raw_volumes=None,
        host_pid=False,
        host_ipc=False,
        node_name="",
        is_pod=False,
        kind=kind,
        owner_kind="",
        namespace=namespace,
        scheduler_name="",
        service_account="default",
        resource_claims=(),
        runtime_class="",
    )


def _mapped_container(node: dict[str, Any], path: str, policy: Policy, fields: tuple[str, str]) -> Container:
    """A container whose env and resources sit elsewhere in the object (VLLMRuntime: vllmConfig.env
    and deploymentConfig.resources, where `gpu: "1"` is a count of the GPU resource)."""
    env_field, resources_field = fields
    shaped: dict[str, Any] = {"name": node.get("name") or path}
    env = _dig(node, env_field)
    if env is not None:
        shaped["env"] = env
    resources = _dig(node, resources_field)
    gpu_field = ""
    if isinstance(resources, dict) and "limits" not in resources and "requests" not in resources:
        if resources.get("gpu") is not None:
            shaped["resources"] = {"limits": {policy.resource_name: resources["gpu"]}}
            gpu_field = f"{resources_field}.gpu"
    elif resources is not None:
        shaped["resources"] = resources
    c = _container(shaped, ContainerKind.REGULAR, "containers", "container", 0, path, "", policy, path, env_field)
    c.resources_field = resources_field
    c.gpu_field = gpu_field
    return c


def _dig(node: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _controller_kind(value: Any, meta_path: str) -> str:
    if value is None:
        return ""
    for i, ref in enumerate(_objects(value, meta_path, "ownerReferences")):
        if ref.get("controller") is True:
            return _string(ref.get("kind"), f"{meta_path}.ownerReferences[{i}]", "kind")
    return ""


def _resource_claims(value: Any, spec_path: str) -> Mapping[str, tuple[str, str]]:
    """spec.resourceClaims[*]: name -> ("template" | "claim", the object it names; "" if neither).
    Both shapes are accepted: 1.31+ puts resourceClaimName or resourceClaimTemplateName on the
    entry, 1.26-1.30 wrapped them in `source`. Which device a claim resolves to needs the
    cluster (webhook.policy.nodes.claim_classes)."""
    out: dict[str, tuple[str, str]] = {}
    for i, claim in enumerate(_objects(value, spec_path, "resourceClaims")):
        where = f"{spec_path}.resourceClaims[{i}]"
        name = _string(claim.get("name"), where, "name")
        source = claim.get("source")
        holder: dict[str, Any] = source if isinstance(source, dict) else claim
        template, named = holder.get("resourceClaimTemplateName"), holder.get("resourceClaimName")
        if isinstance(template, str) and template:
            out[name] = ("template", template)
        elif isinstance(named, str) and named:
            out[name] = ("claim", named)
        else:
            out[name] = ("", "")
    return out


def _annotations(value: Any, meta_path: str) -> dict[str, str]:
    annotations = _mapping(value, meta_path, "annotations")
    if not annotations:
        return {}
    for key, item in annotations.items():
        if item is not None and not isinstance(item, str):
            raise ShapeError(f'{meta_path}.annotations["{key}"]', f"must be a string, got {_type(item)}")
    if None in annotations.values():  # JSON null decodes to "" in Go's map[string]string
        return {k: v or "" for k, v in annotations.items()}
    return annotations


def _objects(value: Any, base: str, field: str) -> list[dict[str, Any]]:
    """`value` checked as a list of objects (envFrom, volumeMounts, volumes); paths only on error."""
    if not isinstance(value, list):
        raise ShapeError(f"{base}.{field}", f"must be a list, got {_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ShapeError(f"{base}.{field}[{i}]", f"must be an object, got {_type(item)}")
    return value


def _host_paths(value: Any, spec_path: str) -> tuple[HostPath, ...]:
    out: list[HostPath] = []
    for i, volume in enumerate(_objects(value, spec_path, "volumes")):
        host = volume.get("hostPath")
        if host is None:
            continue
        where = f"{spec_path}.volumes[{i}].hostPath"
        host_map = _mapping(host, where, optional=False)
        assert host_map is not None
        out.append(HostPath(i, _string(host_map.get("path"), where, "path")))
    return tuple(out)


def _container(
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
        raise ShapeError(path, f"must be an object, got {_type(raw)}")
    c = raw
    name = c.get("name", "")
    if not isinstance(name, str):
        raise ShapeError(f"{path}.name", f"must be a string, got {_type(name)}")
    if not name and own_path:
        name = own_path  # Argo's container and NIMService's spec have no name: messages show where it is
    image = c.get("image") or ""  # templates may leave it to a controller; JSON null is ""
    if not isinstance(image, str):
        if not own_path:
            raise ShapeError(f"{path}.image", f"must be a string, got {_type(image)}")
        image = ""  # NIMService's image is {repository, tag}: nothing a rule reads

    env = c.get("env")
    watched: dict[str, list[EnvVar]] = {}
    if env is not None and not isinstance(env, list):  # mutations append to it: always checked
        raise ShapeError(f"{path}.{env_field}", f"must be a list, got {_type(env)}")
    if env:
        for i, entry in enumerate(env):
            if not isinstance(entry, dict):
                raise ShapeError(f"{path}.{env_field}[{i}]", f"must be an object, got {_type(entry)}")
            env_name = entry.get("name")
            if not isinstance(env_name, str):
                raise ShapeError(f"{path}.{env_field}[{i}].name", "must be a string")
            if env_name in WATCHED:  # only the values we read are ours to type-check
                value = entry.get("value")
                if value is not None and not isinstance(value, str):
                    raise ShapeError(f"{path}.{env_field}[{i}].value", f"must be a string, got {_type(value)}")
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
            raise ShapeError(f"{path}.{resources_field}", f"must be an object, got {_type(resources)}")
        limits = _mapping(resources.get("limits"), path, f"{resources_field}.limits")
        requests = _mapping(resources.get("requests"), path, f"{resources_field}.requests")
        if resources.get("claims") is not None:
            claims = _claims(resources["claims"], path)

    privileged = False
    caps: tuple[str, ...] = ()
    security = c.get("securityContext")
    if security is not None:
        if not isinstance(security, dict):
            raise ShapeError(f"{path}.securityContext", f"must be an object, got {_type(security)}")
        flag = security.get("privileged")
        if flag is not None:
            privileged = _flag(flag, path, "securityContext.privileged")
        capabilities = security.get("capabilities")
        if capabilities is not None:
            _mapping(capabilities, path, "securityContext.capabilities")
            added = _list(capabilities.get("add"), path, "securityContext.capabilities.add") or []
            for i, cap in enumerate(added):
                _string(cap, path, f"securityContext.capabilities.add[{i}]")
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
    for i, item in enumerate(_objects(value, c.path, "envFrom")):
        source: EnvSource = ("", "")
        for field, what in _ENV_SOURCES:
            ref = item.get(field)
            if ref is not None:
                name = ref.get("name") if isinstance(ref, dict) else 0
                if name is not None and not isinstance(name, str):  # JSON null decodes to "" in Go
                    raise ShapeError(f"{c.path}.envFrom[{i}].{field}", "must be an object with a string name")
                source = (what, name or "")
        out.append(source)
    return tuple(out)


_ENV_SOURCES: Final[tuple[tuple[str, str], ...]] = (("configMapRef", "ConfigMap"), ("secretRef", "Secret"))


def _config_map_key(source: Any, path: str) -> tuple[str, str] | None:
    """(name, key) of valueFrom.configMapKeyRef, or None for any other source."""
    if source is None:
        return None
    if not isinstance(source, dict):
        raise ShapeError(f"{path}.valueFrom", f"must be an object, got {_type(source)}")
    ref = source.get("configMapKeyRef")
    if ref is None:
        return None
    if not isinstance(ref, dict):
        raise ShapeError(f"{path}.valueFrom.configMapKeyRef", f"must be an object, got {_type(ref)}")
    name, key = ref.get("name") or "", ref.get("key") or ""
    if not isinstance(name, str) or not isinstance(key, str):
        raise ShapeError(f"{path}.valueFrom.configMapKeyRef", "must have a string name and key")
    return (name, key)


def _mount_paths(value: Any, c: Container) -> tuple[str, ...]:
    out: list[str] = []
    for i, mount in enumerate(_objects(value, c.path, "volumeMounts")):
        mount_path = mount.get("mountPath")
        if not isinstance(mount_path, str):
            raise ShapeError(f"{c.path}.volumeMounts[{i}].mountPath", f"must be a string, got {_type(mount_path)}")
        out.append(mount_path)
    return tuple(out)


def _claims(value: Any, path: str) -> tuple[str, ...]:
    items = _list(value, path, "resources.claims") or ()
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


def _required_affinity_keys(affinity: Any, spec_path: str) -> frozenset[str]:
    if affinity is None:
        return frozenset()  # the common case: no string is built
    path = f"{spec_path}.affinity"
    aff = _mapping(affinity, path)
    if not aff:
        return frozenset()
    node_aff = _mapping(aff.get("nodeAffinity"), f"{path}.nodeAffinity")
    if not node_aff:
        return frozenset()
    req_path = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path)
    if not required:
        return frozenset()
    keys: set[str] = set()
    terms = _list(required.get("nodeSelectorTerms"), f"{req_path}.nodeSelectorTerms") or ()
    for t, term in enumerate(terms):
        term_path = f"{req_path}.nodeSelectorTerms[{t}]"
        term_map = _mapping(term, term_path, optional=False)
        assert term_map is not None
        for e, expr in enumerate(_list(term_map.get("matchExpressions"), f"{term_path}.matchExpressions") or ()):
            expr_map = _mapping(expr, f"{term_path}.matchExpressions[{e}]", optional=False)
            assert expr_map is not None
            # Terms are ORed; a pod that may land on a GPU node through any term is a GPU pod.
            if expr_map.get("operator") in ("In", "Exists") and isinstance(expr_map.get("key"), str):
                keys.add(expr_map["key"])
    return frozenset(keys)


def quote_key(key: str) -> str:
    """A resource or label key as Kubernetes prints it in field paths."""
    return f'["{key}"]' if "/" in key or "." in key else f".{key}"
