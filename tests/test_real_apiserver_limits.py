"""Issue 33's request-size limits against a REAL kube-apiserver v1.36 (tests/realapi.py; skipped
where it is absent), through the default chart's webhooks: the largest pods the API server stores,
and the largest review one can cause (server.maxRequestBytes, 19 MiB: webhook.config.defaults).
On their own (tests/conftest.py SERIAL): a review of many MiB must be answered within the
webhook's timeoutSeconds, which no other test's load may eat into. The rest of the real API
server's tests (tests/test_real_apiserver.py) bound nothing in time and run beside the others."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.helpers import Server
from tests.realapi import SKIP, TOKEN, RealApi, available
from tests.test_real_apiserver import c, nvd, pod, real_api, webhooks
from webhook.config.defaults import JSON_ESCAPE, MAX_REQUEST_BYTES, REVIEW_ENVELOPE

pytestmark = pytest.mark.skipif(not available(), reason=SKIP)
__all__ = ["real_api", "webhooks"]  # the fixtures, shared with tests/test_real_apiserver.py


def big_pod(n: int, value: int) -> dict[str, Any]:
    """A trainer with `n` env entries of `value` characters each."""
    env = [{"name": f"S{i}", "value": "v" * value} for i in range(n)]
    p = pod(c("trainer", env=env, resources={"limits": {"nvidia.com/gpu": 1}}))
    p["metadata"] = {"name": f"big-{value}-{n}", "namespace": "ml"}
    return p


def test_the_largest_pod_the_real_api_server_stores_is_judged_whole(real_api: RealApi, webhooks: Server) -> None:
    """Issue 33's maxRequestBytes, checked against what the API server really sends: the largest
    pod etcd stores (env-heavy, as a big trainer is; binary search on the number of entries),
    created for real (dryRun skips etcd's limit), then a `kubectl debug` ephemeral container
    added to it: that UPDATE's review carries the pod twice (object and oldObject), the largest
    review a pod can cause. Bound: both are answered by the webhooks (never a 413: the debug
    container gets isolation's void), and the figures are printed."""

    def create(n: int) -> tuple[int, dict[str, Any]]:
        try:
            code, body, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", big_pod(n, 100))
        except urllib.error.URLError:  # past its 3 MiB MaxRequestBodyBytes it closes the connection
            return 413, {"message": "request body too large"}
        return code, body

    low, high = 1000, 40000
    code, body = create(low)
    assert code == 201, body
    stored = body
    while high - low > 200:
        mid = (low + high) // 2
        code, body = create(mid)
        if code == 201:
            low, stored = mid, body
        else:
            # etcd's limit, as the API server reports it: its gRPC client's 2 MiB, or etcd's own.
            said = json.dumps(body).lower()
            assert "larger than max" in said or "too large" in said, (code, body)
            high = mid
    size = len(json.dumps(stored))
    name = stored["metadata"]["name"]
    debug = dict(stored)
    debug["spec"] = {
        **stored["spec"],
        "ephemeralContainers": [{"name": "debugger", "image": "busybox:1.36", "targetContainerName": "trainer"}],
    }
    code, body, _ = real_api.call("PUT", f"/api/v1/namespaces/ml/pods/{name}/ephemeralcontainers", debug)
    print(
        f"\nlargest stored pod: {low} env entries, {size / 2**20:.2f} MiB as JSON; its debug UPDATE: HTTP {code} "
        f"(review about {2 * size / 2**20:.2f} MiB)"
    )
    assert code == 200, body
    (added,) = body["spec"]["ephemeralContainers"]
    assert added["env"] == [nvd("void")]


def test_a_storable_pod_whose_review_was_past_the_old_limit_is_judged_whole(
    real_api: RealApi, webhooks: Server
) -> None:
    """What the real API server showed and no stand-in did: a pod of 75,812 empty env entries
    is sent as 2.3 MiB and stored, yet its review at validation is past 4 MiB, the old
    maxRequestBytes, which refused it (413: fail closed, and the mutation skipped). Within the
    derived 19 MiB it is judged whole and created."""
    code, body, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", big_pod(75812, 0))
    assert code == 201, str(body.get("message", body))[:500]


def lt_pod(n: int) -> dict[str, Any]:
    """Four CPU containers with eight env values each of `n` `<`s: 6 bytes each in a review."""
    containers = [c(f"c{i}", env=[{"name": f"V{j}", "value": "<" * n} for j in range(8)]) for i in range(4)]
    p = pod(*containers)
    p["metadata"] = {"name": f"lt-{n}", "namespace": "ml"}
    return p


def raw_get(real_api: RealApi, path: str) -> bytes:
    """A GET's body as the API server wrote it (its JSON encoder, the one reviews are written with)."""
    req = urllib.request.Request(real_api.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, context=real_api.ctx, timeout=30) as r:
        body: bytes = r.read()
    return body


def test_the_largest_review_a_pod_can_cause_is_judged_whole(real_api: RealApi, webhooks: Server) -> None:
    """server.maxRequestBytes' arithmetic against the real API server: the largest pod etcd
    stores whose env values are all `<` (binary search on their length), which the API server
    writes as JSON six times larger (`\\u003c`), and its `kubectl debug` UPDATE, whose review
    carries it twice: about 18 MiB, within 2 x 6 x 1.5 MiB + 1 MiB. (At etcd's very limit the
    debug container itself would not fit: the pod debugged has 1 KiB of `<` less.) Bounds: the
    pod as JSON is over 5.5x its `<`s and at most 6x etcd's 1.5 MiB; the UPDATE is answered
    within the chart's 5 s timeout, judged whole (the debug container gets isolation's void; a
    413 would skip the mutation and the pod would be stored without it)."""

    def create(n: int) -> int:
        try:
            code, _body, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", lt_pod(n))
        except urllib.error.URLError:  # past its 3 MiB MaxRequestBodyBytes it closes the connection
            return 413
        return code

    low, high = 1024, 64 * 1024  # 32 values: 32 KiB to 2 MiB of `<`
    assert create(low) == 201
    while high - low > 16:
        mid = (low + high) // 2
        low, high = (mid, high) if create(mid) == 201 else (low, mid)
    low -= 32  # room for the debug container and its managedFields entry
    assert create(low) == 201
    name = f"lt-{low}"
    written = raw_get(real_api, f"/api/v1/namespaces/ml/pods/{name}")
    stored = json.loads(written)
    assert written.count(b"\\u003c") == 32 * low  # Go's encoder: every `<` six bytes
    debug = dict(stored)
    debug["spec"] = {
        **stored["spec"],
        "ephemeralContainers": [{"name": "debugger", "image": "busybox:1.36", "targetContainerName": "c0"}],
    }
    started = time.monotonic()
    code, body, _ = real_api.call("PUT", f"/api/v1/namespaces/ml/pods/{name}/ephemeralcontainers", debug)
    took = time.monotonic() - started
    review = 2 * len(written)  # object and oldObject, each as the API server writes the pod
    print(
        f"\nlargest `<` pod etcd stores: 32 values of {low} `<` ({32 * low} bytes), {len(written)} bytes as the "
        f"API server writes it ({len(written) / (32 * low):.2f}x); its debug UPDATE: HTTP {code} in {took:.2f} s, "
        f"review about {review / 2**20:.1f} MiB of maxRequestBytes {MAX_REQUEST_BYTES / 2**20:.0f} MiB"
    )
    assert code == 200, str(body.get("message", body))[:500]
    (added,) = body["spec"]["ephemeralContainers"]
    assert nvd("void") in added["env"]
    assert len(written) > 5.5 * 32 * low
    assert len(written) <= JSON_ESCAPE * 1536 * 1024
    assert review <= MAX_REQUEST_BYTES - REVIEW_ENVELOPE
    assert took < 5.0
