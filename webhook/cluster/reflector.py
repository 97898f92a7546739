"""List and watch of one resource against the API server, as client-go's reflector does it:
a paginated list, then a watch from its resourceVersion (bookmarks asked for), re-listing on
`410 Gone` and reconnecting with backoff; each object reduced to the few fields the policy reads,
equal values shared. webhook.cluster.view runs one per resource in threads.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..admission.review import loads
from .client import read_json, short_error

log = logging.getLogger("gpu-policy.clusterview")


class Gone(Exception):
    """410: the resourceVersion (or continue token) is too old; list again."""


@dataclass(frozen=True, slots=True)
class Timing:
    """How patient the watch is. Production values by default; tests shorten them."""

    page: int = 500  # items per list page
    watch_seconds: tuple[int, int] = (300, 600)  # server-side watch timeout, random in range (client-go's)
    read_seconds: float = 90.0  # no byte for this long (bookmarks arrive every minute): reconnect
    connect_seconds: float = 5.0
    backoff: tuple[float, float] = (0.5, 30.0)  # first and largest wait after a failure
    min_interval: float = 0.05  # between two published views


class Reflector:
    """List + watch of one resource into `store` (key -> reduced value), in its own thread."""

    def __init__(
        self,
        name: str,
        call: Callable[..., Any],
        reduce: Callable[[Any], tuple[Any, Any] | None],
        changed: Callable[[], None],
        stop: threading.Event,
        timing: Timing,
        metrics: Any = None,
    ) -> None:
        self.name = name
        self.call = call  # the client's list function (list_node, list_cluster_custom_object partial)
        self.reduce = reduce
        self.changed = changed
        self.stop = stop
        self.timing = timing
        self.metrics = metrics
        self.lock = threading.Lock()
        self.store: dict[Any, Any] = {}
        self.synced = False  # listed at least once
        self.connected = False  # the last list or watch connection succeeded
        self.resource_version = ""
        self.reconnected: Callable[[], None] = lambda: None  # after a broken watch is re-established
        self._canon: dict[Any, Any] = {}  # equal values share one object (5,000 nodes, a few pools)

    def _count(self, what: str) -> None:
        if self.metrics is not None:
            getattr(self.metrics, what)[self.name] += 1

    def _value(self, value: Any) -> Any:
        return self._canon.setdefault(value, value)

    def list(self) -> str:
        """A full, paginated list that replaces the store; the resourceVersion to watch from."""
        self._count("view_relists")
        items: dict[Any, Any] = {}
        token = ""
        self._canon = {}
        while True:
            kwargs: dict[str, Any] = {"limit": self.timing.page}
            if token:
                kwargs["_continue"] = token
            data = self._get(**kwargs)
            for obj in data.get("items") or ():
                reduced = self.reduce(obj)
                if reduced is not None:
                    items[reduced[0]] = self._value(reduced[1])
            meta = data.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                break
        with self.lock:
            self.store = items
            self.synced = True
            self.connected = True
        self.changed()
        return str(meta.get("resourceVersion") or "")

    def _open(self, **kwargs: Any) -> Any:
        """The client's call with our timeouts, the body not read yet; 410 is Gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.call(
                _preload_content=False,
                _request_timeout=(self.timing.connect_seconds, self.timing.read_seconds),
                **kwargs,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc.reason)) from None
            raise

    def _get(self, **kwargs: Any) -> dict[str, Any]:
        data = read_json(self._open(**kwargs))
        if not isinstance(data, dict):
            raise ValueError(f"{self.name}: the list is not a JSON object")
        return data

    def watch(self, resource_version: str, was_broken: bool) -> str:
        """One watch connection; returns the last resourceVersion seen when it ends normally."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        low, high = self.timing.watch_seconds
        response = self._open(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=random.randint(low, high),
        )
        if not self.connected:
            with self.lock:
                self.connected = True
            self.changed()
        if was_broken:
            self.reconnected()
        try:
            for line in _lines(iter_resp_lines(response), self.stop):
                event = loads(line)
                kind, obj = event.get("type"), event.get("object")
                if kind == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == 410:
                        raise Gone(str(obj.get("message")))
                    raise ApiException(status=code or 500, reason=str(obj))
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                if isinstance(meta, dict) and meta.get("resourceVersion"):
                    resource_version = str(meta["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                reduced = self.reduce(obj)
                if reduced is None:
                    continue
                key, value = reduced
                with self.lock:
                    if kind == "DELETED":
                        before = self.store.pop(key, None)
                        now = None
                    else:
                        before = self.store.get(key)
                        now = self.store[key] = self._value(value)
                if before != now:
                    self.changed()
        finally:
            response.close()
            response.release_conn()
        return resource_version

    def run(self) -> None:
        """The informer loop, until `stop` is set."""
        first, most = self.timing.backoff
        wait = first
        resource_version = ""
        broken = False
        while not self.stop.is_set():
            try:
                if not resource_version:
                    resource_version = self.list()
                    if broken:
                        self.reconnected()
                    broken = False
                started = time.monotonic()
                resource_version = self.watch(resource_version, broken)
                broken = False
                if time.monotonic() - started < 1.0:  # ended at once: never a tight reconnect loop
                    self.stop.wait(wait * random.uniform(0.8, 1.2))
                    wait = min(wait * 2, most)
                else:
                    wait = first
            except Gone as exc:
                log.info("%s: %s; listing again", self.name, exc)
                resource_version = ""
            except Exception as exc:  # unreachable, RBAC, a dropped connection: retried
                self._count("view_errors")
                if not broken:
                    log.warning("%s: watch broken (%s); retrying with backoff", self.name, short_error(exc))
                broken = True
                with self.lock:
                    was, self.connected = self.connected, False
                if was:
                    self.changed()
                self.stop.wait(wait * random.uniform(0.8, 1.2))
                wait = min(wait * 2, most)


def _lines(lines: Iterator[str], stop: threading.Event) -> Iterator[str]:
    for line in lines:
        if stop.is_set():
            return
        if line:
            yield line
