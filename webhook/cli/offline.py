"""`gpu-policy check` and `gpu-policy mutate`: manifests judged exactly as the webhooks would.

Each document becomes the AdmissionReview request the API server would send
(manifests.review_request) and goes through webhook.admission, so the verdicts and messages
are the server's to the letter.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import jsonpatch
import yaml

from .. import admission, package_version
from ..admission import Decision
from ..offline import reports
from ..offline.manifests import Charts, InputError, NamespaceMismatch, not_a_manifest, read, review_request
from ..offline.native import CelFailed, CelMissing, Native
from ..offline.reports import EXIT_DENIED, EXIT_INPUT, EXIT_OK, Result
from ..policy import Policy
from .settings import chart_view, from_args


def _inputs(args: argparse.Namespace, command: str) -> list[str] | None:
    """-f entries and positional files together; None (and a message) when there are none."""
    paths = [*args.file, *args.files]
    if not paths:
        print(f"gpu-policy {command}: no input: name files or folders (-f FILE, or - for stdin)", file=sys.stderr)
        return None
    return paths


def check(args: argparse.Namespace) -> int:
    paths = _inputs(args, "check")
    if paths is None:
        return EXIT_INPUT
    chart = chart_view(args)
    policy = from_args(args, chart).policy
    if args.cluster:
        from ..cluster.client import ClusterError
        from .cluster import with_cluster

        try:
            policy = with_cluster(args, policy)
        except ClusterError as exc:
            print(f"gpu-policy check --cluster: {exc}", file=sys.stderr)
            return EXIT_INPUT
    native = _native(args, policy)
    results: list[Result] = []
    for doc in read(paths, Charts.found(tuple(args.chart_values), args.chart_namespace or args.namespace)):
        if args.manifests_only and not_a_manifest(doc):
            continue
        if isinstance(doc, InputError):
            results.append(Result(doc.where, error=doc.message, line=doc.line))
            continue
        try:
            req = review_request(doc, args.namespace)
        except NamespaceMismatch as exc:
            results.append(Result(doc.where, error=str(exc)))
            continue
        if not req.kind:
            results.append(Result(doc.where, error="kind: is required"))
            continue
        unsent = chart.not_sent(req.group, req.kind) if chart is not None else None
        if unsent:
            outcome = admission.Outcome(Decision.SKIPPED, reason=unsent)
        else:
            outcome = native.validate(req) if native is not None else admission.validate(req, policy)
        results.append(
            Result(doc.where, req.kind, req.namespace, req.name, outcome, "", doc.source, doc.line, doc.line_of)
        )
    if args.output == "json":
        reports.write_json(results, sys.stdout, args.strict)
    elif args.output == "junit":
        reports.write_junit(results, sys.stdout)
    elif args.output == "sarif":
        reports.write_sarif(results, sys.stdout, package_version())
    else:
        reports.write_text(results, sys.stdout, args.verbose)
    if not results:  # a CI step whose render came out empty must not pass unnoticed
        print(f"gpu-policy check: no objects in {', '.join(paths)}: nothing was judged", file=sys.stderr)
        return EXIT_DENIED if args.fail_on_empty else EXIT_OK
    return reports.exit_code(results, args.strict)


def mutate(args: argparse.Namespace) -> int:
    paths = _inputs(args, "mutate")
    if paths is None:
        return EXIT_INPUT
    chart = chart_view(args)
    policy = from_args(args, chart).policy
    # --engine cel: the native policies first (the API server runs MutatingAdmissionPolicy before
    # the webhooks), compiled once, then the webhook's mutations that CEL does not carry.
    native = _native(args, policy)
    webhook_policy = native.webhook if native is not None else policy
    out: list[Any] = []
    code = EXIT_OK
    for doc in read(paths, Charts.found(tuple(args.chart_values), args.chart_namespace or args.namespace)):
        if isinstance(doc, InputError):
            print(f"ERROR {doc}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        try:
            req = review_request(doc, args.namespace)
        except NamespaceMismatch as exc:
            print(f"ERROR {doc.where}: {exc}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        if chart is not None and chart.not_sent(req.group, req.kind, mutate=True):
            out.append(doc.obj)
            continue
        obj = doc.obj
        if native is not None and req.kind == "Pod" and not req.group:
            try:
                obj = native.admit(obj, req.namespace, req.user, req.operation)
            except CelFailed as exc:  # the API server (failurePolicy Fail) would refuse it
                print(f"DENY  {doc.where}: a native policy failed, so the API server would refuse it: {exc}")
                code = EXIT_DENIED
                continue
            req = req.with_object(obj)
        outcome = admission.mutate(req, webhook_policy)
        if outcome.decision is Decision.MALFORMED:
            print(f"ERROR {doc.where}: {outcome.message}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        label = f"{doc.where}: {req.kind or '<no kind>'} {req.namespace}/{req.name or '<no name>'}"
        if outcome.reason == admission.SKIP_KIND.reason:
            # The API server sends pods, not templates, to the mutating webhook: say so rather
            # than print the object back as if nothing could change.
            print(
                f"NOTE  {label}: printed unchanged: only Pods are mutated; at admission each pod this "
                f"{req.kind} creates gets the patches, not its template",
                file=sys.stderr,
            )
        for w in outcome.warnings:
            print(f"WARN  {label}: {w}", file=sys.stderr)
        patched = jsonpatch.apply_patch(obj, outcome.ops) if outcome.ops else obj
        out.append(patched)
        # The API server calls the validating webhook after the mutating one: say so if it would refuse.
        if native is not None:
            after = native.validate(req.with_object(patched))
            refuser = "the API server" if req.kind == "Pod" and not req.group else "the validating webhook"
        else:
            after = admission.validate(req.with_object(patched), policy)
            refuser = "the validating webhook"
        if not after.allowed:
            print(f"DENY  {label}: {refuser} would still refuse it: {after.message}", file=sys.stderr)
    if args.output == "json":
        json.dump(out if len(out) != 1 else out[0], sys.stdout, indent=2)
        print()
    else:
        yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return code


def _native(args: argparse.Namespace, policy: Policy) -> Native | None:
    """--engine cel: what the API server runs, compiled once (None with --engine webhook).
    Without cel-python it says so and exits 2, as for any unusable input."""
    if args.engine != "cel":
        return None
    try:
        return Native.of(policy)
    except CelMissing as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INPUT) from exc
