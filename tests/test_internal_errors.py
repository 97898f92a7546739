"""A bug inside the policy costs one request (allowed: false, code 500, uid echoed), never the server."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from tests.apiserver import ApiServer
from tests.helpers import container, pod
from webhook import admission, server
from webhook.config import from_mapping


def test_exception_in_policy_becomes_errored_review(monkeypatch) -> None:
    def broken(req, p, raw=None):  # stands in for a rule with a bug
        raise RuntimeError("boom")

    monkeypatch.setattr(admission, "validate", broken)

    async def scenario() -> None:
        app = server.create_app(from_mapping({"clusterVersion": "unknown"}))
        async with TestClient(TestServer(app)) as client:
            review = ApiServer.build(pod(container(gpu="1")))
            resp = await client.post("/validate", data=json.dumps(review), headers={"Content-Type": "application/json"})
            assert resp.status == 200
            body = await resp.json()
            assert body["response"] == {
                "uid": review["request"]["uid"],
                "allowed": False,
                "status": {"code": 500, "reason": "InternalError", "message": "gpu-policy internal error: boom"},
            }
            # the next request is served normally
            resp = await client.post("/mutate", data=json.dumps(review), headers={"Content-Type": "application/json"})
            assert (await resp.json())["response"]["allowed"] is True
            metrics = await (await client.get("/metrics")).text()
            assert 'gpu_policy_reviews_total{decision="error",webhook="validate"} 1.0' in metrics

    asyncio.run(scenario())
