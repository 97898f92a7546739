"""A stand-in kube-apiserver for list and watch, on loopback over TLS.

No kube-apiserver binary is obtainable here, so this plays one for the `kubernetes` client the
way the real one answers (k8s.io/apiserver: the watch cache and the REST handlers):
- lists return `{kind: XList, metadata: {resourceVersion, continue}, items}`; `limit` pages
  through one consistent snapshot, and a continue token that has expired answers HTTP 410
  with a `Status` of reason Expired;
- `watch=true` answers 200 with a chunked stream of JSON lines `{type, object}`: the events
  after `resourceVersion`, then new ones as they happen; `allowWatchBookmarks` adds BOOKMARK
  events (an object with only kind, apiVersion and metadata.resourceVersion); a version older
  than the retained history gets one ERROR event with a 410 Status, then the stream ends; the
  stream ends after `timeoutSeconds`;
- every request needs the kubeconfig's bearer token (401 otherwise), /version answers a
  vendor gitVersion, and resources or versions it does not serve are 404.
Tests steer it: change objects, compact the history (forcing 410), stall every stream, drop
every connection, answer slowly, or stop and start again on the same port.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

TOKEN = "stand-in-token"

# plural -> (group, kind, namespaced); the versions each group serves are set per instance.
KINDS: dict[str, tuple[str, str, bool]] = {
    "nodes": ("", "Node", False),
    "namespaces": ("", "Namespace", False),
    "pods": ("", "Pod", True),
    "podtemplates": ("", "PodTemplate", True),
    "replicationcontrollers": ("", "ReplicationController", True),
    "limitranges": ("", "LimitRange", True),
    "resourcequotas": ("", "ResourceQuota", True),
    "configmaps": ("", "ConfigMap", True),
    "events": ("", "Event", True),
    "deployments": ("apps", "Deployment", True),
    "replicasets": ("apps", "ReplicaSet", True),
    "statefulsets": ("apps", "StatefulSet", True),
    "daemonsets": ("apps", "DaemonSet", True),
    "jobs": ("batch", "Job", True),
    "cronjobs": ("batch", "CronJob", True),
    "deviceclasses": ("resource.k8s.io", "DeviceClass", False),
    "resourceclaims": ("resource.k8s.io", "ResourceClaim", True),
    "resourceclaimtemplates": ("resource.k8s.io", "ResourceClaimTemplate", True),
    "policyreports": ("wgpolicyk8s.io", "PolicyReport", True),
    "mutatingadmissionpolicies": ("admissionregistration.k8s.io", "MutatingAdmissionPolicy", False),
    "mutatingadmissionpolicybindings": ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding", False),
    "validatingadmissionpolicies": ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", False),
    "validatingadmissionpolicybindings": ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", False),
}


def flag(value: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (the client sends "True")."""
    return value in ("1", "t", "T", "TRUE", "true", "True")


def _selected(obj: dict[str, Any], query: Any) -> bool:
    """labelSelector (k=v, comma-separated) and fieldSelector (involvedObject.name=x), as used here."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (query.get("labelSelector") or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, (query.get("fieldSelector") or "").split(",")):
        key, _, value = term.partition("=")
        node: Any = obj
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node != value:
            return False
    return True


def not_found() -> web.Response:
    return web.json_response(status(404, "NotFound", "the server could not find the requested resource"), status=404)


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class KubeApi:
    """The stand-in. `start()` serves it from a background thread; all state lives on its loop."""

    def __init__(
        self,
        cert_dir: Path,
        *,
        git_version: str = "v1.31.4-gke.1183000",
        served: dict[str, tuple[str, ...]] | None = None,
        bookmark_seconds: float = 0.5,
    ) -> None:
        self.cert_dir = cert_dir
        self.git_version = git_version
        # group -> versions served ("" is the core group)
        self.served = served or {"": ("v1",), "apps": ("v1",), "batch": ("v1",), "resource.k8s.io": ("v1",)}
        self.bookmark_seconds = bookmark_seconds
        self.rv = 100
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {p: {} for p in KINDS}
        self.history: dict[str, list[tuple[int, str, dict[str, Any]]]] = {p: [] for p in KINDS}
        self.oldest = 0  # watches from before this version get 410
        self.tokens: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self.watchers: dict[str, set[asyncio.Queue[Any]]] = {p: set() for p in KINDS}
        self.streams: set[web.StreamResponse] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, query)
        self.stalled = asyncio.Event()  # set: streams send nothing
        self.delay = 0.0  # seconds before answering a list
        self.port = 0
        # Playing the rest of the control plane for pods created through this API server:
        # `admit(pod)` is the admission chain (status, object or Status), `on_create(pod)` the
        # scheduler and kubelet (it may change the pod, its logs and events through the loop),
        # `on_delete(pod)` the kubelet tearing a deleted pod down (its devices freed).
        self.admit: Any = None
        self.on_create: Any = None
        self.on_delete: Any = None
        self.logs: dict[tuple[str, str], str] = {}
        self.deleted: list[tuple[str, str, str]] = []  # (plural, namespace, name)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kubeapi", daemon=True)
        self.thread.start()
        self.runner: web.AppRunner | None = None
        self._ids = itertools.count()

    # ------------------------------------------------------------ control (from the test thread)

    def call(self, fn: Any, *args: Any) -> Any:
        async def run() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def start(self) -> KubeApi:
        self.call(self._start)
        return self

    def stop(self) -> None:
        """Like a killed API server: every connection is cut, nothing more is answered."""
        self.call(self._stop)

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)

    def put(self, *objs: dict[str, Any]) -> int:
        return int(self.call(self._put_all, objs))

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        self.call(self._delete, plural, name, namespace)

    def compact(self) -> None:
        """Forget the event history and continue tokens: older versions now answer 410."""
        self.call(self._compact)

    def stall(self, on: bool) -> None:
        self.call(self.stalled.set if on else self.stalled.clear)

    def drop_watches(self) -> None:
        """Cut every open watch stream mid-flight (a load balancer resetting connections)."""
        self.call(self._drop)

    def watches(self, plural: str) -> int:
        return int(self.call(lambda: len(self.watchers[plural])))

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "stand-in",
                    "clusters": [
                        {
                            "name": "stand-in",
                            "cluster": {
                                "server": f"https://127.0.0.1:{self.port}",
                                "certificate-authority": str(self.cert_dir / "ca.crt"),
                            },
                        }
                    ],
                    "users": [{"name": "stand-in", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}],
                }
            )
        )
        return path

    # ------------------------------------------------------------ the loop side

    async def _start(self) -> None:
        import ssl

        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/version", self._version)
        app.router.add_get("/version/", self._version)  # the client's VersionApi asks this one
        app.router.add_get("/api", self._core_versions)
        app.router.add_get("/apis", self._groups)
        app.router.add_get("/api/{version}", self._resources)
        app.router.add_get("/apis/{group}/{version}", self._resources)
        app.router.add_get("/api/{version}/{plural}", self._collection)
        app.router.add_post("/api/{version}/namespaces/{namespace}/{plural}", self._create)
        app.router.add_get("/api/{version}/namespaces/{namespace}/pods/{name}/log", self._log)
        app.router.add_get("/api/{version}/namespaces/{namespace}/{plural}/{name}", self._get)
        app.router.add_delete("/api/{version}/namespaces/{namespace}/{plural}/{name}", self._delete_one)
        app.router.add_get("/api/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}", self._get)
        app.router.add_post("/apis/{group}/{version}/namespaces/{namespace}/{plural}", self._create)
        app.router.add_put("/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}", self._replace)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert_dir / "tls.crt"), str(self.cert_dir / "tls.key"))
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, ssl_context=ctx, reuse_address=True)
        await site.start()
        if not self.port:
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        self._drop()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    def _drop(self) -> None:
        for response in list(self.streams):
            transport = response._req.transport if response._req is not None else None
            if transport is not None:
                transport.abort()
        self.streams.clear()
        for queues in self.watchers.values():
            for q in queues:
                q.put_nowait(None)

    def _put_all(self, objs: Iterable[dict[str, Any]]) -> int:
        for obj in objs:
            self._put(obj)
        return self.rv

    def _put(self, obj: dict[str, Any]) -> None:
        plural = next(p for p, (_, kind, _) in KINDS.items() if kind == obj["kind"])
        obj = json.loads(json.dumps(obj))
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{next(self._ids)}")
        kind = "MODIFIED" if key in self.objects[plural] else "ADDED"
        self.objects[plural][key] = obj
        self._event(plural, kind, obj)

    def _delete(self, plural: str, name: str, namespace: str) -> None:
        obj = self.objects[plural].pop((namespace, name))
        self.rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self._event(plural, "DELETED", obj)

    def _event(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        self.history[plural].append((self.rv, kind, obj))
        for q in self.watchers[plural]:
            q.put_nowait((kind, obj))

    def _compact(self) -> None:
        self.oldest = self.rv
        for h in self.history.values():
            h.clear()
        self.tokens.clear()

    # ------------------------------------------------------------ handlers

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path, dict(request.query)))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response(status(401, "Unauthorized", "Unauthorized"), status=401)
        return await handler(request)  # type: ignore[no-any-return]

    async def _version(self, _request: web.Request) -> web.Response:
        major, minor = self.git_version.lstrip("v").split(".")[:2]
        return web.json_response(
            {"major": major, "minor": minor + "+", "gitVersion": self.git_version, "platform": "linux/amd64"}
        )

    def _resolve(self, request: web.Request) -> str | None:
        plural = request.match_info["plural"]
        group = request.match_info.get("group", "")
        if plural not in KINDS or KINDS[plural][0] != group:
            return None
        if request.match_info["version"] not in self.served.get(group, ()):
            return None
        return plural

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        plural = self._resolve(request)
        if plural is None:
            return web.json_response(
                status(404, "NotFound", "the server could not find the requested resource"), status=404
            )
        namespace = request.match_info.get("namespace")
        if flag(request.query.get("watch")):
            return await self._watch(request, plural, namespace)
        if self.delay:
            await asyncio.sleep(self.delay)
        group, kind, _ = KINDS[plural]
        version = request.match_info["version"]
        token = request.query.get("continue", "")
        if token:
            if token not in self.tokens:
                body = status(410, "Expired", "The provided continue parameter is too old")
                return web.json_response(body, status=410)
            rv, items = self.tokens.pop(token)
        else:
            rv = self.rv
            items = [
                o
                for (ns, _), o in sorted(self.objects[plural].items())
                if (namespace is None or ns == namespace) and _selected(o, request.query)
            ]
        limit = int(request.query.get("limit") or 0)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and len(items) > limit:
            rest = items[limit:]
            items = items[:limit]
            next_token = f"c{next(self._ids)}"
            self.tokens[next_token] = (rv, rest)
            meta["continue"] = next_token
            meta["remainingItemCount"] = len(rest)
        api_version = f"{group}/{version}" if group else version
        return web.json_response({"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta, "items": items})

    async def _watch(self, request: web.Request, plural: str, namespace: str | None) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        bookmarks = flag(request.query.get("allowWatchBookmarks"))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        self.streams.add(response)

        async def send(kind: str, obj: dict[str, Any]) -> None:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        if since and since < self.oldest:
            await send("ERROR", status(410, "Expired", f"too old resource version: {since} ({self.oldest})"))
            self.streams.discard(response)
            return response
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for rv, kind, obj in self.history[plural]:
            if rv > since:
                queue.put_nowait((kind, obj))
        self.watchers[plural].add(queue)
        group, kind_name, _ = KINDS[plural]
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=self.bookmark_seconds)
                except TimeoutError:
                    item = "bookmark"
                while self.stalled.is_set():  # a hung server: the connection is open, nothing arrives
                    await asyncio.sleep(0.05)
                if item is None:
                    break  # dropped
                if item == "bookmark":
                    if bookmarks:
                        version = request.match_info["version"]
                        await send(
                            "BOOKMARK",
                            {
                                "kind": kind_name,
                                "apiVersion": f"{group}/{version}" if group else version,
                                "metadata": {"resourceVersion": str(self.rv)},
                            },
                        )
                    continue
                kind, obj = item
                if namespace is not None and obj["metadata"].get("namespace") != namespace:
                    continue
                await send(kind, obj)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watchers[plural].discard(queue)
            self.streams.discard(response)
        return response

    async def _core_versions(self, _request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})

    async def _groups(self, _request: web.Request) -> web.Response:
        """The APIGroupList: every group this instance serves, newest version preferred."""
        groups = []
        for group, versions in sorted(self.served.items()):
            if not group:
                continue
            listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": listed, "preferredVersion": listed[0]})
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    async def _resources(self, request: web.Request) -> web.Response:
        """The APIResourceList of one group version (with a status subresource, as real lists have)."""
        group, version = request.match_info.get("group", ""), request.match_info["version"]
        if version not in self.served.get(group, ()):
            return not_found()
        resources = []
        for plural, (g, kind, namespaced) in KINDS.items():
            if g == group:
                verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
                resources.append({"name": plural, "kind": kind, "namespaced": namespaced, "verbs": verbs})
                resources.append({"name": f"{plural}/status", "kind": kind, "namespaced": namespaced, "verbs": ["get"]})
        gv = f"{group}/{version}" if group else version
        return web.json_response({"kind": "APIResourceList", "groupVersion": gv, "resources": resources})

    async def _get(self, request: web.Request) -> web.Response:
        plural = self._resolve(request)
        obj = (
            None
            if plural is None
            else self.objects[plural].get((request.match_info["namespace"], request.match_info["name"]))
        )
        if obj is None:
            return not_found()
        return web.json_response(obj)

    async def _create(self, request: web.Request) -> web.Response:
        plural = self._resolve(request)
        if plural is None:
            return not_found()
        obj = await request.json()
        key = (request.match_info["namespace"], obj["metadata"]["name"])
        if key in self.objects[plural]:
            return web.json_response(status(409, "AlreadyExists", "already exists"), status=409)
        obj["metadata"]["namespace"] = key[0]
        if plural == "pods" and self.admit is not None:
            code, obj = await asyncio.get_running_loop().run_in_executor(None, self.admit, obj)
            if code != 201:
                return web.json_response(obj, status=code)
        if request.query.get("dryRun") == "All":
            return web.json_response(obj, status=201)  # admitted, not stored
        self._put(obj)
        if plural == "pods" and self.on_create is not None:
            self.on_create(self, self.objects[plural][key])
        return web.json_response(self.objects[plural][key], status=201)

    async def _log(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.objects["pods"]:
            return not_found()
        return web.Response(text=self.logs.get(key, ""), content_type="text/plain")

    async def _delete_one(self, request: web.Request) -> web.Response:
        plural = self._resolve(request)
        key = (request.match_info["namespace"], request.match_info["name"])
        if plural is None or key not in self.objects[plural]:
            return not_found()
        obj = self.objects[plural][key]
        self._delete(plural, key[1], key[0])
        self.deleted.append((plural, key[0], key[1]))
        if plural == "pods" and self.on_delete is not None:
            self.on_delete(self, obj)
        return web.json_response(obj)

    async def _replace(self, request: web.Request) -> web.Response:
        plural = self._resolve(request)
        if plural is None:
            return not_found()
        obj = await request.json()
        key = (request.match_info["namespace"], request.match_info["name"])
        current = self.objects[plural].get(key)
        if current is None:
            return not_found()
        wanted = obj.get("metadata", {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return web.json_response(status(409, "Conflict", "the object has been modified"), status=409)
        obj["metadata"]["namespace"] = key[0]
        self._put(obj)
        return web.json_response(self.objects[plural][key])
