"""Finding the pod spec inside an object and reading it into a checked, flat view.

Rules never walk raw dicts themselves: `build_view` walks each object once, checks the
type of every field a rule reads, and raises `ShapeError` naming the field path when
something is not what the Kubernetes API allows. That keeps the rules short and makes
"malformed" a clear error instead of a silent allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .quantity import QuantityError, parse_quantity
from .templates import BUILTIN, Key, Templates, expand, field_path, pointer
from .types import Policy, Violation

CONTAINER_KINDS: tuple[tuple[str, str], ...] = (
    ("initContainers", "init container"),
    ("containers", "container"),
    ("ephemeralContainers", "ephemeral container"),
)


class ShapeError(ValueError):
    """The object does not have the shape the Kubernetes API gives it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# Env names the rules and mutations read; `build_view` records where each one occurs so
# nobody rescans env lists (they are the bulk of a pod spec).
WATCHED_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"})
_WATCHED_BYTES = tuple((name, name.encode()) for name in sorted(WATCHED_ENV))
# Any backslash in JSON text starts an escape, which could spell a name differently ("\\u0041");
# Go's encoder (the API server's) writes them only for control characters, <, > and &.
# One memchr-speed check for it beats scanning for each escape form.
ESCAPE = b"\\"


def watched_in(raw: bytes | None) -> frozenset[str]:
    """The WATCHED_ENV names that can occur in an object whose JSON is `raw`.

    With the raw request body at hand (the server), env lists without any watched name are
    not walked at all: they are most of a pod spec's bytes. Without it (the CLI), or when
    an escape could spell a name differently, every env list is walked and type-checked.
    """
    if raw is None or ESCAPE in raw:
        return WATCHED_ENV
    return frozenset(name for name, token in _WATCHED_BYTES if token in raw)


@dataclass(slots=True)
class Container:
    """One container of any kind, with the fields the rules read already type-checked."""

    kind: str  # "containers" | "initContainers" | "ephemeralContainers"
    label: str  # "container" | "init container" | "ephemeral container"
    index: int
    name: str
    spec_path: str  # field path of the pod spec, e.g. "spec.template.spec"
    spec_pointer: str  # JSON pointer of the pod spec, e.g. "/spec"
    raw: dict[str, Any]
    env: list[dict[str, Any]] | None
    watched: dict[str, list[int]]  # WATCHED_ENV name -> indices in env, in order
    limits: dict[str, Any] | None
    requests: dict[str, Any] | None
    security: dict[str, Any] | None
    gpu: Decimal | None  # parsed GPU count (limits, else requests); None when unset or unparsable

    @property
    def path(self) -> str:
        """Field path, as messages show it: "spec.template.spec.containers[0]"."""
        return f"{self.spec_path}.{self.kind}[{self.index}]"

    @property
    def pointer(self) -> str:
        """JSON pointer, as patches need it: "/spec/containers/0"."""
        return f"{self.spec_pointer}/{self.kind}/{self.index}"

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


@dataclass(slots=True)
class PodView:
    """A pod spec (of a Pod or of a template) and where it sits in its object."""

    path: str  # field path prefix of the pod spec, e.g. "spec.template.spec"
    meta_path: str  # field path of the template's metadata, e.g. "spec.template.metadata"
    pointer: str  # JSON pointer of the pod spec, e.g. "/spec"
    metadata: dict[str, Any]
    spec: dict[str, Any]
    containers: list[Container]
    node_selector: dict[str, Any] | None
    affinity_keys: frozenset[str]  # label keys pinned by required node affinity (In / Exists)
    is_pod: bool

    @property
    def requests_gpu(self) -> bool:
        return any(c.gpu is not None and c.gpu > 0 for c in self.containers)

    def pinned_to(self, label: str) -> bool:
        """True when the pod asks for nodes carrying `label`: nodeSelector, or any required
        node-affinity term with In/Exists (terms are ORed, so one term is enough to land there)."""
        if self.node_selector is not None and label in self.node_selector:
            return True
        return label in self.affinity_keys

    def is_gpu_pod(self, policy: Policy) -> bool:
        return self.requests_gpu or self.pinned_to(policy.accelerator_label)


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


def _type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


def find_templates(group: str, kind: str, policy: Policy) -> Templates | None:
    """Where `kind`'s pod templates are: the configured table first, then the built-in one."""
    return policy.custom_templates.get((group, kind)) or BUILTIN.get((group, kind))


def build_views(obj: Any, templates: Templates, policy: Policy, watch: frozenset[str] = WATCHED_ENV) -> list[PodView]:
    """A view of every pod template `templates` finds in `obj` (one for a Pod or a Deployment)."""
    if not isinstance(obj, dict):
        raise ShapeError("object", f"must be an object, got {_type(obj)}")
    if templates.required:
        return [build_view(obj, keys, policy, watch) for keys in templates.paths]
    return [build_view(obj, keys, policy, watch) for pattern in templates.paths for keys in expand(obj, pattern)]


def build_view(
    obj: dict[str, Any], keys: tuple[Key, ...], policy: Policy, watch: frozenset[str] = WATCHED_ENV
) -> PodView:
    """Walk `obj` down `keys` to a pod template ({metadata, spec}) and read it into a `PodView`."""
    node: Any = obj
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
        node = child
    path = field_path(keys)
    node = _mapping(node, path or "object", optional=False)
    assert node is not None
    ptr = pointer(keys)
    meta_path = f"{path}.metadata" if path else "metadata"
    metadata = _mapping(node.get("metadata"), meta_path) or {}
    spec_path = f"{path}.spec" if path else "spec"
    spec = _mapping(node.get("spec"), spec_path)
    if spec is None:
        raise ShapeError(spec_path, "is required")

    containers: list[Container] = []
    for kind, label in CONTAINER_KINDS:
        items = _list(spec.get(kind), spec_path, kind)
        for index, raw in enumerate(items or ()):
            containers.append(_container(raw, kind, label, index, spec_path, f"{ptr}/spec", policy, watch))

    node_selector = _mapping(spec.get("nodeSelector"), spec_path, "nodeSelector")
    return PodView(
        path=spec_path,
        meta_path=meta_path,
        pointer=f"{ptr}/spec",
        metadata=metadata,
        spec=spec,
        containers=containers,
        node_selector=node_selector,
        affinity_keys=_required_affinity_keys(spec.get("affinity"), spec_path),
        is_pod=not keys,
    )


def _container(
    raw: Any,
    kind: str,
    label: str,
    index: int,
    spec_path: str,
    spec_pointer: str,
    policy: Policy,
    watch: frozenset[str],
) -> Container:
    path = f"{spec_path}.{kind}[{index}]"  # for error messages
    if not isinstance(raw, dict):
        raise ShapeError(path, f"must be an object, got {_type(raw)}")
    c = raw
    name = c.get("name", "")
    if not isinstance(name, str):
        raise ShapeError(f"{path}.name", f"must be a string, got {_type(name)}")

    env = c.get("env")
    watched: dict[str, list[int]] = {}
    if env is not None and not isinstance(env, list):  # mutations append to it: always checked
        raise ShapeError(f"{path}.env", f"must be a list, got {_type(env)}")
    if env and watch:
        for i, entry in enumerate(env):
            if not isinstance(entry, dict):
                raise ShapeError(f"{path}.env[{i}]", f"must be an object, got {_type(entry)}")
            env_name = entry.get("name")
            if not isinstance(env_name, str):
                raise ShapeError(f"{path}.env[{i}].name", "must be a string")
            if env_name in watch:  # only the values we read are ours to type-check
                value = entry.get("value")
                if value is not None and not isinstance(value, str):
                    raise ShapeError(f"{path}.env[{i}].value", f"must be a string, got {_type(value)}")
                watched.setdefault(env_name, []).append(i)

    limits = requests = None
    resources = c.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            raise ShapeError(f"{path}.resources", f"must be an object, got {_type(resources)}")
        limits = _mapping(resources.get("limits"), path, "resources.limits")
        requests = _mapping(resources.get("requests"), path, "resources.requests")

    security = c.get("securityContext")
    if security is not None:
        if not isinstance(security, dict):
            raise ShapeError(f"{path}.securityContext", f"must be an object, got {_type(security)}")
        caps = _mapping(security.get("capabilities"), path, "securityContext.capabilities")
        if caps is not None:
            for i, cap in enumerate(_list(caps.get("add"), path, "securityContext.capabilities.add") or ()):
                if not isinstance(cap, str):
                    raise ShapeError(f"{path}.securityContext.capabilities.add[{i}]", "must be a string")
        privileged = security.get("privileged")
        if privileged is not None and not isinstance(privileged, bool):
            raise ShapeError(f"{path}.securityContext.privileged", f"must be a boolean, got {_type(privileged)}")

    return Container(
        kind=kind,
        label=label,
        index=index,
        name=name,
        spec_path=spec_path,
        spec_pointer=spec_pointer,
        raw=c,
        env=env,
        watched=watched,
        limits=limits,
        requests=requests,
        security=security,
        gpu=_gpu_count(limits, requests, policy.resource_name),
    )


def _gpu_count(limits: dict[str, Any] | None, requests: dict[str, Any] | None, resource: str) -> Decimal | None:
    # Limits decide (they are what the device plugin allocates); templates may carry
    # only one side, so fall back to requests.
    for side in (limits, requests):
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


def env_entries(c: Container, name: str) -> list[tuple[int, dict[str, Any]]]:
    """All entries of `c.env` named `name` (one of WATCHED_ENV; case-sensitive, as the kubelet compares)."""
    assert c.env is not None or not c.watched
    return [(i, c.env[i]) for i in c.watched.get(name, ())]  # type: ignore[index]


def quote_key(key: str) -> str:
    """A resource or label key as Kubernetes prints it in field paths."""
    return f'["{key}"]' if "/" in key or "." in key else f".{key}"
