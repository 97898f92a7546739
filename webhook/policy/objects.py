"""Finding the pod spec inside an object and reading it into a checked, typed view.

Rules never walk raw dicts: `build_view` walks each object once, checks the type of every
field a rule or mutation reads (webhook.policy.shapes), and raises `ShapeError` naming the field
path when something is not what the Kubernetes API allows. The view holds only typed fields
(PodView here, each container a webhook.policy.containers.Container), so a rule cannot skip a
shape check by accident, and "malformed" is always a clear error, never a silent allow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from .containers import Container, read_container, read_mapped_container
from .shapes import ShapeError, as_flag, as_list, as_mapping, as_string, objects_at, type_name
from .templates import BUILTIN, Key, Shape, Templates, expand, field_path, pointer
from .types import ContainerKind, Policy

# The claim references of a pod without spec.resourceClaims (nearly all): one shared, read-only
# mapping instead of an empty dict per view.
NO_CLAIMS: Final[Mapping[str, tuple[str, str]]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class HostPath:
    index: int  # in spec.volumes
    path: str
    name: str = ""  # the volume's name, which volumeMounts refer to


# What one object may hold and still be judged: the budget that keeps the work a request causes
# linear and small. Past it, validate denies "too large to judge" and mutate answers the same
# error, never a partial patch (webhook.admission.decide). Both are far beyond what any workload
# uses, and the second is the API server's own limit, so nothing it would store is refused.
MAX_CONTAINERS: Final = 1000  # containers of all kinds, summed over an object's pod templates
MAX_VOLUMES: Final = 1000  # volumes of one pod spec: three hostPath rules read each
# apimachinery's ValidateAnnotationsSize (TotalAnnotationSizeLimitB): keys and values together.
MAX_ANNOTATION_BYTES: Final = 256 * 1024


def too_large(path: str, what: str, limit: int) -> ShapeError:
    """The error of an object past a budget: where, how much, and the budget."""
    return ShapeError(path, f"holds {what}: too large to judge (at most {limit})")


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
    # The pod (template) opts out of HAMi's webhook (label hami.io/webhook: ignore): HAMi will add
    # no device resource beside a companion one, so a companion alone gets no GPU from a plugin.
    hami_opt_out: bool
    # metadata.labels as given: read only where a config exception names podLabels (engine.excepted),
    # which checks its shape; the walk never pays for them.
    raw_labels: Any
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
        hami_opt_out: bool = False,
        raw_labels: Any = None,
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
        self.hami_opt_out = hami_opt_out
        self.raw_labels = raw_labels
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
    namespace = _namespace(obj, namespace)
    views: list[PodView] = []
    held = 0  # MAX_CONTAINERS over every view: each counts one besides its containers
    for keys, shape in _candidates(obj, templates):
        view = build_view(obj, keys, policy, kind, namespace, shape, templates.fields)
        views.append(view)
        held += 1 + len(view.containers)
        # One view alone is checked as it is read (build_view); several, as they add up, so at
        # most twice the budget is ever read.
        if len(views) > 1 and held > MAX_CONTAINERS:
            raise too_large(view.path or "object", f"{held} containers and pod templates", MAX_CONTAINERS)
    return views


def build_pod_view(obj: Any, policy: Policy, namespace: str = "") -> PodView:
    """The view of a Pod: build_views for the one template a Pod is (itself), without looking
    for it (the mutating webhook's every review is a Pod)."""
    return build_view(_namespace_checked(obj), (), policy, "Pod", _namespace(obj, namespace))


def _namespace_checked(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ShapeError("object", f"must be an object, got {type_name(obj)}")
    return obj


def _namespace(obj: Any, namespace: str) -> str:
    """The request's namespace, else (offline files: "") the object's metadata.namespace."""
    _namespace_checked(obj)
    if namespace:
        return namespace
    meta = obj.get("metadata")
    found = meta.get("namespace") if isinstance(meta, dict) else None
    return found if isinstance(found, str) else ""


def _candidates(obj: dict[str, Any], templates: Templates) -> Iterator[tuple[tuple[Key, ...], Shape]]:
    """Where `templates` finds pod specs in `obj`: its fixed paths, or what its globs match."""
    if templates.required:
        for path in templates.paths:
            yield path, Shape.TEMPLATE
        return
    for shape, patterns in templates.by_shape():
        for pattern in patterns:
            for keys in expand(obj, pattern):
                # A glob may match fields that are not pod specs (KServe's predictor.minReplicas): only
                # objects are candidates; an object of the wrong shape is still a ShapeError.
                if shape is Shape.TEMPLATE or isinstance(_at(obj, keys), dict):
                    yield keys, shape


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
    node = as_mapping(node, path or "object", optional=False)
    assert node is not None
    ptr = pointer(keys)
    meta_path = f"{path}.metadata" if path else "metadata"
    if shape is Shape.TEMPLATE:
        metadata = as_mapping(node.get("metadata"), meta_path) or {}
        spec_path = f"{path}.spec" if path else "spec"
        spec = as_mapping(node.get("spec"), spec_path)
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
            raise ShapeError(f"{spec_path}.{kind_field}", f"must be a list, got {type_name(items)}")
        if len(containers) + len(items) > MAX_CONTAINERS:  # before any is read
            held = len(containers) + len(items)
            raise too_large(f"{spec_path}.{kind_field}", f"{held} containers", MAX_CONTAINERS)
        for index, raw in enumerate(items):
            containers.append(
                read_container(raw, container_kind, kind_field, kind_label, index, spec_path, spec_pointer, policy)
            )

    node_name = spec.get("nodeName")
    volumes = spec.get("volumes")
    if isinstance(volumes, list) and len(volumes) > MAX_VOLUMES:
        raise too_large(f"{spec_path}.volumes", f"{len(volumes)} volumes", MAX_VOLUMES)
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
        node_selector=as_mapping(spec.get("nodeSelector"), spec_path, "nodeSelector"),
        affinity_keys=_required_affinity_keys(spec.get("affinity"), spec_path),
        raw_volumes=volumes,
        host_pid=host_pid is not None and as_flag(host_pid, spec_path, "hostPID"),
        host_ipc=host_ipc is not None and as_flag(host_ipc, spec_path, "hostIPC"),
        node_name="" if node_name is None else as_string(node_name, spec_path, "nodeName"),
        is_pod=not keys,
        kind=kind,
        owner_kind=_controller_kind(metadata.get("ownerReferences"), meta_path) if not keys else "",
        namespace=namespace,
        scheduler_name="" if scheduler is None else as_string(scheduler, spec_path, "schedulerName"),
        service_account="default" if account is None else as_string(account, spec_path, "serviceAccountName"),
        resource_claims=tuple(claim_refs),
        runtime_class="" if runtime is None else as_string(runtime, spec_path, "runtimeClassName"),
        raw_affinity=spec.get("affinity"),
        raw_tolerations=spec.get("tolerations"),
        claim_refs=claim_refs,
        job_path=job_path,
        job_deadline=job_deadline,
        hami_opt_out=_hami_opt_out(metadata.get("labels")),
        raw_labels=metadata.get("labels"),
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
        c = read_container(node, ContainerKind.REGULAR, "containers", "container", 0, path, "", policy, own_path=path)
    else:
        c = read_mapped_container(node, path, policy, fields)
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


def _controller_kind(value: Any, meta_path: str) -> str:
    if value is None:
        return ""
    for i, ref in enumerate(objects_at(value, meta_path, "ownerReferences")):
        if ref.get("controller") is True:
            return as_string(ref.get("kind"), f"{meta_path}.ownerReferences[{i}]", "kind")
    return ""


def _resource_claims(value: Any, spec_path: str) -> Mapping[str, tuple[str, str]]:
    """spec.resourceClaims[*]: name -> ("template" | "claim", the object it names; "" if neither).
    Both shapes are accepted: 1.31+ puts resourceClaimName or resourceClaimTemplateName on the
    entry, 1.26-1.30 wrapped them in `source`. Which device a claim resolves to needs the
    cluster (webhook.policy.nodes.claim_classes)."""
    out: dict[str, tuple[str, str]] = {}
    for i, claim in enumerate(objects_at(value, spec_path, "resourceClaims")):
        where = f"{spec_path}.resourceClaims[{i}]"
        name = as_string(claim.get("name"), where, "name")
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
    annotations = as_mapping(value, meta_path, "annotations")
    if not annotations:
        return {}
    size = 0
    for key, item in annotations.items():
        if item is not None and not isinstance(item, str):
            raise ShapeError(f'{meta_path}.annotations["{key}"]', f"must be a string, got {type_name(item)}")
        size += len(key) + (len(item) if item else 0)  # characters: never more than the API's bytes
    if size > MAX_ANNOTATION_BYTES:
        raise too_large(f"{meta_path}.annotations", f"{size} characters", MAX_ANNOTATION_BYTES)
    if None in annotations.values():  # JSON null decodes to "" in Go's map[string]string
        return {k: v or "" for k, v in annotations.items()}
    return annotations


HAMI_OPT_OUT: Final = ("hami.io/webhook", "ignore")  # HAMi's chart: its webhook's objectSelector


def _hami_opt_out(labels: Any) -> bool:
    return isinstance(labels, dict) and labels.get(HAMI_OPT_OUT[0]) == HAMI_OPT_OUT[1]


def _host_paths(value: Any, spec_path: str) -> tuple[HostPath, ...]:
    out: list[HostPath] = []
    for i, volume in enumerate(objects_at(value, spec_path, "volumes")):
        host = volume.get("hostPath")
        if host is None:
            continue
        where = f"{spec_path}.volumes[{i}].hostPath"
        host_map = as_mapping(host, where, optional=False)
        assert host_map is not None
        name = volume.get("name")
        out.append(HostPath(i, as_string(host_map.get("path"), where, "path"), name if isinstance(name, str) else ""))
    return tuple(out)


def _required_affinity_keys(affinity: Any, spec_path: str) -> frozenset[str]:
    if affinity is None:
        return frozenset()  # the common case: no string is built
    path = f"{spec_path}.affinity"
    aff = as_mapping(affinity, path)
    if not aff:
        return frozenset()
    node_aff = as_mapping(aff.get("nodeAffinity"), f"{path}.nodeAffinity")
    if not node_aff:
        return frozenset()
    req_path = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = as_mapping(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path)
    if not required:
        return frozenset()
    keys: set[str] = set()
    terms = as_list(required.get("nodeSelectorTerms"), f"{req_path}.nodeSelectorTerms") or ()
    for t, term in enumerate(terms):
        term_path = f"{req_path}.nodeSelectorTerms[{t}]"
        term_map = as_mapping(term, term_path, optional=False)
        assert term_map is not None
        for e, expr in enumerate(as_list(term_map.get("matchExpressions"), f"{term_path}.matchExpressions") or ()):
            expr_map = as_mapping(expr, f"{term_path}.matchExpressions[{e}]", optional=False)
            assert expr_map is not None
            # Terms are ORed; a pod that may land on a GPU node through any term is a GPU pod.
            if expr_map.get("operator") in ("In", "Exists") and isinstance(expr_map.get("key"), str):
                keys.add(expr_map["key"])
    return frozenset(keys)
