"""Who may use GPUs, and how many (the access rules, off by default), turned on as a platform
would: through the real server and through `gpu-policy check --config`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import ROOT, Server

CONFIG = {
    "clusterVersion": "1.30",
    "rules": {"gpu-controller-owned": "deny", "gpu-max-per-pod": "deny"},
    "gpuMaxPerPod": 4,
}

# A data scientist's notebook started as a bare pod (the pattern kyverno#13879 wants stopped).
NOTEBOOK = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "jupyter-gpu", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11",
                "ports": [{"containerPort": 8888}],
                "resources": {"limits": {"nvidia.com/gpu": 1}},
            }
        ]
    },
}


def as_job_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The same pod as the Job controller creates it: generateName and a controller reference."""
    out = json.loads(json.dumps(pod))
    out["metadata"] = {
        "generateName": "train-",
        "namespace": "team-a",
        "labels": {"batch.kubernetes.io/job-name": "train"},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "3b1c", "controller": True,
             "blockOwnerDeletion": True}
        ],
    }  # fmt: skip
    out["spec"]["restartPolicy"] = "Never"
    return out


# The EKS p4d sample: one trainer with all 8 GPUs of the node.
EIGHT = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "nccl-allreduce", "namespace": "team-a"},
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "trainer",
                        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}},
                    }
                ],
            }
        }
    },
}


def test_through_the_server(start_server: Callable[..., Server]) -> None:
    server = start_server(CONFIG)
    client = server.client()
    try:
        bare = client.validate(NOTEBOOK)
        assert bare["allowed"] is False
        assert "gpu-controller-owned (pod: metadata.ownerReferences names no controller" in bare["status"]["message"]
        assert client.validate(as_job_pod(NOTEBOOK))["allowed"] is True
        eight = client.validate(EIGHT)
        assert eight["allowed"] is False
        assert (
            "ask for 8 GPU devices (its containers together): more than the 4 one pod may have"
            in (eight["status"]["message"])
        )
    finally:
        client.close()


def test_through_check(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    manifests = tmp_path / "m.yaml"
    manifests.write_text(yaml.safe_dump_all([NOTEBOOK, as_job_pod(NOTEBOOK), EIGHT]))
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "--config", str(config), "-o", "json", str(manifests)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    results = json.loads(r.stdout)["results"]
    assert [[v["rule"] for v in x["violations"]] for x in results] == [
        ["gpu-controller-owned"],
        [],
        ["gpu-max-per-pod"],
    ]
