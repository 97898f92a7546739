"""The cluster view: Nodes and DRA objects, listed and watched off the event loop.

One thread per watched resource runs the informer protocol through the official `kubernetes`
client: a paginated list (`limit`/`continue`), then a watch from the list's resourceVersion
with bookmarks; a watch that ends is resumed from the last resourceVersion seen (bookmarks
included), a `410 Gone` (expired version or continue token) starts a fresh list, and any other
failure is retried with capped, jittered backoff. Each thread keeps only what the policy reads
(webhook.policy.nodes.node_key for Nodes; device class names for claims), and a publisher
thread turns the stores into one immutable `ClusterView`, at most every `min_interval`, handed
to the event loop with `call_soon_threadsafe`. The request path never waits on any of this: it
reads whichever view was last handed over.

The view is published as None (pre-flight rules silent) until Nodes are listed, and again
whenever the node watch is broken and not yet re-established: a stale picture of the cluster
is not a reason to warn anyone.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..policy.namespaces import GPU_KINDS_ANNOTATION, NAME_LABEL
from ..policy.nodes import NodeKey, group_nodes, node_key
from ..policy.types import ClusterView, NamespaceFacts
from .client import read_json, short_error
from .reflector import Reflector, Timing

log = logging.getLogger("gpu-policy.clusterview")


DRA_GROUP = "resource.k8s.io"


DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")  # served by 1.34+, 1.33+, 1.32+ (newest first)


def _claim_classes(spec: Any) -> tuple[str, ...] | None:
    """Device class names a claim spec requests: requests[].exactly.deviceClassName (v1, v1beta2),
    requests[].deviceClassName (v1beta1), and every firstAvailable[].deviceClassName."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    if not isinstance(requests, list):
        return ()
    out: list[str] = []
    for r in requests:
        if not isinstance(r, dict):
            continue
        for holder in (r.get("exactly"), r, *(r.get("firstAvailable") or ())):
            if isinstance(holder, dict) and isinstance(holder.get("deviceClassName"), str):
                out.append(holder["deviceClassName"])
    return tuple(sorted(set(out)))


def _namespaced(obj: Any) -> tuple[str, str] | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    return (str(meta.get("namespace") or ""), meta["name"])


def reduce_namespace(obj: Any) -> tuple[Any, Any] | None:
    """name -> NamespaceFacts: its labels as sorted pairs and the gpu-policy.io/gpu-kinds
    annotation, nothing else. Kept small for clusters of many namespaces: label keys and values
    interned, equal facts shared (hashable tuples, see Reflector._value), and
    `kubernetes.io/metadata.name`, which only repeats the name, left out (the rules add it back)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    labels = meta.get("labels")
    pairs = labels.items() if isinstance(labels, dict) else ()
    kept = sorted((sys.intern(str(k)), sys.intern(str(v))) for k, v in pairs if k != NAME_LABEL)
    annotations = meta.get("annotations")
    kinds = annotations.get(GPU_KINDS_ANNOTATION) if isinstance(annotations, dict) else None
    return meta["name"], NamespaceFacts(tuple(kept), sys.intern(kinds) if isinstance(kinds, str) else "")


def reduce_claim(obj: Any) -> tuple[Any, Any] | None:
    key = _namespaced(obj)
    return None if key is None else (key, _claim_classes(obj.get("spec")))


def reduce_claim_template(obj: Any) -> tuple[Any, Any] | None:
    key = _namespaced(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    return None if key is None else (key, _claim_classes(spec.get("spec")))


def reduce_device_class(obj: Any) -> tuple[Any, Any] | None:
    key = _namespaced(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    name = spec.get("extendedResourceName")
    return None if key is None else (key[1], name if isinstance(name, str) else "")


class ClusterWatcher:
    """Nodes, and (where the cluster serves resource.k8s.io) DeviceClasses, ResourceClaims and
    ResourceClaimTemplates, published together as one `ClusterView`."""

    def __init__(
        self,
        api_client: Any,
        publish: Callable[[ClusterView | None], None],
        timing: Timing | None = None,
        metrics: Any = None,
        namespaces: bool = False,
    ) -> None:
        """`namespaces`: also watch namespaces (for the rules that read them; needs their RBAC)."""
        from kubernetes import client

        self.api_client = api_client
        self.publish = publish
        self.timing = timing or Timing()
        self.metrics = metrics
        self.stop = threading.Event()
        self.dirty = threading.Event()
        self.reconnected: Callable[[], None] = lambda: None
        core = client.CoreV1Api(api_client)
        self.nodes = Reflector("nodes", core.list_node, node_key, self.dirty.set, self.stop, self.timing, metrics)
        self.nodes.reconnected = lambda: self.reconnected()
        self.namespaces = (
            Reflector(
                "namespaces", core.list_namespace, reduce_namespace, self.dirty.set, self.stop, self.timing, metrics
            )
            if namespaces
            else None
        )
        self.dra: dict[str, Reflector] = {}
        self.dra_state = "unknown"  # unknown | absent (not served) | forbidden | watched
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self._thread("nodes", self.nodes.run)
        if self.namespaces is not None:
            self._thread("namespaces", self.namespaces.run)
        self._thread("dra", self._start_dra)
        self._thread("publish", self._publisher)

    def _thread(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=f"clusterview-{name}", daemon=True)
        t.start()
        self.threads.append(t)

    def close(self) -> None:
        self.stop.set()
        self.dirty.set()

    def _start_dra(self) -> None:
        """Finds the newest resource.k8s.io version served, then watches its three resources."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        custom = client.CustomObjectsApi(self.api_client)
        wait = self.timing.backoff[0]
        while not self.stop.is_set():
            try:
                version = self._dra_version(custom)
                break
            except ApiException as exc:
                if exc.status in (401, 403):
                    self._forbidden(exc)
                    return
            except Exception as exc:
                log.debug("resource.k8s.io discovery failed (%s); retrying", short_error(exc))
            self.stop.wait(wait)
            wait = min(wait * 2, self.timing.backoff[1])
        else:
            return
        for plural, reflector in self._dra_reflectors(custom, version).items():
            self._thread(plural, reflector.run)

    def _forbidden(self, exc: Any) -> None:
        log.warning(
            "cannot list resource.k8s.io deviceclasses (%s): DRA claims stay conservative and "
            "pre-flight rules are silent about device-plugin resources",
            exc.status,
        )
        self.dra_state = "forbidden"
        self.dirty.set()

    def _dra_reflectors(self, custom: Any, version: str | None) -> dict[str, Reflector]:
        if version is None:
            self.dra_state = "absent"
            self.dirty.set()
            return {}
        self.dra_state = "watched"
        log.info("DRA: resource.k8s.io/%s deviceclasses, resourceclaims, resourceclaimtemplates", version)
        for plural, reduce in (
            ("deviceclasses", reduce_device_class),
            ("resourceclaims", reduce_claim),
            ("resourceclaimtemplates", reduce_claim_template),
        ):
            call = _custom_list(custom, DRA_GROUP, version, plural)
            self.dra[plural] = Reflector(plural, call, reduce, self.dirty.set, self.stop, self.timing, self.metrics)
        return self.dra

    def snapshot(self) -> ClusterView:
        """One list of everything, no watch (`check --cluster`, `audit`); raises what the lists raise."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        self.nodes.list()
        if self.namespaces is not None:
            try:
                self.namespaces.list()
            except ApiException as exc:
                if exc.status not in (401, 403):
                    raise
                log.warning("cannot list namespaces (%s): gpu-namespace-allowed fails closed", exc.status)
        custom = client.CustomObjectsApi(self.api_client)
        try:
            reflectors = self._dra_reflectors(custom, self._dra_version(custom))
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            self._forbidden(exc)
            reflectors = {}
        for reflector in reflectors.values():
            try:
                reflector.list()
            except ApiException as exc:
                if exc.status not in (401, 403):
                    raise
                log.warning("cannot list %s (%s): claims of that kind stay conservative", reflector.name, exc.status)
        view = self.view()
        assert view is not None  # nodes were just listed
        return view

    def _dra_version(self, custom: Any) -> str | None:
        from kubernetes.client.exceptions import ApiException

        for version in DRA_VERSIONS:
            try:
                response = custom.list_cluster_custom_object(
                    DRA_GROUP,
                    version,
                    "deviceclasses",
                    limit=1,
                    _preload_content=False,
                    _request_timeout=(self.timing.connect_seconds, self.timing.read_seconds),
                )
                read_json(response)
                return version
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return None

    def view(self) -> ClusterView | None:
        """The current view, or None while nodes are not listed or their watch is broken."""
        with self.nodes.lock:
            if not (self.nodes.synced and self.nodes.connected):
                return None
            pairs: list[tuple[str, NodeKey]] = list(self.nodes.store.items())
        claims = templates = None
        extended: frozenset[str] | None = None
        if self.dra_state == "absent":
            extended = frozenset()
        elif self.dra_state == "watched":
            tables = {}
            for plural, r in self.dra.items():
                with r.lock:
                    tables[plural] = dict(r.store) if r.synced else None
            classes = tables.get("deviceclasses")
            extended = None if classes is None else frozenset(v for v in classes.values() if v)
            claims = tables.get("resourceclaims")
            templates = tables.get("resourceclaimtemplates")
        namespaces = None
        if self.namespaces is not None:
            with self.namespaces.lock:
                namespaces = dict(self.namespaces.store) if self.namespaces.synced else None
        return ClusterView(
            groups=group_nodes(pairs),
            nodes=len(pairs),
            claims=claims,
            claim_templates=templates,
            dra_extended=extended,
            namespaces=namespaces,
        )

    def _publisher(self) -> None:
        while not self.stop.is_set():
            self.dirty.wait()
            if self.stop.is_set():
                return
            self.dirty.clear()
            try:
                self.publish(self.view())
            except Exception:  # never let the publisher die: the next change tries again
                log.exception("publishing the cluster view failed")
            self.stop.wait(self.timing.min_interval)


def _custom_list(custom: Any, group: str, version: str, plural: str) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(group, version, plural, **kwargs)

    return call
