"""The commands that read a live cluster: `audit`, and the view `check --cluster` judges against.

Both connect with the kubeconfig (`--kubeconfig`, `--context`, else $KUBECONFIG and
~/.kube/config) or, inside a pod, the in-cluster config. A cluster that cannot be read is exit
code 2 with the reason, never a silent "all clear".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import replace
from typing import Any

import yaml

from ..cluster.audit import Audit, apply_reports, policy_reports, reports_served, run
from ..cluster.client import ClusterError
from ..offline.reports import EXIT_DENIED, EXIT_INPUT, EXIT_OK
from ..policy import Mode, Policy, watches_namespaces
from ..policy.engine import DENY_PREFIX, exception_states, today
from ..policy.types import PolicyException
from .settings import chart_view, from_args


def connect(args: argparse.Namespace) -> Any:
    from ..cluster.client import connect as connect_cluster

    return connect_cluster(getattr(args, "kubeconfig", None), getattr(args, "context", None))[0]


def with_cluster(args: argparse.Namespace, policy: Policy, client: Any = None) -> Policy:
    """`policy` judging against the live cluster: its nodes and DRA objects, listed once."""
    from kubernetes.client.exceptions import ApiException

    from ..cluster.view import ClusterWatcher

    client = client if client is not None else connect(args)
    try:
        view = ClusterWatcher(client, lambda _view: None, namespaces=watches_namespaces(policy)).snapshot()
    except ApiException as exc:
        raise ClusterError(f"listing nodes: {exc.status} {exc.reason} (RBAC: list nodes)") from None
    except Exception as exc:
        raise ClusterError(f"cannot reach the API server: {type(exc).__name__}: {exc}") from None
    print(f"cluster: {view.nodes} nodes in {len(view.groups)} groups", file=sys.stderr)
    return replace(policy, cluster=view)


def audit(args: argparse.Namespace) -> int:
    chart = chart_view(args)
    policy = from_args(args, chart).policy

    def progress(line: str) -> None:
        print(f"audit: {line}", file=sys.stderr, flush=True)

    try:
        client = connect(args)
        if args.report:
            reports_served(client)
        policy = with_cluster(args, policy, client)
        result = run(client, policy, args.namespace, args.page_size, progress)
        reports = policy_reports(result) if (args.report or args.report_file) else []
        if args.report_file:
            to_file = args.report_file != "-"
            with (
                open(args.report_file, "w", encoding="utf-8") if to_file else contextlib.nullcontext(sys.stdout) as out
            ):
                yaml.safe_dump_all(reports, out, sort_keys=False)
        if args.report:
            apply_reports(client, reports)
            progress(f"{len(reports)} PolicyReport(s) written (wgpolicyk8s.io/v1alpha2, name gpu-policy)")
    except ClusterError as exc:
        print(f"gpu-policy audit: {exc}", file=sys.stderr)
        return EXIT_INPUT
    states = exception_states(policy, today())
    if args.output == "json":
        json.dump({**audit_dict(result), "exceptions": exceptions_dict(states)}, sys.stdout, indent=2)
        print()
    elif args.report_file != "-":
        write_text(result, args.limit)
        write_exceptions(states)
    if args.exit_zero:  # a periodic job: what it found is in the reports, not in its exit status
        return EXIT_OK
    if result.denied() or (args.strict and result.would_deny()):
        return EXIT_DENIED
    return EXIT_OK


def audit_dict(result: Audit) -> dict[str, Any]:
    return {
        "judged": dict(result.judged),
        "seconds": round(result.seconds, 3),
        "notServed": result.not_served,
        "table": [
            {"namespace": ns, "rule": rule, "denied": d, "warned": w, "deniedIfEnforced": e}
            for ns, rule, d, w, e in result.table()
        ],
        "findings": [
            {
                "kind": f.kind.kind,
                "apiVersion": f.kind.api_version,
                "namespace": f.namespace,
                "name": f.name,
                "decision": f.outcome.decision.value,
                "violations": [
                    {"rule": v.rule, "mode": mode.value, "path": v.path, "message": v.describe()}
                    for mode, v in f.violations()
                ],
            }
            for f in result.findings
        ],
        "malformed": [{"object": o, "message": m} for o, m in result.malformed],
        "summary": {
            "deniedToday": len(result.denied()),
            "warnedToday": sum(1 for f in result.findings if f.outcome.violations(Mode.WARN)),
            "deniedIfEnforced": len(result.would_deny()),
        },
    }


def exceptions_dict(states: list[tuple[PolicyException, str, int]]) -> list[dict[str, Any]]:
    return [
        {
            "name": e.name,
            "namespace": e.namespace,
            "rules": sorted(e.rules),
            "podLabels": dict(e.pod_labels),
            "owner": e.owner,
            "reason": e.reason,
            "expires": e.expires,
            "state": state,
            "days": days,
        }
        for e, state, days in states
    ]


def write_exceptions(states: list[tuple[PolicyException, str, int]]) -> None:
    """The configured exceptions, expired and expiring first: who to ask, about what, by when."""
    for e, state, days in states:
        when = (
            f"expired {days} day(s) ago ({e.expires})"
            if state == "expired"
            else f"expires in {days} day(s) ({e.expires})"
        )
        labels = ",".join(f"{k}={v}" for k, v in e.pod_labels)
        print(
            f"EXCEPTION {state.upper():<8} {e.name} in {e.namespace}{' (' + labels + ')' if labels else ''}: "
            f"{', '.join(sorted(e.rules))}; {when}; owner {e.owner}: {e.reason}",
            file=sys.stdout,
        )


def write_text(result: Audit, limit: int) -> None:
    out = sys.stdout
    judged = sum(result.judged.values())
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(result.judged.items()) if n)
    print(f"judged {judged} object(s) in {result.seconds:.1f} s: {kinds or 'none'}", file=out)
    if result.not_served:
        print(
            f"{len(result.not_served)} policed kinds not served here (their CRDs are not installed): "
            f"{', '.join(result.not_served)}",
            file=out,
        )
    rows = result.table()
    if rows:
        widths = [max(len("NAMESPACE"), *(len(r[0]) for r in rows)), max(len("RULE"), *(len(r[1]) for r in rows))]
        print(f"\n{'NAMESPACE':<{widths[0]}}  {'RULE':<{widths[1]}}  DENIED  WARNED  DENIED-IF-ENFORCED", file=out)
        for ns, rule, d, w, e in rows:
            print(f"{ns:<{widths[0]}}  {rule:<{widths[1]}}  {d:>6}  {w:>6}  {e:>18}", file=out)
        print(file=out)
    shown = 0
    for f in result.findings:
        for mode, v in f.violations():
            if shown >= limit:
                break
            word = {Mode.DENY: "DENY ", Mode.WARN: "WARN ", Mode.AUDIT: "AUDIT"}[mode]
            print(f"{word} {f.kind.kind} {f.namespace}/{f.name}: {v.describe()}", file=out)
            shown += 1
    total = sum(len(f.violations()) for f in result.findings)
    if total > shown:
        print(f"... {total - shown} more (--limit, or -o json for all)", file=out)
    for obj, message in result.malformed:
        print(f"ERROR {obj}: {message}", file=out)
    print(
        f"{len(result.denied())} object(s) denied today ({DENY_PREFIX.strip()}), "
        f"{sum(1 for f in result.findings if f.outcome.violations(Mode.WARN))} warned; "
        f"{len(result.would_deny())} would be denied if every warn rule were deny",
        file=out,
    )


def verify(args: argparse.Namespace) -> int:
    import signal

    from kubernetes.client.exceptions import ApiException

    from ..cluster import probes
    from ..cluster import verify as checks

    policy = from_args(args, chart_view(args)).policy

    def progress(line: str) -> None:
        print(f"verify: {line}", file=sys.stderr, flush=True)

    def terminated(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # the probes are deleted on the way out

    signal.signal(signal.SIGTERM, terminated)
    # Ctrl-C deletes the probes too, whatever the parent left SIGINT at: a process started with it
    # ignored (a job runner, a test runner's worker) would otherwise run every probe to its timeout.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.isolation_probes < 2:
        print("gpu-policy verify: --isolation-probes must be at least 2", file=sys.stderr)
        return probes.EXIT_CANNOT_RUN
    options = probes.Options(
        namespace=args.namespace,
        image=args.image,
        node=args.node,
        resource=args.resource,
        timeout=args.timeout,
        keep=args.keep,
        isolation_probes=args.isolation_probes,
        device_plugin_selectors=tuple(args.device_plugin_selector or probes.DEVICE_PLUGIN_SELECTORS),
    )
    try:
        verifier = checks.Verifier(probes.Kube(connect(args)), policy, options, progress)
        report = verifier.run()
    except ClusterError as exc:
        print(f"gpu-policy verify: could not run: {exc}", file=sys.stderr)
        return probes.EXIT_CANNOT_RUN
    except ApiException as exc:
        hint = " (RBAC: see README, verify)" if exc.status in (401, 403) else ""
        print(f"gpu-policy verify: could not run: {exc.status} {exc.reason}{hint}", file=sys.stderr)
        return probes.EXIT_CANNOT_RUN
    if args.output == "json":
        json.dump(checks.to_dict(report), sys.stdout, indent=2)
        print()
    elif args.output == "junit":
        sys.stdout.write(checks.to_junit(report))
    else:
        sys.stdout.write(checks.to_text(report))
    return report.exit_code
