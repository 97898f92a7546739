"""The admission server: its routes (the review routes' handler is webhook.serve.answer), the watchers
beside them, and the ports (webhook.serve.transport, aiohttp, carries the bytes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .. import admission
from ..policy import watches_namespaces
from .answer import TEXT, Answer, Cell, ReviewHandler
from .metrics import Metrics
from .reload import Active, ConfigReloader, VersionWatcher
from .transport import Route, Transport

if TYPE_CHECKING:
    from ..cluster.reflector import Timing
    from ..cluster.view import ClusterWatcher
    from .tls import CertReloader

log = logging.getLogger("gpu-policy.server")

EXPOSITION: Final = "text/plain; version=0.0.4; charset=utf-8"
GET: Final = frozenset({"GET", "HEAD"})


class Exposition:
    """The /metrics answer, rendered at most once a `seconds`: a flood of scrapes costs a clock
    read each, not a render (Prometheus scrapes every 15 to 60 s)."""

    def __init__(self, render: Callable[[], bytes], seconds: float = 1.0) -> None:
        self.render = render
        self.seconds = seconds
        self.until = 0.0
        self.body = b""

    def __call__(self, _content_type: str = "", _body: bytes = b"") -> Answer:
        now = time.monotonic()
        if now >= self.until:
            self.body = self.render()
            self.until = now + self.seconds
        return 200, EXPOSITION, self.body, False


class Webhook:
    """The admission server's state and answers, transport-free: `routes` is what the TLS port
    serves, `metrics_routes` the plain metrics port; `start`/`stop` run the watchers (certificates, config file, cluster
    version, cluster view) beside it."""

    def __init__(
        self,
        active: Active,
        reloader: CertReloader | None = None,
        config_path: str | None = None,
        detect_version: Callable[[], tuple[int, int] | None] | None = None,
        cluster_client: Any = None,
        cluster_timing: Timing | None = None,
        version: str | None = None,
    ) -> None:
        """`active` is what it starts by (reload.activate); `reloader` owns the TLS context; the
        config file at `config_path` (whose bytes `active` was made from; `version`, the command
        line's --cluster-version, holds over every reload) and, with `detect_version`
        (clusterVersion auto), the cluster's version are watched while it runs; with
        `cluster_client` (a kubernetes ApiClient) the cluster view too (webhook.cluster.view),
        which the pre-flight rules read. It keeps no settings beside the cell: what a reload
        swaps is all there is."""
        counters = self.metrics = Metrics()
        self.ready = False
        self.reloader = reloader
        if reloader is not None:
            reloader.on_reload = counters.count_reload
            counters.cert_not_after = lambda: reloader.not_after
        # The policy is resolved once per (re)load, never per request.
        cell = self.cell = Cell(active)
        counters.config_generation = active.generation
        self.config_reloader: ConfigReloader | None = None
        self.version_watcher: VersionWatcher | None = None
        if config_path is not None:
            self.config_reloader = ConfigReloader(
                config_path, lambda: cell.active, self.put, counters.count_config, version
            )
        if detect_version is not None and active.server.cluster_version_seconds > 0:
            self.version_watcher = VersionWatcher(
                active.server.cluster_version_seconds, detect_version, lambda: cell.active, self.put
            )
        self.cluster_client, self.cluster_timing = cluster_client, cluster_timing
        self.cluster_state = "off"
        counters.view_synced = -1 if cluster_client is None else 0
        self._tasks: list[asyncio.Task[None]] = []
        self._cluster_watcher: ClusterWatcher | None = None
        post = frozenset({"POST"})
        probes = {"/healthz": Route(GET, healthz), "/readyz": Route(GET, self.readyz)}
        self.routes: dict[str, Route] = {
            "/validate": Route(post, ReviewHandler("validate", admission.validate, cell, counters, self), body=True),
            "/mutate": Route(post, ReviewHandler("mutate", admission.mutate, cell, counters, self), body=True),
            **probes,
        }
        # /metrics only here: the admission port answers reviews and probes, nothing a scrape
        # flood could slow down.
        self.metrics_routes: dict[str, Route] = {"/metrics": Route(GET, Exposition(counters.render)), **probes}

    def put(self, active: Active) -> None:
        self.cell.active = active
        self.metrics.config_generation = active.generation

    def readyz(self, _content_type: str = "", _body: bytes = b"") -> Answer:
        """Ready or not, with the cluster view's state on a second line. The view never decides
        readiness: an unready webhook fails every pod (failurePolicy), while a missing view only
        silences the pre-flight rules."""
        view = f"cluster view: {self.cluster_state}"
        if self.ready:
            return 200, TEXT, f"ok\n{view}\n".encode(), False
        return 503, TEXT, f"not ready\n{view}\n".encode(), False

    def count_body_wait(self, delta: int) -> None:
        self.metrics.in_flight += delta

    async def start(self) -> None:
        """The watchers beside the server; then ready."""
        if self.reloader is not None:
            self._tasks.append(asyncio.create_task(self.reloader.run()))
        if self.config_reloader is not None:
            self._tasks.append(asyncio.create_task(self.config_reloader.run()))
        if self.version_watcher is not None:
            self._tasks.append(asyncio.create_task(self.version_watcher.run()))
        self._cluster_watcher = self._watch_cluster()
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        if self._cluster_watcher is not None:
            self._cluster_watcher.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def _watch_cluster(self) -> ClusterWatcher | None:
        """Starts the watch threads; each view they publish is swapped into the cell on the loop."""
        if self.cluster_client is None:
            return None
        from ..cluster.reflector import Timing
        from ..cluster.view import ClusterWatcher

        cell, counters, put = self.cell, self.metrics, self.put
        loop = asyncio.get_running_loop()
        self.cluster_state = "not synced"
        # Namespaces only while a rule that reads them is on (the chart grants their RBAC only then);
        # turned on by a later reload, gpu-namespace-allowed fails closed until a restart (the chart
        # rolls the pods when those rules' modes change).
        namespaces = watches_namespaces(cell.active.policy)

        def apply(view: Any) -> None:
            active = cell.active
            if view is None and active.policy.cluster is None:
                return
            put(active.with_policy(cluster=view))
            counters.view_synced = 0 if view is None else 1
            counters.view_nodes = 0 if view is None else view.nodes
            if view is None:
                self.cluster_state = "not synced"
                log.warning("cluster view lost (watch broken): pre-flight rules are silent until it is back")
                return
            pending = "; DRA device classes pending" if view.dra_extended is None else ""
            if namespaces:
                pending += "; namespaces pending" if view.namespaces is None else f"; {len(view.namespaces)} namespaces"
            self.cluster_state = f"synced ({view.nodes} nodes in {len(view.groups)} groups{pending})"
            if active.policy.cluster is None:  # only the change is worth a line, not every new view
                log.info("cluster view %s: pre-flight rules judge", self.cluster_state)

        def publish(view: Any) -> None:  # from the publisher thread
            loop.call_soon_threadsafe(apply, view)

        watcher = ClusterWatcher(
            self.cluster_client, publish, self.cluster_timing or Timing(), counters, namespaces=namespaces
        )
        version_watcher = self.version_watcher
        if version_watcher is not None:  # a reconnect may follow a control-plane upgrade

            def reconnected() -> None:  # from a watch thread
                loop.call_soon_threadsafe(version_watcher.wake.set)

            watcher.reconnected = reconnected
        watcher.start()
        return watcher


def healthz(_content_type: str = "", _body: bytes = b"") -> Answer:
    return 200, TEXT, b"ok", False


async def serve(webhook: Webhook, host: str, port: int, context: Any, *, reuse_port: bool = False) -> Transport:
    """The TLS port answering `webhook`'s routes, after its watchers started. Its limits and
    deadlines are the server settings in force now: a reload changes them only with a restart."""
    started = webhook.cell.active.server
    await webhook.start()
    http = Transport(webhook.routes, started, webhook.count_body_wait)
    try:
        await http.start(host, port, context, reuse_port=reuse_port)
    except BaseException:
        await webhook.stop()
        raise
    log.info("serving https://%s:%d", host, http.port)  # only once the port is bound
    return http


async def shutdown(webhook: Webhook, http: Transport, timeout: float = 15.0) -> None:
    """Stop listening, finish the requests in flight (up to `timeout`), stop the watchers."""
    await http.stop(timeout)
    await webhook.stop()


async def serve_metrics(webhook: Webhook, host: str, port: int) -> Transport:
    """The plain-HTTP metrics port (Prometheus scrapes it without TLS or our CA): /metrics and
    the probes, on the same transport and limits as the TLS port."""
    http = Transport(webhook.metrics_routes, webhook.cell.active.server)
    await http.start(host, port, None)
    return http
