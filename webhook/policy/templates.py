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


# (API group, kind) -> templates. An empty path means the object is itself a pod.
BUILTIN: dict[tuple[str, str], Templates] = {
    ("", "Pod"): Templates(((),), required=True),
    ("", "PodTemplate"): Templates(_paths("template"), required=True),
    ("", "ReplicationController"): Templates(_paths("spec.template"), required=True),
    ("apps", "Deployment"): Templates(_paths("spec.template"), required=True),
    ("apps", "ReplicaSet"): Templates(_paths("spec.template"), required=True),
    ("apps", "StatefulSet"): Templates(_paths("spec.template"), required=True),
    ("apps", "DaemonSet"): Templates(_paths("spec.template"), required=True),
    ("batch", "Job"): Templates(_paths("spec.template"), required=True),
    ("batch", "CronJob"): Templates(_paths("spec.jobTemplate.spec.template"), required=True),
    # The GPU batch world (custom resources).
    ("batch.volcano.sh", "Job"): Templates(_paths("spec.tasks[*].template")),
    ("kubeflow.org", "PyTorchJob"): Templates(_paths("spec.pytorchReplicaSpecs.*.template")),
    ("kubeflow.org", "TFJob"): Templates(_paths("spec.tfReplicaSpecs.*.template")),
    ("kubeflow.org", "MPIJob"): Templates(_paths("spec.mpiReplicaSpecs.*.template")),
    ("kubeflow.org", "XGBoostJob"): Templates(_paths("spec.xgbReplicaSpecs.*.template")),
    ("kubeflow.org", "PaddleJob"): Templates(_paths("spec.paddleReplicaSpecs.*.template")),
    ("ray.io", "RayCluster"): Templates(_paths("spec.headGroupSpec.template", "spec.workerGroupSpecs[*].template")),
    ("ray.io", "RayJob"): Templates(
        _paths("spec.rayClusterSpec.headGroupSpec.template", "spec.rayClusterSpec.workerGroupSpecs[*].template")
    ),
    ("ray.io", "RayService"): Templates(
        _paths("spec.rayClusterConfig.headGroupSpec.template", "spec.rayClusterConfig.workerGroupSpecs[*].template")
    ),
    ("jobset.x-k8s.io", "JobSet"): Templates(_paths("spec.replicatedJobs[*].template.spec.template")),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): Templates(
        _paths("spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate")
    ),
}


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
