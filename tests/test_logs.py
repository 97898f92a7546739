"""Structured logs: one JSON line per denied, warned or patched review, never the object itself;
the effective config and its hash at start-up."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.helpers import Server, container, pod


def lines(server: Server) -> list[dict[str, Any]]:
    out = []
    for line in server.log.read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_json_review_lines_and_start_up_config(start_server: Callable[..., Server]) -> None:
    server = start_server({"clusterVersion": "1.30"}, env={"GPU_POLICY_LOG_FORMAT": "json"})
    secret = {"name": "API_TOKEN", "value": "s3cr3t-value"}
    denied = pod(container("t", gpu=1, privileged=True, env=[secret]), name="bad")
    voided = pod(container("web"), name="web")
    clean = pod(container("t", gpu=1), name="ok")
    client = server.client()
    try:
        assert client.validate(denied, dry_run=True)["allowed"] is False
        response, _ = client.mutate(voided)
        assert "patch" in response
        client.validate(clean)
    finally:
        client.close()
    time.sleep(0.2)
    records = lines(server)
    assert records, server.log.read_text()
    start = next(r for r in records if r.get("message", "").startswith("effective config"))
    assert start["config"]["clusterVersion"] == "1.30" and len(start["configSha256"]) == 64
    reviews = [r for r in records if r.get("logger") == "gpu-policy.review"]
    assert [(r["webhook"], r["decision"], r["objectName"]) for r in reviews] == [
        ("validate", "denied", "bad"),
        ("mutate", "patched", "web"),
    ], "allowed reviews log at debug only"
    bad = reviews[0]
    assert bad["rules"] == ["no-privileged-gpu"] and bad["modes"] == ["deny"]
    assert bad["dryRun"] is True and bad["user"] == "kubernetes-admin" and bad["namespace"] == "ml"
    assert bad["kind"] == "Pod" and bad["operation"] == "CREATE" and bad["latencyMs"] >= 0
    assert {"uid", "time", "level"} <= set(bad)
    assert "s3cr3t-value" not in server.log.read_text(), "the object is never logged"


def test_a_pod_not_named_yet_is_logged_by_its_generate_name(start_server: Callable[..., Server]) -> None:
    """What a ReplicaSet creates: no name yet, a generateName; the line says whose pod it is."""
    server = start_server({"clusterVersion": "1.30"})
    unnamed = pod(container("t", gpu=1, privileged=True), name="")
    unnamed["metadata"]["generateName"] = "train-7d9f8b6c4-"
    client = server.client()
    try:
        assert client.validate(unnamed)["allowed"] is False
    finally:
        client.close()
    time.sleep(0.2)
    assert "validate CREATE Pod ml/train-7d9f8b6c4-…: denied" in server.log.read_text()
