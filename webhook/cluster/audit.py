"""`gpu-policy audit`: what is already running, judged by the current config.

Before a platform team turns a rule from warn to deny it needs to know what would break
(Gatekeeper's audit, Kyverno's background scans). This lists Pods and every policed kind
through the official client (discovery for served versions, paginated lists), judges each
object with the same `admission.validate` the webhook uses (with the cluster view, so the
pre-flight rules count), and summarises per namespace and rule: denied today, warned today,
and denied if every warn rule were deny. It can write the findings as `wgpolicyk8s.io/v1alpha2`
PolicyReports, the format Kyverno and Kubewarden users already read.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import admission
from ..admission import Decision, Outcome
from ..admission.review import Request
from ..policy import OBJECT_RULES, Mode, Policy, Violation
from ..policy.templates import WORKLOADS
from .client import ClusterError, call_json

Progress = Callable[[str], None]


def get_json(api_client: Any, path: str, query: list[tuple[str, Any]] | None = None, timeout: float = 30.0) -> Any:
    """GET `path` through the client's transport (its auth, TLS and proxies), as parsed JSON."""
    return call_json(
        api_client.call_api,
        path,
        "GET",
        query_params=query or [],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        timeout=timeout,
    )


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}" if self.group else f"/api/v1/{self.plural}"


def policed_kinds(api_client: Any, policy: Policy) -> tuple[list[Kind], list[str]]:
    """The policed kinds this cluster serves (discovery: preferred versions), and those it does not."""
    from kubernetes.client.exceptions import ApiException

    # (group, kind): the plural comes from discovery (custom kinds name none)
    wanted = {(w.group, w.kind) for w in WORKLOADS} | set(policy.custom_templates)
    wanted |= {(group, kind) for rule in OBJECT_RULES for group, kind, _plural in rule.kinds}
    try:
        groups = get_json(api_client, "/apis")
    except ApiException as exc:
        raise ClusterError(f"discovery (/apis) failed: {exc.status} {exc.reason}") from None
    preferred = {
        g["name"]: g["preferredVersion"]["version"] for g in groups.get("groups") or () if g.get("preferredVersion")
    }
    found: list[Kind] = []
    missing: list[str] = []
    served: dict[str, dict[str, str]] = {}
    for group, kind in sorted(wanted):
        version = "v1" if group == "" else preferred.get(group, "")
        if not version:
            missing.append(f"{kind}.{group}")
            continue
        if group not in served:
            path = "/api/v1" if group == "" else f"/apis/{group}/{version}"
            try:
                resources = get_json(api_client, path).get("resources") or ()
            except ApiException as exc:
                raise ClusterError(f"discovery ({path}) failed: {exc.status} {exc.reason}") from None
            served[group] = {r["kind"]: r["name"] for r in resources if "/" not in r.get("name", "/")}
        served_as = served[group].get(kind)
        if served_as is None:
            missing.append(f"{kind}.{group}" if group else kind)
            continue
        found.append(Kind(group, version, kind, served_as))
    return found, missing


def list_all(api_client: Any, kind: Kind, namespace: str | None, page: int) -> Iterator[dict[str, Any]]:
    """Every object of `kind`, page by page (a 410 on an expired continue token starts over)."""
    from kubernetes.client.exceptions import ApiException

    path = kind.path
    if namespace:
        prefix, _, plural = path.rpartition("/")
        path = f"{prefix}/namespaces/{namespace}/{plural}"
    token = ""
    seen: set[str] = set()
    while True:
        query: list[tuple[str, Any]] = [("limit", page)]
        if token:
            query.append(("continue", token))
        try:
            data = get_json(api_client, path, query)
        except ApiException as exc:
            if exc.status == 410 and token:
                token = ""  # the snapshot expired mid-list: list again, skipping what was judged
                continue
            if exc.status in (401, 403):
                raise ClusterError(
                    f"listing {kind.plural}: {exc.status} {exc.reason} (RBAC: list {kind.plural})"
                ) from None
            raise ClusterError(f"listing {kind.plural}: {exc.status} {exc.reason}") from None
        for obj in data.get("items") or ():
            uid = (obj.get("metadata") or {}).get("uid") or ""
            if uid and uid in seen:
                continue
            seen.add(uid)
            # List items of built-in kinds come without apiVersion and kind.
            obj.setdefault("apiVersion", kind.api_version)
            obj.setdefault("kind", kind.kind)
            yield obj
        token = (data.get("metadata") or {}).get("continue") or ""
        if not token:
            return


@dataclass(slots=True)
class Finding:
    """One object with violations."""

    kind: Kind
    namespace: str
    name: str
    uid: str
    outcome: Outcome

    def violations(self) -> list[tuple[Mode, Violation]]:
        """(mode, violation) each once: a deny rollout audit holds back is listed as warn
        (Verdict.once; held() names it)."""
        return [(mode, v) for mode, v, _held in self.outcome.verdict.once()]

    def held(self) -> set[int]:
        return self.outcome.verdict.held()


@dataclass(slots=True)
class Audit:
    judged: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # kind -> objects judged
    clean: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # namespace -> objects without findings
    findings: list[Finding] = field(default_factory=list)
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (object, message)
    not_served: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> list[tuple[str, str, int, int, int]]:
        """(namespace, rule, objects denied today, warned today, denied if every warn rule were deny)."""
        rows: dict[tuple[str, str], list[set[str]]] = defaultdict(lambda: [set(), set(), set()])
        for f in self.findings:
            for mode, v in f.violations():
                row = rows[(f.namespace, v.rule)]
                if mode is Mode.DENY:
                    row[0].add(f.uid)
                    row[2].add(f.uid)
                elif mode is Mode.WARN:
                    row[1].add(f.uid)
                    row[2].add(f.uid)
        return [(ns, rule, len(d), len(w), len(e)) for (ns, rule), (d, w, e) in sorted(rows.items())]

    def denied(self) -> list[Finding]:
        return [f for f in self.findings if f.outcome.decision is Decision.DENIED]

    def would_deny(self) -> list[Finding]:
        return [f for f in self.findings if f.outcome.violations(Mode.DENY) or f.outcome.violations(Mode.WARN)]


def run(
    api_client: Any,
    policy: Policy,
    namespace: str | None = None,
    page: int = 500,
    progress: Progress = lambda _line: None,
) -> Audit:
    started = time.monotonic()
    kinds, missing = policed_kinds(api_client, policy)
    audit = Audit(not_served=missing)
    for kind in kinds:
        count = 0
        for obj in list_all(api_client, kind, namespace, page):
            count += 1
            judge(audit, kind, obj, policy)
            if count % (page * 10) == 0:
                progress(f"{kind.plural}: {count} judged")
        audit.judged[kind.kind] += count
        if count:
            progress(f"{kind.plural}: {count} judged")
    audit.seconds = time.monotonic() - started
    return audit


def judge(audit: Audit, kind: Kind, obj: dict[str, Any], policy: Policy) -> None:
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    ns = str(meta.get("namespace") or "")
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or uuid.uuid4())
    req = Request(
        api_version="admission.k8s.io/v1",
        uid=uid,
        group=kind.group,
        kind=kind.kind,
        operation="CREATE",  # judged as if created now: what the policy says of it today
        sub_resource="",
        namespace=ns,
        name=name,
        object=obj,
        old_object=None,
    )
    outcome = admission.validate(req, policy)
    if outcome.decision is Decision.MALFORMED:
        audit.malformed.append((f"{kind.kind} {ns}/{name}", outcome.message))
    elif outcome.verdict.by_mode:
        audit.findings.append(Finding(kind, ns, name, uid, outcome))
    elif outcome.decision is not Decision.SKIPPED:
        audit.clean[ns] += 1


# ---------------------------------------------------------------- PolicyReports

REPORT_NAME = "gpu-policy"
_RESULT = {Mode.DENY: "fail", Mode.WARN: "warn", Mode.AUDIT: "warn"}
_SEVERITY = {Mode.DENY: "high", Mode.WARN: "medium", Mode.AUDIT: "low"}


# A report holds at most this many results (about 600 bytes each: well under etcd's 1.5 MiB per
# object); its summary counts them all, and an annotation says how many were left out.
MAX_RESULTS = 1000
OMITTED = "gpu-policy.io/results-omitted"


def policy_reports(audit: Audit, now: float | None = None) -> list[dict[str, Any]]:
    """One `wgpolicyk8s.io/v1alpha2` PolicyReport per namespace with judged objects: a result per
    violation (fail: a deny rule, or one rollout audit holds back, as Kyverno's audit mode reports
    it; warn: warn and audit rules), passes counted in the summary; at most MAX_RESULTS results
    (the fails first), the rest counted in the summary and the OMITTED annotation."""
    seconds = int(now if now is not None else time.time())
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    summary: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0})
    for ns, n in audit.clean.items():
        summary[ns]["pass"] += n
    for f in audit.findings:
        held = f.held()
        for mode, v in f.violations():
            kept = id(v) in held
            result = "fail" if kept else _RESULT[mode]
            summary[f.namespace][result] += 1
            by_ns[f.namespace].append(
                {
                    "source": "gpu-policy",
                    "policy": "gpu-policy",
                    "rule": v.rule,
                    "result": result,
                    "severity": _SEVERITY[Mode.DENY if kept else mode],
                    "category": "GPU",
                    "scored": True,
                    "message": v.describe(),
                    "timestamp": {"seconds": seconds, "nanos": 0},
                    "properties": {"mode": "held" if kept else mode.value, "path": v.path},
                    "resources": [
                        {
                            "apiVersion": f.kind.api_version,
                            "kind": f.kind.kind,
                            "namespace": f.namespace,
                            "name": f.name,
                            "uid": f.uid,
                        }
                    ],
                }
            )
    out = []
    for ns in sorted(set(summary) | set(by_ns)):
        if not ns:
            continue
        results = sorted(by_ns.get(ns, []), key=lambda r: r["result"] != "fail")  # stable: fails first
        metadata: dict[str, Any] = {
            "name": REPORT_NAME,
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "gpu-policy"},
        }
        if len(results) > MAX_RESULTS:
            metadata["annotations"] = {OMITTED: str(len(results) - MAX_RESULTS)}
        out.append(
            {
                "apiVersion": "wgpolicyk8s.io/v1alpha2",
                "kind": "PolicyReport",
                "metadata": metadata,
                "summary": summary[ns],
                "results": results[:MAX_RESULTS],
            }
        )
    return out


NO_CRD = (
    "the PolicyReport CRD (wgpolicyk8s.io/v1alpha2) is not installed: install it (Kyverno and the "
    "policy-reporter chart ship it) or write the reports to a file with --report-file"
)


def reports_served(api_client: Any) -> None:
    """Raises ClusterError before a long audit when its reports could not be written."""
    from kubernetes.client.exceptions import ApiException

    try:
        get_json(api_client, "/apis/wgpolicyk8s.io/v1alpha2")
    except ApiException as exc:
        raise ClusterError(NO_CRD if exc.status == 404 else f"discovery of wgpolicyk8s.io: {exc.status}") from None


def apply_reports(api_client: Any, reports: list[dict[str, Any]]) -> None:
    """Create each report, or replace the one gpu-policy wrote before (same name)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api_client)
    for report in reports:
        ns = report["metadata"]["namespace"]
        args = ("wgpolicyk8s.io", "v1alpha2", ns, "policyreports")
        try:
            custom.create_namespaced_custom_object(*args, report)
        except ApiException as exc:
            if exc.status == 404:
                raise ClusterError(NO_CRD) from None
            if exc.status != 409:
                raise ClusterError(f"writing PolicyReport {ns}/{REPORT_NAME}: {exc.status} {exc.reason}") from None
            current = custom.get_namespaced_custom_object(*args, REPORT_NAME)
            report = {
                **report,
                "metadata": {**report["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
            }
            custom.replace_namespaced_custom_object(*args, REPORT_NAME, report)
