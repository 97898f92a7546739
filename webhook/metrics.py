"""Prometheus metrics, in a registry per app so tests and workers never share global state."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reviews = Counter(
            "gpu_policy_reviews",
            "AdmissionReviews answered, by webhook and decision.",
            ["webhook", "decision"],
            registry=self.registry,
        )
        self.violations = Counter(
            "gpu_policy_violations",
            "Rule violations found, by rule and the mode that applied.",
            ["rule", "mode"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpu_policy_review_seconds",
            "Time from a complete request body to a serialised response.",
            ["webhook"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.cert_reloads = Counter(
            "gpu_policy_certificate_reloads", "Serving certificates loaded after start-up.", registry=self.registry
        )
        # Label lookups cost more than the increment; keep children for the hot path.
        self._latency = {w: self.latency.labels(w) for w in ("validate", "mutate")}
        self._reviews: dict[tuple[str, str], Counter] = {}

    def observe(self, webhook: str, decision: str, seconds: float, violations: list[tuple[str, str]]) -> None:
        child = self._reviews.get((webhook, decision))
        if child is None:
            child = self._reviews[(webhook, decision)] = self.reviews.labels(webhook, decision)
        child.inc()
        self._latency[webhook].observe(seconds)
        for rule, mode in violations:
            self.violations.labels(rule, mode).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
