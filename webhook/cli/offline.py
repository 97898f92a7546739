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

from .. import admission, reports
from ..admission import Decision
from ..manifests import InputError, NamespaceMismatch, read, review_request
from ..reports import EXIT_INPUT, EXIT_OK, Result
from .settings import chart_view, from_args


def check(args: argparse.Namespace) -> int:
    chart = chart_view(args)
    policy = from_args(args, chart).policy
    if args.cluster:
        from ..clusterview import ClusterError
        from .cluster import with_cluster

        try:
            policy = with_cluster(args, policy)
        except ClusterError as exc:
            print(f"gpu-policy check --cluster: {exc}", file=sys.stderr)
            return EXIT_INPUT
    results: list[Result] = []
    for doc in read(args.file):
        if isinstance(doc, InputError):
            results.append(Result(doc.where, error=doc.message))
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
        outcome = admission.Outcome(Decision.SKIPPED, reason=unsent) if unsent else admission.validate(req, policy)
        results.append(Result(doc.where, req.kind, req.namespace, req.name, outcome))
    if args.output == "json":
        reports.write_json(results, sys.stdout, args.strict)
    else:
        reports.write_text(results, sys.stdout)
    return reports.exit_code(results, args.strict)


def mutate(args: argparse.Namespace) -> int:
    chart = chart_view(args)
    policy = from_args(args, chart).policy
    out: list[Any] = []
    code = EXIT_OK
    for doc in read(args.file):
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
        outcome = admission.mutate(req, policy)
        if outcome.decision is Decision.MALFORMED:
            print(f"ERROR {doc.where}: {outcome.message}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        label = f"{doc.where}: {req.kind or '<no kind>'} {req.namespace}/{req.name or '<no name>'}"
        for w in outcome.warnings:
            print(f"WARN  {label}: {w}", file=sys.stderr)
        out.append(jsonpatch.apply_patch(doc.obj, outcome.ops) if outcome.ops else doc.obj)
    if args.output == "json":
        json.dump(out if len(out) != 1 else out[0], sys.stdout, indent=2)
        print()
    else:
        yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return code
