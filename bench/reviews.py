"""Realistic AdmissionReviews: pods as a Deployment's ReplicaSet creates them.

Several containers, dozens of env vars, volumes, probes, owner references and the defaults
the API server fills in (3-20 KB each); GPU and non-GPU, allowed and denied, mutated and not.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

GPU = "nvidia.com/gpu"


def _env(n: int, prefix: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": f"{prefix}_{i}", "value": f"value-{i}-" + "x" * (i % 20)} for i in range(n)]
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}})
    env.append({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}})
    return env


def _container(name: str, *, env: int, gpu: str | None = None, **extra: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": "2", "memory": "4Gi"}
    requests: dict[str, Any] = {"cpu": "500m", "memory": "2Gi"}
    if gpu is not None:
        limits[GPU] = gpu
        requests[GPU] = gpu  # defaulting copies limits into requests for Pods
    c: dict[str, Any] = {
        "name": name,
        "image": f"registry.example.com/team/{name}:1.8.3",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c"],
        "args": [f"exec /app/{name} --port=8080 --metrics-port=9090 --log-level=info"],
        "ports": [
            {"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        ],
        "env": _env(env, name.upper().replace("-", "_")),
        # A GPU container's envFrom carries a prefix: unprefixed, a key there could override the
        # device plugin's NVIDIA_VISIBLE_DEVICES (visible-devices-envfrom denies it).
        "envFrom": [{"configMapRef": {"name": f"{name}-config"}, **({"prefix": "APP_"} if gpu is not None else {})}],
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app", "readOnly": True},
            {"name": "data", "mountPath": "/data"},
            {
                "name": "kube-api-access-x7k2p",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            },
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "initialDelaySeconds": 10,
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
    }
    c.update(extra)
    return c


def pod(
    containers: list[dict[str, Any]], *, name: str = "trainer", node_selector: dict[str, str] | None = None
) -> dict:
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "config", "configMap": {"name": f"{name}-config", "defaultMode": 420}},
            {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}},
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                },
            },
        ],
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": name,
        "serviceAccount": name,
        "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-7d9f8b6c5d-",
            "namespace": "ml",
            "labels": {"app.kubernetes.io/name": name, "pod-template-hash": "7d9f8b6c5d", "team": "research"},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{name}-7d9f8b6c5d",
                    "uid": str(uuid.UUID(int=7)),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def review(obj: dict[str, Any], uid: int) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.UUID(int=uid)),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": str(uuid.UUID(int=99)),
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def pods() -> dict[str, dict[str, Any]]:
    """Named pods covering the mix; sizes from about 3 KB to 20 KB."""
    gpu_ok = pod([_container("trainer", env=12, gpu="1"), _container("log-shipper", env=6)])
    gpu_denied = pod(
        [
            _container("trainer", env=12, gpu="1", securityContext={"privileged": True}),
            _container("helper", env=4),
        ]
    )
    gpu_denied["spec"]["containers"][1]["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    shared = pod(
        [_container("notebook", env=8, gpu="500m")], name="notebook", node_selector={"accelerator": "nvidia-t4"}
    )
    web = pod([_container("web", env=10), _container("envoy", env=4), _container("oauth-proxy", env=4)], name="web")
    small = pod([_container("api", env=3)], name="api")
    big = pod([_container(f"worker-{i}", env=14, gpu="1" if i < 2 else None) for i in range(6)], name="batch")
    # Issue 34's /mutate case: a GPU trainer with 20 env entries, a sidecar, an init container; the
    # patch touches all three (the trainer's LD_LIBRARY_PATH, the others' isolation) and the nodeSelector.
    three = pod([_container("trainer", env=20, gpu="1"), _container("log-shipper", env=6)])
    three["spec"]["initContainers"] = [_container("fetch-weights", env=4)]
    return {
        "gpu-mutated": gpu_ok,
        "gpu-denied": gpu_denied,
        "gpu-shared": shared,
        "cpu-web": web,
        "cpu-small": small,
        "gpu-big": big,
        "gpu-3c": three,
    }


def bodies() -> dict[str, bytes]:
    return {name: json.dumps(review(p, i + 1)).encode() for i, (name, p) in enumerate(pods().items())}


def wide_pod(n: int = 20) -> dict[str, Any]:
    """The worst case for the policy core: many containers, each with env and a GPU share."""
    return pod([_container(f"c{i}", env=10, gpu="1" if i % 2 else None) for i in range(n)], name="wide")
