"""The chart's alerts and dashboard, checked by machine: every expression parses with a real
PromQL parser, and every metric and label it uses appears in gpu-policy's real /metrics output
(or is one of the API server's documented admission metrics), so no panel or alert is silently
empty after a rename."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import promql_parser

from tests.chart import find, render
from tests.helpers import Server, container, pod

# kube-apiserver's admission webhook metrics and their labels
# (staging/src/k8s.io/apiserver/pkg/admission/metrics/metrics.go).
API_SERVER: dict[str, set[str]] = {
    "apiserver_admission_webhook_admission_duration_seconds_bucket": {"name", "type", "operation", "rejected", "le"},
    "apiserver_admission_webhook_rejection_count": {"name", "type", "operation", "error_type", "rejection_code"},
    "apiserver_admission_webhook_fail_open_count": {"name", "type"},
    "apiserver_admission_webhook_request_total": {"name", "type", "operation", "code", "rejected"},
}
ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
}


def selectors(node: Any) -> Iterator[tuple[str, set[str]]]:
    """(metric name, label names in its matchers) of every selector in a parsed expression, plus
    the labels aggregations group by (they must exist too, or the panel splits into one series)."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node.name, {m.name for m in node.matchers.matchers}
    elif kind == "MatrixSelector":
        yield from selectors(node.vector_selector)
    elif kind == "BinaryExpr":
        yield from selectors(node.lhs)
        yield from selectors(node.rhs)
    elif kind == "AggregateExpr":
        inner = list(selectors(node.expr))
        grouping = set(node.modifier.labels) if node.modifier is not None else set()
        for name, labels in inner:
            yield name, labels | grouping
    elif kind == "Call":
        for arg in node.args:
            yield from selectors(arg)
    elif kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        yield from selectors(node.expr)


def exposed(server: Server) -> dict[str, set[str]]:
    """Metric names in the real exposition, with the label names each carries."""
    text = server.scrape()
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series = line.rsplit(" ", 1)[0]
        name, _, rest = series.partition("{")
        out.setdefault(name, set()).update(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest))
    return out


def test_alerts_and_dashboard_use_only_real_metrics(start_server: Callable[..., Server], tmp_path: Path) -> None:
    docs = render(ON, tmp=tmp_path)
    assert isinstance(docs, list)
    rule = find(docs, "PrometheusRule")
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    dashboard = json.loads(
        next(d for d in docs if d["kind"] == "ConfigMap" and "gpu-policy.json" in d.get("data", {}))["data"][
            "gpu-policy.json"
        ]
    )
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in dashboard["panels"]}
    assert len(alerts) == 8 and len(panels) >= 8
    monitor = find(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    service_ports = {p["name"] for p in find(docs, "Service")["spec"]["ports"]}
    assert "metrics" in service_ports

    server = start_server({"clusterVersion": "1.30"})
    client = server.client()
    try:  # make every series exist: a denial with a violation, a patch, a clean review
        client.validate(pod(container("t", gpu=1, privileged=True)))
        client.mutate(pod(container("web")))
        client.validate(pod(container("t", gpu=1)))
    finally:
        client.close()
    real = exposed(server)

    webhooks = [
        h["name"]
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in find(docs, kind)["webhooks"]
    ]
    checked = 0
    for where, exprs in [
        *((f"alert {a}", [e]) for a, e in alerts.items()),
        *((f"panel {p}", es) for p, es in panels.items()),
    ]:
        for expr in exprs:
            tree = promql_parser.parse(expr)  # raises on anything Prometheus would not load
            for name, labels in selectors(tree):
                checked += 1
                if name.startswith("gpu_policy_"):
                    assert name in real, f"{where}: {name} is not in /metrics ({sorted(real)})"
                    known = real[name] | ({"le"} if name.endswith("_bucket") else set())
                    assert labels <= known, f"{where}: {name} has no label(s) {labels - known}"
                else:
                    assert name in API_SERVER, f"{where}: {name} is neither ours nor the API server's"
                    assert labels <= API_SERVER[name], f"{where}: {name} has no label(s) {labels - API_SERVER[name]}"
            for pattern in re.findall(r'name=~"([^"]+)"', expr):
                assert all(re.fullmatch(pattern, w) for w in webhooks), (where, pattern, webhooks)
    assert checked >= 15


def test_monitoring_objects_are_off_by_default(tmp_path: Path) -> None:
    docs = render({}, tmp=tmp_path)
    assert isinstance(docs, list)
    assert not [d for d in docs if d["kind"] in ("ServiceMonitor", "PrometheusRule")]
    result = render({**ON, "server": {"metricsPort": 0}}, tmp=tmp_path, check=False)
    assert result.returncode != 0 and "needs server.metricsPort" in result.stderr


def test_readme_metrics_table_is_the_real_exposition(start_server: Callable[..., Server]) -> None:
    readme = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    table = readme.split("**Metrics**", 1)[1].split("**Alerts**", 1)[0]
    documented = set(re.findall(r"^\| `(gpu_policy_[a-z_]+)` \|", table, flags=re.M))
    server = start_server({"clusterVersion": "1.30"})
    client = server.client()
    try:
        client.validate(pod(container("t", gpu=1, privileged=True)))
    finally:
        client.close()
    real = {re.sub(r"_(bucket|sum|count|created)$", "", n) for n in exposed(server)}
    ours = {n for n in real if n.startswith("gpu_policy_")}
    assert documented == ours, documented ^ ours


def test_violations_by_namespace_are_bounded_and_say_what_enforcing_would_refuse(
    start_server: Callable[..., Server],
) -> None:
    """Issue 50, item 5: under rollout audit a privileged GPU pod in 105 namespaces, one each, and
    two more in team-a: the first 100 namespaces get series of their own (team-a counts 3), the
    last five fold into `_other`; no-privileged-gpu counts as `held` (what enforcing refuses), once
    per violation, never also as warn or audit."""
    from webhook.serve.metrics import NAMESPACES

    server = start_server({"clusterVersion": "1.30", "rollout": "audit"})
    client = server.client()
    try:
        for ns in ["team-a", *(f"ns-{i:03d}" for i in range(NAMESPACES + 4)), "team-a", "team-a"]:
            client.validate(pod(container("t", gpu=1, privileged=True), namespace=ns))
    finally:
        client.close()
    text = server.scrape()
    series = [
        (labels["namespace"], labels["rule"], labels["mode"], n)
        for body, n in re.findall(r"^gpu_policy_namespace_violations_total\{([^}]*)\} (\S+)$", text, re.M)
        for labels in [dict(re.findall(r'(\w+)="([^"]*)"', body))]
    ]
    held = {ns: float(n) for ns, rule, mode, n in series if rule == "no-privileged-gpu" and mode == "held"}
    assert held["team-a"] == 3.0 and held["_other"] == 5.0, held
    assert len({ns for ns, _, _, _ in series}) == NAMESPACES + 1
    assert not [s for s in series if s[1] == "no-privileged-gpu" and s[2] != "held"]
    assert 'gpu_policy_violations_total{mode="held",rule="no-privileged-gpu"} 107.0' in text
