"""Where pod templates live: built-in controllers and the custom resources of the GPU batch world.

A template path is written as dotted keys, with `[*]` for every item of a list, `*` for
every value of a map, and shell-style globs in a key (`*ReplicaSpecs`). Custom resources
never get upstream pod validation until their controller creates pods (a mismatch then
surfaces only in a controller log), so their templates are the ones that most need us.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from .patch import escape

Key = str | int


@dataclass(frozen=True, slots=True)
class Templates:
    """The template paths of one kind. `required` ones must exist (built-in controllers)."""

    paths: tuple[tuple[str, ...], ...]
    required: bool = False


def parse_path(text: str) -> tuple[str, ...]:
    """ "spec.tasks[*].template" -> ("spec", "tasks", "[*]", "template")."""
    if not text or not re.fullmatch(r"[A-Za-z0-9_*?\-]+(\[\*\])?(\.[A-Za-z0-9_*?\-]+(\[\*\])?)*", text):
        raise ValueError(f"{text!r} is not a template path such as spec.tasks[*].template")
    out: list[str] = []
    for part in text.split("."):
        if part.endswith("[*]"):
            out += [part[:-3], "[*]"]
        else:
            out.append(part)
    return tuple(out)


def _paths(*texts: str) -> tuple[tuple[str, ...], ...]:
    return tuple(parse_path(t) for t in texts)


@dataclass(frozen=True, slots=True)
class Workload:
    """A kind whose objects hold pod templates, and what the chart needs to route it to us."""

    group: str
    kind: str
    plural: str  # the resource name webhook rules use
    templates: Templates
    # "" for built-in kinds (always sent to the workloads webhook); otherwise the key under the
    # chart's webhook.customResources that switches the CRD group on (the CRD may not exist).
    chart_switch: str = ""


def _builtin(group: str, kind: str, plural: str, *paths: str) -> Workload:
    return Workload(group, kind, plural, Templates(_paths(*paths), required=True))


def _crd(switch: str, group: str, kind: str, plural: str, *paths: str) -> Workload:
    return Workload(group, kind, plural, Templates(_paths(*paths)), switch)


# An empty path means the object is itself a pod. Order: the README and the chart list them so.
WORKLOADS: tuple[Workload, ...] = (
    Workload("", "Pod", "pods", Templates(((),), required=True)),
    _builtin("", "PodTemplate", "podtemplates", "template"),
    _builtin("", "ReplicationController", "replicationcontrollers", "spec.template"),
    _builtin("apps", "Deployment", "deployments", "spec.template"),
    _builtin("apps", "ReplicaSet", "replicasets", "spec.template"),
    _builtin("apps", "StatefulSet", "statefulsets", "spec.template"),
    _builtin("apps", "DaemonSet", "daemonsets", "spec.template"),
    _builtin("batch", "Job", "jobs", "spec.template"),
    _builtin("batch", "CronJob", "cronjobs", "spec.jobTemplate.spec.template"),
    # The GPU batch world (custom resources).
    _crd("volcano", "batch.volcano.sh", "Job", "jobs", "spec.tasks[*].template"),
    _crd("kubeflow", "kubeflow.org", "PyTorchJob", "pytorchjobs", "spec.pytorchReplicaSpecs.*.template"),
    _crd("kubeflow", "kubeflow.org", "TFJob", "tfjobs", "spec.tfReplicaSpecs.*.template"),
    _crd("kubeflow", "kubeflow.org", "MPIJob", "mpijobs", "spec.mpiReplicaSpecs.*.template"),
    _crd("kubeflow", "kubeflow.org", "XGBoostJob", "xgboostjobs", "spec.xgbReplicaSpecs.*.template"),
    _crd("kubeflow", "kubeflow.org", "PaddleJob", "paddlejobs", "spec.paddleReplicaSpecs.*.template"),
    _crd(
        "ray",
        "ray.io",
        "RayCluster",
        "rayclusters",
        "spec.headGroupSpec.template",
        "spec.workerGroupSpecs[*].template",
    ),
    _crd(
        "ray",
        "ray.io",
        "RayJob",
        "rayjobs",
        "spec.rayClusterSpec.headGroupSpec.template",
        "spec.rayClusterSpec.workerGroupSpecs[*].template",
    ),
    _crd(
        "ray",
        "ray.io",
        "RayService",
        "rayservices",
        "spec.rayClusterConfig.headGroupSpec.template",
        "spec.rayClusterConfig.workerGroupSpecs[*].template",
    ),
    _crd("jobset", "jobset.x-k8s.io", "JobSet", "jobsets", "spec.replicatedJobs[*].template.spec.template"),
    _crd(
        "leaderworkerset",
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        "leaderworkersets",
        "spec.leaderWorkerTemplate.leaderTemplate",
        "spec.leaderWorkerTemplate.workerTemplate",
    ),
)

BUILTIN: dict[tuple[str, str], Workload] = {(w.group, w.kind): w for w in WORKLOADS}


def expand(obj: Any, pattern: tuple[str, ...]) -> Iterator[tuple[Key, ...]]:
    """Every concrete key path in `obj` that `pattern` matches, in document order.

    Missing keys and wrong types simply match nothing here; for required templates the
    caller walks the path itself and names what is missing.
    """

    def walk(node: Any, i: int, prefix: tuple[Key, ...]) -> Iterator[tuple[Key, ...]]:
        if i == len(pattern):
            yield prefix
            return
        seg = pattern[i]
        if seg == "[*]":
            if isinstance(node, list):
                for n, item in enumerate(node):
                    yield from walk(item, i + 1, (*prefix, n))
        elif isinstance(node, dict):
            if "*" in seg or "?" in seg:
                for key, value in node.items():
                    if isinstance(key, str) and fnmatchcase(key, seg):
                        yield from walk(value, i + 1, (*prefix, key))
            elif seg in node:
                yield from walk(node[seg], i + 1, (*prefix, seg))

    yield from walk(obj, 0, ())


def field_path(keys: tuple[Key, ...]) -> str:
    """("spec", "tasks", 0, "template") -> "spec.tasks[0].template"."""
    out = ""
    for k in keys:
        if isinstance(k, int):
            out += f"[{k}]"
        else:
            out = f"{out}.{k}" if out else k
    return out


def pointer(keys: tuple[Key, ...]) -> str:
    """("spec", "nodeSelector", "a/b") -> "/spec/nodeSelector/a~1b" (RFC 6901)."""
    return "".join("/" + (str(k) if isinstance(k, int) else escape(k)) for k in keys)
