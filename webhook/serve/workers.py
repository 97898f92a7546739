"""`--workers N`: N serving processes (webhook.serve.process) pre-forked on one port with
SO_REUSEPORT, so the kernel spreads connections; the parent forwards signals, serves the metrics
port and stops every worker when one dies (the kubelet then restarts a whole, healthy pod).

Metrics cross processes as snapshot files: each worker writes its counters (plain integers, see
webhook.serve.metrics) to `<folder>/<pid>.json` every second and once more at its exit, and the
parent's metrics port sums the latest ones per scrape. prometheus-client's multiprocess mode was
not taken: it backs every counter and histogram bucket with an mmap'd file that each update
writes under a lock, on the request path; a snapshot costs one small write a second, off it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading

from ..config import ServerSettings
from . import logs
from .metrics import Metrics
from .process import Listen, run
from .reload import Active
from .server import GET, Exposition, healthz
from .transport import Route, Transport

log = logging.getLogger("gpu-policy")

SNAPSHOT_SECONDS = 1.0  # how stale the parent's metrics may be


def prefork(active: Active, listen: Listen, workers: int) -> int:
    """Run `workers` processes until they exit; the exit status (1 when a worker failed)."""
    folder = tempfile.mkdtemp(prefix="gpu-policy-metrics-")  # /tmp: the chart's emptyDir
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                snapshots = Snapshots(folder)
                run(active, listen, reuse_port=True, duty=snapshots.every_second, last_word=snapshots.write)
            except BaseException:
                log.exception("worker failed")
                code = 1
            finally:
                logs.writer().close()  # os._exit runs no atexit: the worker's last lines first
                os._exit(code)
        children.append(pid)
    if listen.metrics_port:
        host = listen.metrics_host or listen.host
        try:
            serve_summed(active.server, host, listen.metrics_port, folder, children)
        except OSError as exc:
            log.error("cannot serve metrics on %s:%d: %s", host, listen.metrics_port, exc)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)  # every worker reloads its config
    status = 0
    remaining = set(children)
    while remaining:
        pid, code = os.wait()
        remaining.discard(pid)
        if code != 0 and remaining:
            log.error("worker %d exited with status %d; stopping the others", pid, code)
            forward(signal.SIGTERM, None)
            status = 1
    shutil.rmtree(folder, ignore_errors=True)
    return status


class Snapshots:
    """A worker's counters in the shared folder, for the parent's metrics port."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, f"{os.getpid()}.json")

    def write(self, metrics: Metrics) -> None:
        with open(self.path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(metrics.snapshot(), f)
        os.replace(self.path + ".tmp", self.path)  # the parent never reads half a file

    async def every_second(self, metrics: Metrics) -> None:
        while True:
            try:
                self.write(metrics)
            except OSError as exc:
                log.warning("cannot write metrics snapshot to %s: %s", self.path, exc)
            await asyncio.sleep(SNAPSHOT_SECONDS)


def serve_summed(server: ServerSettings, host: str, port: int, folder: str, children: list[int]) -> None:
    """The parent's metrics port: the workers' latest snapshots, summed, so one scrape sees the
    whole pod. Same transport and limits as the workers' ports, on an event loop of its own in a
    thread (the parent's main thread only waits for its workers)."""

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

    def serve_forever() -> None:
        loop = asyncio.new_event_loop()
        transport = Transport(routes, server)
        try:
            loop.run_until_complete(transport.start(host, port, None))
        except OSError as exc:
            failed.append(exc)
            return
        finally:
            bound.set()
        loop.run_forever()

    threading.Thread(target=serve_forever, name="metrics", daemon=True).start()
    bound.wait()
    if failed:
        raise failed[0]
