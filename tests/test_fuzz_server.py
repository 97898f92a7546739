"""Issue 33: no client-caused ERROR, ever. A structure-aware fuzz through the real server.

Every field of a few rich reviews (the envelope, and objects that reach every field the policy
reads: env, envFrom, resources, claims, securityContext, hostPaths, annotations, nodeName,
affinity, ownerReferences, init/ephemeral containers; a Deployment; a `kubectl debug`
UPDATE with its oldObject; a DRA ResourceClaim) is replaced, one at a time, by a value of every
JSON type it does not have, and the review sent to /validate and /mutate over one keep-alive
connection, as the API server would. Bound: each answer is HTTP 200 with the request's uid, or
a 4xx JSON error; a 200 is never an internal error (status code 500); the server logs no ERROR
and no traceback. tests/test_fuzz.py fuzzes the core in-process with random values; this one is
exhaustive over the fields and goes through the transport and the review layer too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from tests.apiserver import ApiServer
from tests.helpers import Server, container, nodes, pod, replace

WRONG: tuple[Any, ...] = (None, True, 7, -1.5, "x", [], [7], {}, {"x": 7})


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def rich_pod() -> dict[str, Any]:
    train = container(
        "train",
        gpu="1",
        env=[
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
            {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    )
    train["envFrom"] = [{"prefix": "APP_", "configMapRef": {"name": "settings"}}]
    train["resources"]["claims"] = [{"name": "gpu"}]
    train["securityContext"] = {"privileged": False, "capabilities": {"add": ["NET_ADMIN"]}}
    train["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    init = container("fetch", image="busybox:1.36")
    p = pod(train, initContainers=[init])
    p["metadata"]["annotations"] = {
        "devices.gke.io/container.train": "- path: /dev/nvidia0\n",
        "cdi.k8s.io/x": "nvidia.com/gpu=0",
    }
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}]
    p["spec"].update(
        {
            "nodeName": "gpu-node-1",
            "runtimeClassName": "nvidia",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "trainer",
            "hostPID": False,
            "nodeSelector": {"accelerator": "nvidia-t4"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "accelerator", "operator": "Exists"}]}]
                    }
                }
            },
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "volumes": [{"name": "data", "hostPath": {"path": "/mnt/data", "type": "Directory"}}],
        }
    )
    return p


def reviews() -> dict[str, dict[str, Any]]:
    p = rich_pod()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": "team"},
        "spec": {
            "replicas": 2,
            "template": {"metadata": {"labels": {"app": "serve"}}, "spec": copy.deepcopy(p["spec"])},
        },
    }
    debugged = copy.deepcopy(p)
    debugger = {"name": "debugger", "image": "busybox:1.36", "targetContainerName": "train"}
    debugged["spec"]["ephemeralContainers"] = [debugger]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "monitor", "namespace": "team"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}}]
            }
        },
    }
    return {
        "pod": ApiServer.build(p),
        "deployment": ApiServer.build(deployment),
        "debug": ApiServer.build(debugged, operation="UPDATE", old=p, sub_resource="ephemeralcontainers"),
        "claim": ApiServer.build(claim),
    }


def test_every_field_with_every_wrong_type_gets_an_answer_never_an_error(start_server: Callable[..., Server]) -> None:
    server = start_server({"clusterVersion": "1.27"})
    api = server.client()
    sent = 0
    outcomes: dict[str, int] = {}
    try:
        for name, base in reviews().items():
            for path in nodes(base)[1:]:
                original = base
                for key in path:
                    original = original[key]
                for value in WRONG:
                    if _kind(value) == _kind(original) and value == original:
                        continue
                    changed = replace(copy.deepcopy(base), path, copy.deepcopy(value))
                    body = json.dumps(changed).encode()
                    for route in ("/validate", "/mutate"):
                        raw = api.post(route, body)
                        sent += 1
                        where = f"{name}: {'.'.join(map(str, path))} = {value!r} on {route}"
                        assert raw.status < 500, (where, raw.status, raw.body)
                        if raw.status != 200:
                            assert raw.status in (400, 415, 422), (where, raw.status)
                            assert json.loads(raw.body)["error"], where
                            outcomes["http 4xx"] = outcomes.get("http 4xx", 0) + 1
                            continue
                        response = raw.json()["response"]
                        status = response.get("status", {})
                        assert status.get("code") != 500, (where, status)
                        if isinstance(changed.get("request"), dict) and isinstance(changed["request"].get("uid"), str):
                            assert response["uid"] == changed["request"]["uid"], where
                        label = (
                            "malformed (code 400)"
                            if status.get("code") == 400
                            else "denied"
                            if not response["allowed"]
                            else "allowed"
                        )
                        outcomes[label] = outcomes.get(label, 0) + 1
    finally:
        api.close()
    print(f"\nstructure-aware fuzz: {sent} reviews through the server: {outcomes}")
    assert sent > 3000 and outcomes.get("malformed (code 400)", 0) > 500 and outcomes.get("http 4xx", 0) > 100
    assert server.log_problems() == []
