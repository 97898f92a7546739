"""The thin HTTPS layer: bytes in, `webhook.admission` in the middle, bytes out.

Everything that can go wrong with a request maps to a clear answer: a broken envelope is
an HTTP 4xx with a JSON error; a failure inside the policy is `allowed: false`, code 500,
with the uid echoed; nothing escapes to kill the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from . import admission, logs, review
from .config import Settings
from .metrics import Metrics
from .policy import Policy
from .reload import Active, ConfigReloader, VersionWatcher, activate
from .review import ReviewError
from .screen import watched_in
from .tls import CertReloader

log = logging.getLogger("gpu-policy.server")
# One line per review that changed something or said something (denied, patched, warned) at info,
# every other review at debug; never the object itself (it may hold secrets in env values).
_NOTEWORTHY = frozenset({admission.Decision.DENIED, admission.Decision.PATCHED, admission.Decision.MALFORMED})


def _log_review(
    level: int,
    webhook: str,
    req: review.Request,
    outcome: admission.Outcome,
    found: list[tuple[str, str]],
    seconds: float,
) -> None:
    logs.review(
        level,
        f"{webhook} {req.operation} {req.kind} {req.namespace}/{req.name}: {outcome.decision.value}",
        {
            "uid": req.uid,
            "webhook": webhook,
            "decision": outcome.decision.value,
            "kind": req.kind,
            "namespace": req.namespace,
            "objectName": req.name,
            "operation": req.operation,
            "user": req.user,
            "dryRun": req.dry_run,
            "rules": sorted({rule for rule, _mode in found}),
            "modes": sorted({mode for _rule, mode in found}),
            "patched": len(outcome.ops),
            "latencyMs": round(seconds * 1000, 3),
        },
    )


SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
RELOADER = web.AppKey("reloader", CertReloader)
READY = web.AppKey("ready", dict)
CONFIG_RELOADER = web.AppKey("config_reloader", ConfigReloader)
VERSION_WATCHER = web.AppKey("version_watcher", VersionWatcher)
CLUSTER = web.AppKey("cluster", dict)  # {"client": ApiClient, "timing": Timing, "state": str}


class Cell:
    """The active policy: one attribute, replaced whole by a reload, read once per request."""

    __slots__ = ("active",)

    def __init__(self, active: Active) -> None:
        self.active = active


CELL = web.AppKey("cell", Cell)

Decide = Callable[[review.Request, Policy, frozenset[str]], admission.Outcome]


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=review.dumps({"error": message}), content_type="application/json")


def _handler(name: str, decide: Decide, app: web.Application) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    validating = name == "validate"
    # Resolved once here, not looked up per request.
    settings, counters, cell, ready = app[SETTINGS], app[METRICS], app[CELL], app[READY]

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _error(415, f"Content-Type must be application/json, got {request.content_type!r}")
        # Most bodies arrive with their headers: nothing to wait for, no timer to arm. Only a body
        # still arriving is counted in flight and given server.bodySeconds.
        waiting = not request.content.is_eof()
        if waiting:
            counters.in_flight += 1
        try:
            if waiting:
                async with asyncio.timeout(settings.body_seconds):
                    body = await request.read()
            else:
                body = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            return _error(413, f"body larger than the {settings.max_request_bytes} byte limit: {exc.text}")
        except TimeoutError:
            # A client trickling its body must not hold a handler: 408, and the connection closes.
            response = _error(408, f"request body not complete within {settings.body_seconds:g} s")
            response.force_close()
            return response
        finally:
            if waiting:
                counters.in_flight -= 1
        started = time.perf_counter()
        if not body:
            return _error(400, "empty body: expected an AdmissionReview")
        try:
            data = review.loads(body)
        except ValueError as exc:
            return _error(400, f"body is not valid JSON: {exc}")
        try:
            req = review.parse(data)
        except ReviewError as exc:
            return _error(exc.status, str(exc))
        active = cell.active  # read once: a reload swaps it between requests, never within one
        screen = active.screen
        may_matter = screen.may_validate(body) if validating else screen.may_mutate(body)
        try:
            # A substring screen of the raw body: most non-GPU pods cannot concern any enabled
            # rule, and are answered without being walked (see webhook.screen).
            outcome = decide(req, active.policy, watched_in(body)) if may_matter else admission.SCREENED
            payload = review.dumps(review.respond(req, outcome))
        except Exception as exc:  # a bug must cost one request, never the server or an accidental allow
            log.exception("internal error on %s uid=%s", name, req.uid)
            payload = review.dumps(review.errored(req.api_version, req.uid, f"gpu-policy internal error: {exc}"))
            counters.observe(name, "error", time.perf_counter() - started, [])
        else:
            seconds = time.perf_counter() - started
            found = outcome.counted()
            counters.observe(name, outcome.decision, seconds, found)
            # The fields are built only for a line that is written (the level is checked first).
            level = logging.INFO if outcome.decision in _NOTEWORTHY or outcome.warnings else logging.DEBUG
            if logs.REVIEW.isEnabledFor(level):
                _log_review(level, name, req, outcome, found, seconds)
        response = web.Response(body=payload, content_type="application/json")
        if not ready["ready"]:
            # Draining: answer, but close the connection, so the API server's next review opens
            # a new one (to a replica that is staying) instead of reusing ours as we stop.
            response.force_close()
        return response

    return handle


def set_ready(app: web.Application, ready: bool) -> None:
    app[READY]["ready"] = ready


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """Ready or not, with the cluster view's state on a second line. The view never decides
    readiness: an unready webhook fails every pod (failurePolicy), while a missing view only
    silences the pre-flight rules."""
    view = f"cluster view: {request.app[CLUSTER]['state']}"
    if request.app[READY].get("ready"):
        return web.Response(text=f"ok\n{view}\n")
    return web.Response(status=503, text=f"not ready\n{view}\n")


EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"


async def metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    return web.Response(body=m.render(), headers={"Content-Type": EXPOSITION})


def metrics_app(render: Callable[[], bytes]) -> web.Application:
    """The plain-HTTP metrics port: Prometheus scrapes it without TLS or our CA."""

    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=render(), headers={"Content-Type": EXPOSITION})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app


def create_app(
    settings: Settings,
    reloader: CertReloader | None = None,
    config_path: str | None = None,
    digest: str = "",
    detect_version: Callable[[], tuple[int, int] | None] | None = None,
    cluster_client: Any = None,
    cluster_timing: Any = None,
) -> web.Application:
    """The application; `reloader` (owning the TLS context), the config file at `config_path`
    (whose bytes hash to `digest`) and, with `detect_version` (clusterVersion auto), the cluster's
    version are watched while the app runs; with `cluster_client` (a kubernetes ApiClient) the
    cluster view too (webhook.clusterview), which the pre-flight rules read."""
    app = web.Application(client_max_size=settings.max_request_bytes)
    app[SETTINGS] = settings
    counters = app[METRICS] = Metrics()
    app[READY] = {"ready": False}
    if reloader is not None:
        app[RELOADER] = reloader
        reloader.on_reload = counters.count_reload
        counters.cert_not_after = lambda: reloader.not_after
    # The policy and its screen are resolved once per (re)load, never per request.
    cell = app[CELL] = Cell(activate(settings, 1, digest))
    counters.config_generation = 1

    def put(active: Active) -> None:
        cell.active = active
        counters.config_generation = active.generation

    if config_path is not None:
        app[CONFIG_RELOADER] = ConfigReloader(config_path, settings, lambda: cell.active, put, counters.count_config)
    if detect_version is not None and settings.cluster_version_seconds > 0:
        app[VERSION_WATCHER] = VersionWatcher(
            settings.cluster_version_seconds, detect_version, lambda: cell.active, put
        )
    app[CLUSTER] = {"client": cluster_client, "timing": cluster_timing, "state": "off", "put": put}
    counters.view_synced = -1 if cluster_client is None else 0
    app.router.add_post("/validate", _handler("validate", admission.validate, app))
    app.router.add_post("/mutate", _handler("mutate", admission.mutate, app))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.cleanup_ctx.append(_lifecycle)
    return app


def _start_cluster_view(app: web.Application) -> Any:
    """Starts the watch threads; each view they publish is swapped into the cell on the loop."""
    state = app[CLUSTER]
    if state["client"] is None:
        return None
    from dataclasses import replace

    from .clusterview import ClusterWatcher, Timing

    cell, counters, put = app[CELL], app[METRICS], state["put"]
    loop = asyncio.get_running_loop()
    state["state"] = "not synced"

    def apply(view: Any) -> None:
        active = cell.active
        if view is None and active.policy.cluster is None:
            return
        put(Active(replace(active.policy, cluster=view), active.screen, active.generation, active.digest))
        counters.view_synced = 0 if view is None else 1
        counters.view_nodes = 0 if view is None else view.nodes
        if view is None:
            state["state"] = "not synced"
            log.warning("cluster view lost (watch broken): pre-flight rules are silent until it is back")
            return
        pending = "; DRA device classes pending" if view.dra_extended is None else ""
        state["state"] = f"synced ({view.nodes} nodes in {len(view.groups)} groups{pending})"
        if active.policy.cluster is None:  # only the change is worth a line, not every new view
            log.info("cluster view %s: pre-flight rules judge", state["state"])

    def publish(view: Any) -> None:  # from the publisher thread
        loop.call_soon_threadsafe(apply, view)

    watcher = ClusterWatcher(
        state["client"],
        publish,
        state["timing"] or Timing(),
        counters,
    )
    version_watcher = app.get(VERSION_WATCHER)
    if version_watcher is not None:  # a reconnect may follow a control-plane upgrade

        def reconnected() -> None:  # from a watch thread
            loop.call_soon_threadsafe(version_watcher.wake.set)

        watcher.reconnected = reconnected
    watcher.start()
    return watcher


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    tasks = []
    reloader = app.get(RELOADER)
    if reloader is not None:
        tasks.append(asyncio.create_task(reloader.run()))
    config_reloader = app.get(CONFIG_RELOADER)
    if config_reloader is not None:
        tasks.append(asyncio.create_task(config_reloader.run()))
    watcher = app.get(VERSION_WATCHER)
    if watcher is not None:
        tasks.append(asyncio.create_task(watcher.run()))
    cluster_watcher = _start_cluster_view(app)
    app[READY]["ready"] = True
    yield
    app[READY]["ready"] = False
    if cluster_watcher is not None:
        cluster_watcher.close()
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
