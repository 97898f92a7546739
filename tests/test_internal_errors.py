"""A bug inside the policy costs one request (allowed: false, code 500, uid echoed), never the server."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import aiohttp

from tests.apiserver import ApiServer
from tests.helpers import container, pod
from webhook import admission
from webhook.serve import server
from webhook.serve.reload import activate
from webhook.serve.tls import new_context


def test_exception_in_policy_becomes_errored_review(monkeypatch, cert_dir: Path) -> None:
    def broken(req, p, raw=None):  # stands in for a rule with a bug
        raise RuntimeError("boom")

    monkeypatch.setattr(admission, "validate", broken)

    async def scenario() -> None:
        # In process (the monkeypatch must reach the handler), over real TLS on a loopback port.
        webhook = server.Webhook(activate(b"clusterVersion: unknown\n"))
        http = await server.serve(webhook, "127.0.0.1", 0, new_context(cert_dir / "tls.crt", cert_dir / "tls.key"))
        plain = await server.serve_metrics(webhook, "127.0.0.1", 0)
        client_tls = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        base = f"https://127.0.0.1:{http.port}"
        headers = {"Content-Type": "application/json", "Host": "gpu-policy.gpu-policy.svc"}
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as client:
                review = ApiServer.build(pod(container(gpu="1")))
                resp = await client.post(
                    f"{base}/validate?timeout=10s",
                    data=json.dumps(review),
                    headers=headers,
                    server_hostname="gpu-policy.gpu-policy.svc",
                )
                assert resp.status == 200
                body = await resp.json()
                assert body["response"] == {
                    "uid": review["request"]["uid"],
                    "allowed": False,
                    "status": {"code": 500, "reason": "InternalError", "message": "gpu-policy internal error: boom"},
                }
                # the next request is served normally
                resp = await client.post(
                    f"{base}/mutate",
                    data=json.dumps(review),
                    headers=headers,
                    server_hostname="gpu-policy.gpu-policy.svc",
                )
                assert (await resp.json())["response"]["allowed"] is True
                resp = await client.get(f"http://127.0.0.1:{plain.port}/metrics")
                metrics = await resp.text()
                assert 'gpu_policy_reviews_total{decision="error",webhook="validate"} 1.0' in metrics
        finally:
            await plain.stop(1.0)
            await server.shutdown(webhook, http, 1.0)

    asyncio.run(scenario())
