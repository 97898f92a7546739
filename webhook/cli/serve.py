"""`gpu-policy serve`: the TLS port and the metrics port (webhook.serve.transport), the SIGTERM drain
and the pre-forked workers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from ..config import Settings
from ..offline.reports import EXIT_INPUT, EXIT_OK
from ..serve import logs
from ..serve.metrics import Metrics
from .settings import from_args

if TYPE_CHECKING:
    from ..serve.tls import CertReloader

log = logging.getLogger("gpu-policy")


def _serve_one(
    settings: Settings,
    args: argparse.Namespace,
    reuse_port: bool,
    digest: str,
    snapshots: str | None = None,
    follow_version: bool = False,
) -> None:
    from ..serve.tls import CertReloader

    reloader = CertReloader(args.cert_dir, settings.cert_reload_seconds, args.client_ca)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_serve(settings, reloader, args, reuse_port, digest, snapshots, follow_version))


async def _serve(
    settings: Settings,
    reloader: CertReloader,
    args: argparse.Namespace,
    reuse_port: bool,
    digest: str,
    snapshots: str | None,
    follow_version: bool,
) -> None:
    """Serve until SIGTERM or SIGINT; on SIGTERM drain first (see Settings.drain_seconds).
    SIGHUP reloads the config file at once (it is also watched; see webhook.serve.reload)."""
    from ..serve.server import Webhook, serve, serve_metrics, shutdown

    host, port = args.host, args.port
    detect = None
    if follow_version:
        from functools import partial

        from ..cluster.version import detect_version

        detect = partial(detect_version, quiet=True)
    cluster_client = None
    if settings.cluster_view:  # per process: watch threads do not survive the workers' fork
        from ..cluster.client import load_client

        loaded = load_client()
        if loaded is not None:
            cluster_client, where = loaded
            log.info("cluster view: watching nodes through the %s config", where)
    webhook = Webhook(settings, reloader, args.config, digest, detect, cluster_client)
    http = await serve(webhook, host, port, reloader.context, reuse_port=reuse_port)
    extra: list[asyncio.Task[None]] = []
    metrics_http = None
    if snapshots is not None:  # a worker: the parent serves the metrics port from our snapshots
        extra.append(asyncio.create_task(_write_snapshots(webhook.metrics, snapshots)))
    elif args.metrics_port:
        metrics_host = args.metrics_host or host
        try:
            metrics_http = await serve_metrics(webhook, metrics_host, args.metrics_port)
        except OSError as exc:  # admission matters more than metrics: say so and go on
            log.error("cannot serve metrics on %s:%d: %s", metrics_host, args.metrics_port, exc)
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
        if await received == signal.SIGTERM and settings.drain_seconds > 0:
            # Kubernetes removes a terminating pod from the Service while it is told to stop;
            # answering a little longer turns that race into zero failed admissions.
            webhook.ready = False
            log.info("SIGTERM: not ready, draining for %.1f s", settings.drain_seconds)
            await asyncio.sleep(settings.drain_seconds)
    finally:
        await shutdown(webhook, http, SHUTDOWN_SECONDS)  # closes the listener, then finishes reviews in flight
        if metrics_http is not None:
            await metrics_http.stop(1.0)
        for task in extra:
            task.cancel()
        if snapshots is not None:
            _write_snapshot(webhook.metrics, snapshots)  # the last word: counters up to the exit


SNAPSHOT_SECONDS = 1.0
SHUTDOWN_SECONDS = 15.0  # requests in flight at the stop get this long to finish


def _write_snapshot(metrics: Metrics, folder: str) -> None:
    path = os.path.join(folder, f"{os.getpid()}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(metrics.snapshot(), f)
    os.replace(path + ".tmp", path)  # the parent never reads half a file


async def _write_snapshots(metrics: Metrics, folder: str) -> None:
    """A worker's counters, every second, for the parent's metrics port (at most 1 s stale)."""
    while True:
        try:
            _write_snapshot(metrics, folder)
        except OSError as exc:
            log.warning("cannot write metrics snapshot to %s: %s", folder, exc)
        await asyncio.sleep(SNAPSHOT_SECONDS)


def _serve_snapshots(settings: Settings, host: str, port: int, folder: str, children: list[int]) -> None:
    """The parent's metrics port (the parent otherwise only waits for its workers): the workers'
    latest snapshots, summed, so one scrape sees the whole pod. Same transport and limits as the
    workers' ports, on an event loop of its own in a thread."""
    import threading

    from ..serve.server import GET, Exposition, healthz
    from ..serve.transport import Route, Transport

    def render() -> bytes:
        snaps = []
        for pid in children:
            try:
                with open(os.path.join(folder, f"{pid}.json"), encoding="utf-8") as f:
                    snaps.append(json.load(f))
            except (OSError, ValueError):
                continue  # not written yet
        return Metrics.merged(snaps).render()

    routes = {"/metrics": Route(GET, Exposition(render)), "/healthz": Route(GET, healthz)}
    bound = threading.Event()
    failed: list[OSError] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        transport = Transport(routes, settings)
        try:
            loop.run_until_complete(transport.start(host, port, None))
        except OSError as exc:
            failed.append(exc)
            return
        finally:
            bound.set()
        loop.run_forever()

    threading.Thread(target=run, name="metrics", daemon=True).start()
    bound.wait()
    if failed:
        raise failed[0]


def command(args: argparse.Namespace) -> int:
    settings = from_args(args)
    follow_version = settings.cluster_version_auto
    digest = ""
    if args.config:
        from ..serve.reload import digest_of

        with open(args.config, "rb") as f:  # the file from_args just validated
            digest = digest_of(f.read())
    if settings.cluster_version_auto:
        from ..cluster.version import detect_version

        settings = settings.with_cluster_version(detect_version())
    try:
        from ..serve.tls import new_context

        new_context(os.path.join(args.cert_dir, "tls.crt"), os.path.join(args.cert_dir, "tls.key"))
    except (OSError, ValueError) as exc:
        print(f"gpu-policy: cannot load {args.cert_dir}/tls.crt and tls.key: {exc}", file=sys.stderr)
        return EXIT_INPUT
    log.info(
        "effective config (sha256 %s)",
        digest[:12] or "built-in defaults",
        extra={"config": settings.effective, "configSha256": digest, "configFile": args.config or ""},
    )
    version = settings.policy.cluster_version
    from .. import core_build

    log.info(
        "starting https://%s:%d with %d worker(s); cluster version %s; policy core %s",
        args.host,
        args.port,
        args.workers,
        f"{version[0]}.{version[1]}" if version else "unknown",
        core_build(),
    )
    if args.workers < 1:
        print("gpu-policy: --workers must be at least 1", file=sys.stderr)
        return EXIT_INPUT
    if args.workers == 1:
        try:
            _serve_one(settings, args, reuse_port=False, digest=digest, follow_version=follow_version)
        except OSError as exc:  # the port is taken, or the host cannot be bound
            print(f"gpu-policy: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INPUT
        return EXIT_OK
    return _prefork(settings, args, digest, follow_version)


def _prefork(settings: Settings, args: argparse.Namespace, digest: str, follow_version: bool) -> int:
    """N processes sharing the port through SO_REUSEPORT; the kernel spreads connections."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="gpu-policy-metrics-")  # /tmp: the chart's emptyDir
    children: list[int] = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _serve_one(
                    settings, args, reuse_port=True, digest=digest, snapshots=folder, follow_version=follow_version
                )
            except BaseException:
                log.exception("worker failed")
                code = 1
            finally:
                logs.writer().close()  # os._exit runs no atexit: the worker's last lines first
                os._exit(code)
        children.append(pid)
    if args.metrics_port:
        metrics_host = args.metrics_host or args.host
        try:
            _serve_snapshots(settings, metrics_host, args.metrics_port, folder, children)
        except OSError as exc:
            log.error("cannot serve metrics on %s:%d: %s", metrics_host, args.metrics_port, exc)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)  # every worker reloads its config
    status = EXIT_OK
    remaining = set(children)
    while remaining:
        pid, code = os.wait()
        remaining.discard(pid)
        if code != 0 and remaining:
            # One worker died: stop all, so the kubelet restarts a whole, healthy pod.
            log.error("worker %d exited with status %d; stopping the others", pid, code)
            forward(signal.SIGTERM, None)
            status = 1
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    return status
