"""Structured logs: one JSON line per denied, warned or patched review, never the object itself;
the effective config and its hash at start-up."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_values_from_the_request_are_bounded_and_cannot_forge_lines(
    fmt: str, start_server: Callable[..., Server]
) -> None:
    """Issue 33: a 1 MiB uid is one bounded line, and a newline in request.name forges no text-format line.
    Bound: the review's line under 4 KiB (values cut at 256 characters), every line a record of its own."""
    server = start_server({"clusterVersion": "1.30"}, env={"GPU_POLICY_LOG_FORMAT": fmt})
    client = server.client()
    forged = "x\n2026-12-01 00:00:00,000 ERROR gpu-policy: forged"
    try:
        review = client.build(pod(container("t", gpu=1, privileged=True), name="p"))
        review["request"]["uid"] = "u" * (1 << 20)
        review["request"]["name"] = forged
        raw = client.post("/validate", json.dumps(review).encode())
        assert raw.status == 200
    finally:
        client.close()
    time.sleep(0.2)
    text = server.log.read_text()
    longest = max(len(line) for line in text.splitlines() if "gpu-policy.review" in line)
    print(f"FIGURE {fmt} log: longest line after a 1 MiB uid {longest} chars")
    assert longest < 4096
    assert "forged" in text and not any(line.startswith("2026-12-01 00:00:00") for line in text.splitlines())
    if fmt == "json":
        (record,) = [r for r in lines(server) if r.get("logger") == "gpu-policy.review"]
        assert record["uid"].endswith("…(+1048320 chars)") and record["objectName"] == forged.replace("\n", "\\n")


def test_a_stderr_nobody_reads_never_stops_a_review(cert_dir: Path) -> None:
    """The server's stderr is a pipe the test does not read (a container runtime that fell
    behind): the pipe fills within a few hundred review lines. Bound: every one of 400 reviews
    is still answered within 1 s; once the pipe is read, the lines are there, whole, with a count
    of those the full queue dropped, and the server exits 0 with nothing lost at exit."""
    import os
    import signal
    import subprocess
    import sys

    from tests.apiserver import ApiServer
    from tests.helpers import ROOT, free_port

    port = free_port()
    cmd = [sys.executable, "-m", "webhook", "--log-level", "debug", "--log-format", "json", "serve"]
    cmd += ["--cert-dir", str(cert_dir), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ))
    api = ApiServer(port, str(cert_dir / "ca.crt"))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if api.get("/readyz").status == 200:
                    break
            except OSError:
                api.close()
                assert time.monotonic() < deadline, "not ready"
                time.sleep(0.05)
        review = ApiServer.build(pod(container("train", gpu="1")))
        slowest = 0.0
        for i in range(400):
            review["request"]["uid"] = f"uid-{i}-" + "x" * 200  # a long line each: the pipe fills sooner
            started = time.monotonic()
            assert api.review("/validate", review)["allowed"] is True
            slowest = max(slowest, time.monotonic() - started)
    finally:
        api.close()
        proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    text = out.decode()
    reviews = [json.loads(line) for line in text.splitlines() if line.startswith("{") and '"uid"' in line]
    print(f"\nstderr unread: slowest review {slowest * 1000:.0f} ms; {len(reviews)} of 400 review lines written")
    assert slowest < 1.0
    assert proc.returncode == 0
    assert len(reviews) == 400 - sum(int(n) for n in re.findall(r"(\d+) log lines dropped", text))
    assert "Traceback" not in text and text.rstrip().endswith("}")
