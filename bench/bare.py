"""The limit for this stack: an aiohttp HTTPS server that answers every review `allowed: true`.

Same loop (uvloop when installed), same codec (orjson when installed), same TLS settings and
same body limit as gpu-policy; it parses the review only to echo the uid, which any correct
webhook must do. Whatever gpu-policy costs beyond this is ours.
"""

from __future__ import annotations

import argparse
import ssl

from aiohttp import web

from webhook.admission.review import dumps, loads
from webhook.serve.tls import new_context


async def handle(request: web.Request) -> web.Response:
    review = loads(await request.read())
    body = dumps(
        {
            "apiVersion": review["apiVersion"],
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        }
    )
    return web.Response(body=body, content_type="application/json")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cert-dir", required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    ctx: ssl.SSLContext = new_context(f"{args.cert_dir}/tls.crt", f"{args.cert_dir}/tls.key")
    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/validate", handle)
    app.router.add_post("/mutate", handle)
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=ctx, access_log=None, print=None)


if __name__ == "__main__":
    main()
