"""Small builders for pods and workloads, so each test states only what it is about."""

from __future__ import annotations

import copy
from typing import Any

GPU = "nvidia.com/gpu"


def container(
    name: str = "main",
    *,
    gpu: Any = None,
    request: Any = None,
    env: list[dict[str, Any]] | None = None,
    privileged: bool | None = None,
    caps: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", **extra}
    resources: dict[str, Any] = {}
    if gpu is not None:
        resources["limits"] = {GPU: gpu}
    if request is not None:
        resources["requests"] = {GPU: request}
    if resources:
        c["resources"] = resources
    if env is not None:
        c["env"] = env
    sc: dict[str, Any] = {}
    if privileged is not None:
        sc["privileged"] = privileged
    if caps is not None:
        sc["capabilities"] = {"add": caps}
    if sc:
        c["securityContext"] = sc
    return c


def pod(*containers: dict[str, Any], name: str = "p", namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": list(containers) or [container()], **spec},
    }


def wrap(p: dict[str, Any], kind: str) -> dict[str, Any]:
    """The pod's metadata and spec as the template of a workload of `kind`."""
    template = {"metadata": {"labels": {"app": "x"}}, "spec": copy.deepcopy(p["spec"])}
    meta = {"name": "w", "namespace": p["metadata"].get("namespace", "ml")}
    selector = {"matchLabels": {"app": "x"}}
    if kind == "Pod":
        return copy.deepcopy(p)
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "template": template}
    if kind == "ReplicationController":
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"selector": {"app": "x"}, "template": template},
        }
    if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        spec: dict[str, Any] = {"selector": selector, "template": template}
        if kind == "StatefulSet":
            spec["serviceName"] = "w"
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "Job":
        template["spec"].setdefault("restartPolicy", "Never")
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": {"template": template}}
    if kind == "CronJob":
        template["spec"].setdefault("restartPolicy", "Never")
        return {
            "apiVersion": "batch/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}},
        }
    raise ValueError(kind)


SPEC_PATH = {
    "Pod": "spec",
    "PodTemplate": "template.spec",
    "ReplicationController": "spec.template.spec",
    "Deployment": "spec.template.spec",
    "ReplicaSet": "spec.template.spec",
    "StatefulSet": "spec.template.spec",
    "DaemonSet": "spec.template.spec",
    "Job": "spec.template.spec",
    "CronJob": "spec.jobTemplate.spec.template.spec",
}
