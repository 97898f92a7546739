"""Prometheus metrics: plain integers on the request path, prometheus-client at scrape time.

prometheus-client's Counter and Histogram take a lock and walk label dictionaries on every
update, which cost about 15 us per review in `make bench`. Here a review adds to a few
ints in a dict (the server is single-threaded per process), and a custom collector turns
them into the standard exposition format when /metrics is scraped.
"""

from __future__ import annotations

import platform
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .. import package_version

VIEW_RESOURCES = ("nodes", "deviceclasses", "resourceclaims", "resourceclaimtemplates")
# gpu_policy_namespace_violations: the first this many namespaces with a violation get series of
# their own; the rest are counted under OTHER. Series are never dropped or moved (a counter that
# moved between labels would read as a reset), so per worker the cardinality is at most
# (NAMESPACES + 1) x rules x modes, whatever the cluster holds.
NAMESPACES = 100
OTHER = "_other"
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics(Collector):
    """One process's counters. With --workers N each worker writes `snapshot()` to a shared folder
    every second and the metrics port sums them (`merged`), so one scrape sees the whole pod."""

    def __init__(self) -> None:
        self.reviews: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.violations: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.by_namespace: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self.namespaces: set[str] = set()  # those with series of their own (NAMESPACES at most)
        # Per webhook: a count per bucket (non-cumulative, +Inf last) and the sum of seconds.
        self.latency: dict[str, list[float]] = {}
        self.cert_reloads = 0
        self.config_reloads: defaultdict[str, int] = defaultdict(int)
        self.config_generation = 0
        self.in_flight = 0
        self.cert_not_after: Callable[[], float] = lambda: 0.0
        # The cluster view (webhook.cluster.view): -1 when it is off; 0 not synced; 1 synced.
        self.view_synced = -1
        self.view_nodes = 0
        # by resource; every resource present from the start, so rate() and absent() work at once
        self.view_relists: defaultdict[str, int] = defaultdict(int, dict.fromkeys(VIEW_RESOURCES, 0))
        self.view_errors: defaultdict[str, int] = defaultdict(int, dict.fromkeys(VIEW_RESOURCES, 0))
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def snapshot(self) -> dict[str, Any]:
        """Everything this process counted, as JSON-able data."""
        return {
            "reviews": [[*k, n] for k, n in self.reviews.items()],
            "violations": [[*k, n] for k, n in self.violations.items()],
            "by_namespace": [[*k, n] for k, n in self.by_namespace.items()],
            "latency": self.latency,
            "cert_reloads": self.cert_reloads,
            "config_reloads": dict(self.config_reloads),
            "config_generation": self.config_generation,
            "in_flight": self.in_flight,
            "cert_not_after": self.cert_not_after(),
            "view_synced": self.view_synced,
            "view_nodes": self.view_nodes,
            "view_relists": dict(self.view_relists),
            "view_errors": dict(self.view_errors),
        }

    @classmethod
    def merged(cls, snapshots: list[dict[str, Any]]) -> Metrics:
        """The sum of several processes' snapshots (generation: the lowest, so a worker that has
        not reloaded yet shows; notAfter: the earliest)."""
        out = cls()
        for snap in snapshots:
            for webhook, decision, n in snap["reviews"]:
                out.reviews[(webhook, decision)] += n
            for rule, mode, n in snap["violations"]:
                out.violations[(rule, mode)] += n
            for namespace, rule, mode, n in snap.get("by_namespace", []):
                out.by_namespace[(namespace, rule, mode)] += n
            for webhook, hist in snap["latency"].items():
                mine = out.latency.setdefault(webhook, [0.0] * len(hist))
                for i, value in enumerate(hist):
                    mine[i] += value
            out.cert_reloads += snap["cert_reloads"]
            for result, n in snap["config_reloads"].items():
                out.config_reloads[result] += n
            out.in_flight += snap["in_flight"]
            for resource, n in snap.get("view_relists", {}).items():
                out.view_relists[resource] += n
            for resource, n in snap.get("view_errors", {}).items():
                out.view_errors[resource] += n
        if snapshots:
            # every worker holds its own view: the pod is synced when all of them are
            out.view_synced = min(s.get("view_synced", -1) for s in snapshots)
            out.view_nodes = max(s.get("view_nodes", 0) for s in snapshots)
            out.config_generation = min(s["config_generation"] for s in snapshots)
            earliest = min(s["cert_not_after"] for s in snapshots)
            out.cert_not_after = lambda: earliest
        return out

    def observe(
        self, webhook: str, decision: str, seconds: float, violations: list[tuple[str, str]], namespace: str = ""
    ) -> None:
        self.reviews[(webhook, decision)] += 1
        hist = self.latency.get(webhook)
        if hist is None:
            hist = self.latency[webhook] = [0.0] * (len(BUCKETS) + 2)
        hist[bisect_left(BUCKETS, seconds)] += 1
        hist[-1] += seconds
        if not violations:
            return
        if namespace not in self.namespaces:
            if len(self.namespaces) < NAMESPACES:
                self.namespaces.add(namespace)
            else:
                namespace = OTHER
        for key in violations:
            self.violations[key] += 1
            self.by_namespace[(namespace, *key)] += 1

    def count_reload(self) -> None:
        self.cert_reloads += 1

    def count_config(self, result: str) -> None:
        self.config_reloads[result] += 1

    def collect(self) -> Iterator[Metric]:
        reviews = CounterMetricFamily(
            "gpu_policy_reviews", "AdmissionReviews answered, by webhook and decision.", labels=["webhook", "decision"]
        )
        for (webhook, decision), n in sorted(self.reviews.items()):
            reviews.add_metric([webhook, decision], n)
        yield reviews
        violations = CounterMetricFamily(
            "gpu_policy_violations",
            "Rule violations found, by rule and the mode that applied.",
            labels=["rule", "mode"],
        )
        for (rule, mode), n in sorted(self.violations.items()):
            violations.add_metric([rule, mode], n)
        yield violations
        by_namespace = CounterMetricFamily(
            "gpu_policy_namespace_violations",
            "Rule violations by namespace (the first 100 seen; the rest as _other), rule and mode "
            "(held: a deny that rollout audit holds back, what enforcing would refuse).",
            labels=["namespace", "rule", "mode"],
        )
        for (namespace, rule, mode), n in sorted(self.by_namespace.items()):
            by_namespace.add_metric([namespace, rule, mode], n)
        yield by_namespace
        latency = HistogramMetricFamily(
            "gpu_policy_review_seconds",
            "Time from a complete request body to a serialised response.",
            labels=["webhook"],
        )
        for webhook, hist in sorted(self.latency.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), hist[:-1], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([webhook], buckets, hist[-1])
        yield latency
        reloads = CounterMetricFamily("gpu_policy_certificate_reloads", "Serving certificates loaded after start-up.")
        reloads.add_metric([], self.cert_reloads)
        yield reloads
        config = CounterMetricFamily(
            "gpu_policy_config_reloads",
            "Changed config files seen after start-up, by result (ok: now active; error: rejected).",
            labels=["result"],
        )
        for result in ("ok", "error"):
            config.add_metric([result], self.config_reloads[result])
        yield config
        generation = GaugeMetricFamily(
            "gpu_policy_config_generation", "The active policy's generation: 1 at start-up, +1 per reload."
        )
        generation.add_metric([], self.config_generation)
        yield generation
        in_flight = GaugeMetricFamily(
            "gpu_policy_in_flight_reviews", "Reviews whose body is still arriving (slow or stalled clients)."
        )
        in_flight.add_metric([], self.in_flight)
        yield in_flight
        expiry = GaugeMetricFamily(
            "gpu_policy_certificate_not_after_seconds",
            "notAfter of the serving certificate, as a Unix time (alert well before it passes).",
        )
        expiry.add_metric([], self.cert_not_after())
        yield expiry
        synced = GaugeMetricFamily(
            "gpu_policy_cluster_view_synced",
            "1: the cluster view is synced and the pre-flight rules judge; 0: not (they are silent); -1: off.",
        )
        synced.add_metric([], self.view_synced)
        yield synced
        nodes = GaugeMetricFamily("gpu_policy_cluster_view_nodes", "Nodes in the cluster view.")
        nodes.add_metric([], self.view_nodes)
        yield nodes
        yield _by_resource(
            "gpu_policy_cluster_view_relists",
            "Full lists of a watched resource: the first, and each after 410 Gone.",
            self.view_relists,
        )
        yield _by_resource(
            "gpu_policy_cluster_view_errors",
            "Failed lists and broken watches of a watched resource (retried with backoff).",
            self.view_errors,
        )
        info = GaugeMetricFamily(
            "gpu_policy_build_info", "Always 1: the version running.", labels=["version", "python"]
        )
        info.add_metric([package_version(), platform.python_version()], 1)
        yield info

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _by_resource(name: str, text: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text, labels=["resource"])
    for resource, n in sorted(counts.items()):
        family.add_metric([resource], n)
    return family
