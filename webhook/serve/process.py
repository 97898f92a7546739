"""One serving process from start to exit: the TLS port, the metrics port, the signals, the
SIGTERM drain and the shutdown. `webhook.serve.workers` runs N of these; the CLI only parses.

Why the drain sleeps before it stops listening: Kubernetes removes a terminating pod from the
Service's endpoints while it tells the pod to stop, and API servers keep sending to it until they
see the change. Answering for `server.drainSeconds` more turns that race into zero failed
admissions; only then are the listener closed and the reviews in flight finished.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any

from .metrics import Metrics
from .reload import Active
from .server import Webhook, serve, serve_metrics, shutdown
from .tls import CertReloader

log = logging.getLogger("gpu-policy")

SHUTDOWN_SECONDS = 15.0  # requests in flight at the stop get this long to finish


@dataclass(frozen=True, slots=True)
class Listen:
    """Where and with what a serving process listens: the command line's part of `serve`."""

    host: str
    port: int
    cert_dir: str
    client_ca: str | None = None
    metrics_host: str | None = None  # None: the TLS port's host
    metrics_port: int = 0  # 0: no metrics port
    config_path: str | None = None  # watched for live reload when given
    cluster_version: str | None = None  # --cluster-version: over the file's, at start and each reload


# A worker's extra duty beside serving (webhook.serve.workers: its counters for the parent's
# metrics port): started with the process's metrics, and given them once more at the exit.
Duty = Callable[[Metrics], Coroutine[Any, Any, None]]
LastWord = Callable[[Metrics], None]


def run(
    active: Active,
    listen: Listen,
    *,
    reuse_port: bool = False,
    duty: Duty | None = None,
    last_word: LastWord | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT on uvloop where it is installed. A worker passes its
    `duty` and `last_word` and serves no metrics port of its own (the parent sums the workers').
    Raises OSError when the port cannot be bound."""
    reloader = CertReloader(listen.cert_dir, active.server.cert_reload_seconds, listen.client_ca)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_serve(active, listen, reloader, reuse_port, duty, last_word))


def _cluster_client() -> Any:
    """Per process: the watch threads do not survive the workers' fork."""
    from ..cluster.client import load_client

    loaded = load_client()
    if loaded is None:
        return None
    client, where = loaded
    log.info("cluster view: watching nodes through the %s config", where)
    return client


async def _serve(
    active: Active,
    listen: Listen,
    reloader: CertReloader,
    reuse_port: bool,
    duty: Duty | None,
    last_word: LastWord | None,
) -> None:
    """SIGHUP reloads the config file at once (it is also watched; see webhook.serve.reload)."""
    detect = None
    if active.follows_version:
        from ..cluster.version import detect_version

        detect = partial(detect_version, quiet=True)
    client = _cluster_client() if active.server.cluster_view else None
    webhook = Webhook(active, reloader, listen.config_path, detect, client, version=listen.cluster_version)
    http = await serve(webhook, listen.host, listen.port, reloader.context, reuse_port=reuse_port)
    duties: list[asyncio.Task[None]] = []
    metrics_http = None
    if duty is not None:
        duties.append(asyncio.create_task(duty(webhook.metrics)))
    elif listen.metrics_port:
        host = listen.metrics_host or listen.host
        try:
            metrics_http = await serve_metrics(webhook, host, listen.metrics_port)
        except OSError as exc:  # admission matters more than metrics: say so and go on
            log.error("cannot serve metrics on %s:%d: %s", host, listen.metrics_port, exc)
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not received.done():
            received.set_result(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    if webhook.config_reloader is not None:
        loop.add_signal_handler(signal.SIGHUP, webhook.config_reloader.wake.set)
    try:
        signum = await received
        drain = webhook.cell.active.server.drain_seconds  # read now: a reload may have changed it
        if signum == signal.SIGTERM and drain > 0:
            webhook.ready = False
            log.info("SIGTERM: not ready, draining for %.1f s", drain)
            await asyncio.sleep(drain)
    finally:
        await shutdown(webhook, http, SHUTDOWN_SECONDS)  # closes the listener, then finishes reviews in flight
        if metrics_http is not None:
            await metrics_http.stop(1.0)
        for task in duties:
            task.cancel()
        if last_word is not None:
            last_word(webhook.metrics)
