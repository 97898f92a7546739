"""Issue 33's request-size limits against a REAL kube-apiserver v1.36 (tests/realapi.py; skipped
where it is absent), through the default chart's webhooks: the largest pod the API server stores,
and one it sends past server.maxRequestBytes. On their own (tests/conftest.py SERIAL): a review of
several MiB must be answered within the webhook's timeoutSeconds, which no other test's load may
eat into. The rest of the real API server's tests (tests/test_real_apiserver.py) bound nothing in
time and run beside the others."""

from __future__ import annotations

import json
import urllib.error
from typing import Any

import pytest

from tests.helpers import AMD_NONE, Server
from tests.realapi import RealApi, available
from tests.test_real_apiserver import c, nvd, pod, real_api, webhooks

pytestmark = pytest.mark.skipif(
    not available(), reason="no real kube-apiserver here (../shared/tools/kube-apiserver-136.sh builds one)"
)
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
    assert added["env"] == [nvd("void"), AMD_NONE]


def test_a_storable_pod_past_max_request_bytes_is_refused_never_admitted_unjudged(
    real_api: RealApi, webhooks: Server
) -> None:
    """What the real API server showed and no stand-in did: a pod of 75,812 empty env entries
    is sent as 2.3 MiB, and etcd stores pods like it up to 95,488 entries (measured with a 32 MiB
    limit), yet its review at validation is past 4 MiB. The shipped limit refuses it, fail
    closed (the validating webhook's failurePolicy), naming the webhook; such a pod needs a
    larger server.maxRequestBytes (docs/operations.md)."""
    code, body, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", big_pod(75812, 0))
    assert code == 500, body
    assert 'failed calling webhook "pods.validate.gpu-policy.io"' in body["message"]
    assert "the server responded with the status code 413" in body["message"]
