"""The admission port's HTTP/1.1 (webhook.serve.transport, aiohttp) against the edges well-meaning clients
really hit, over real TLS to the server process: chunked bodies, routes, HEAD, content types. What an
attacker sends (and the limits) is tests/test_http_hostile.py."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.helpers import Server
from tests.rawhttp import HOST, chunked, exchange, post, responses, review

LIMITS = {"clusterVersion": "1.30", "server": {"maxRequestBytes": 65536, "idleSeconds": 2.0, "bodySeconds": 1.0}}


@pytest.fixture(scope="module")
def small(start_server: Callable[..., Server]) -> Server:
    return start_server(LIMITS)


def test_chunked_body_is_read_and_judged(small: Server) -> None:
    request = (
        b"POST /validate HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked(review(), 100)
    )
    [(status, _h, answer)] = responses(exchange(small, request, wait=1.0)[0])
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True


def test_unknown_path_and_wrong_method(small: Server) -> None:
    raw, _ = exchange(
        small, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /validate HTTP/1.1\r\nHost: x\r\n\r\n", wait=1.0
    )
    (missing, _h, _b), (wrong, headers, _b2) = responses(raw)
    assert missing == 404 and wrong == 405 and headers["allow"] == "POST"


def test_head_has_headers_and_no_body(small: Server) -> None:
    raw, _ = exchange(small, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", wait=0.5)
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 2" in head and rest == b""


def test_missing_content_type_is_415(small: Server) -> None:
    body = review()
    request = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    [(status, _h, answer)] = responses(exchange(small, request, wait=0.5)[0])
    assert status == 415 and "got 'application/octet-stream'" in json.loads(answer)["error"]


def test_content_type_parameters_and_case_are_accepted(small: Server) -> None:
    request = post(review()).replace(
        b"Content-Type: application/json", b"content-type: Application/JSON; charset=utf-8"
    )
    [(status, _h, answer)] = responses(exchange(small, request, wait=0.5)[0])
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True
