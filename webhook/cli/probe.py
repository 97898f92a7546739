"""`gpu-policy probe`: what `helm test` runs, from the chart's own image (no curl or busybox to pull,
so an air-gapped install tests itself): over TLS verified against the webhook's CA, /readyz answers
200, and /validate answers a privileged GPU pod as the policy says it must (denied; under
`rollout: audit`, allowed with the warning that enforcing would deny it). Standard library only:
the image has no other HTTP client than the server's, and a probe must not be the thing it tests."""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
import uuid
from typing import Any

from ..offline.reports import EXIT_DENIED, EXIT_INPUT, EXIT_OK

# What no-privileged-gpu refuses under every configuration the chart renders.
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gpu-policy-probe"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "image": "probe",
                "securityContext": {"privileged": True},
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ]
    },
}
WARNED = "would violate GPU policy: no-privileged-gpu"


def command(args: argparse.Namespace) -> int:
    try:
        context = ssl.create_default_context(cafile=args.ca)
    except (OSError, ssl.SSLError) as exc:
        print(f"gpu-policy probe: cannot load the CA {args.ca}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    base = args.url.rstrip("/")
    try:
        status, body = _call(f"{base}/readyz", None, context, args.timeout)
        if status != 200:
            print(f"FAIL  /readyz answered {status}: {body.decode(errors='replace')[:200]}")
            return EXIT_DENIED
        print("OK    /readyz 200 over verified TLS")
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "namespace": args.namespace,
                "userInfo": {"username": "system:serviceaccount:gpu-policy:probe"},
                "object": POD,
            },
        }
        status, body = _call(f"{base}/validate?timeout=10s", json.dumps(review).encode(), context, args.timeout)
    except (urllib.error.URLError, OSError) as exc:
        print(f"FAIL  {base}: {getattr(exc, 'reason', None) or exc}")
        return EXIT_DENIED
    try:
        response = json.loads(body)["response"]
    except (ValueError, KeyError, TypeError):
        print(f"FAIL  /validate answered {status}, not an AdmissionReview: {body[:200]!r}")
        return EXIT_DENIED
    if args.expect == "denied":
        ok = response.get("allowed") is False and "no-privileged-gpu" in response.get("status", {}).get("message", "")
        said = response.get("status", {}).get("message", "")
    else:
        warnings = response.get("warnings") or []
        ok = response.get("allowed") is True and any(w.startswith(WARNED) for w in warnings)
        said = "; ".join(warnings) or "no warning"
    if not ok:
        print(f"FAIL  a privileged GPU pod was not {args.expect}: allowed={response.get('allowed')}: {said[:300]}")
        return EXIT_DENIED
    print(f"OK    a privileged GPU pod is {args.expect}: {said[:200]}")
    return EXIT_OK


def _call(url: str, data: bytes | None, context: ssl.SSLContext, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, context=context, timeout=timeout) as r:
            return int(r.status), r.read(1 << 20)
    except urllib.error.HTTPError as e:
        return int(e.code), e.read(1 << 20)
