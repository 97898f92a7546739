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
from enum import Enum
from fnmatch import fnmatchcase
from typing import Any

from .patch import escape

Key = str | int


class Shape(Enum):
    """What a path points at. Pod specs live in three shapes in the wild."""

    TEMPLATE = "templates"  # a PodTemplateSpec {metadata, spec}: Deployments, Kubeflow, Ray, JobSet
    POD_SPEC = "podSpecs"  # a PodSpec itself, inline: KServe's predictor, LLMInferenceService's template
    CONTAINER = "containers"  # one container-like object: KServe's model, Argo's container/script, NIMService

    @property
    def key(self) -> str:
        """The customResources key that lists paths of this shape."""
        return self.value


@dataclass(frozen=True, slots=True)
class Templates:
    """The template paths of one kind. `required` ones must exist (built-in controllers).

    `pod_specs` and `containers` hold paths of the other two shapes (never required)."""

    paths: tuple[tuple[str, ...], ...]
    required: bool = False
    pod_specs: tuple[tuple[str, ...], ...] = ()
    containers: tuple[tuple[str, ...], ...] = ()
    # For `containers`: where env and resources are, relative to each (default: env, resources).
    fields: tuple[str, str] | None = None

    def by_shape(self) -> tuple[tuple[Shape, tuple[tuple[str, ...], ...]], ...]:
        return ((Shape.TEMPLATE, self.paths), (Shape.POD_SPEC, self.pod_specs), (Shape.CONTAINER, self.containers))


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


def _crd(
    switch: str,
    group: str,
    kind: str,
    plural: str,
    *paths: str,
    pod_specs: tuple[str, ...] = (),
    containers: tuple[str, ...] = (),
    fields: tuple[str, str] | None = None,
) -> Workload:
    templates = Templates(_paths(*paths), False, _paths(*pod_specs), _paths(*containers), fields)
    return Workload(group, kind, plural, templates, switch)


# KServe's predictor shortcuts (ModelSpec and the framework specs embed a Container).
_KSERVE_MODELS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml")
_KSERVE_CONTAINERS = tuple(f"spec.predictor.{m}" for m in _KSERVE_MODELS)
# Argo Workflows: every template kind that runs containers.
_ARGO = ("container", "script", "containerSet.containers[*]", "initContainers[*]", "sidecars[*]")


def _argo(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}templates[*].{c}" for c in _ARGO)


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
    # Inference: pod specs inline, and container-like model specs.
    _crd(
        "kserve",
        "serving.kserve.io",
        "InferenceService",
        "inferenceservices",
        pod_specs=("spec.predictor", "spec.transformer", "spec.explainer"),
        containers=_KSERVE_CONTAINERS,
    ),
    _crd(
        "kserve",
        "serving.kserve.io",
        "LLMInferenceService",
        "llminferenceservices",
        pod_specs=("spec.template", "spec.worker", "spec.prefill.template", "spec.prefill.worker"),
    ),
    _crd("nim", "apps.nvidia.com", "NIMService", "nimservices", containers=("spec",)),
    # The vLLM production stack: env under vllmConfig, and `gpu: "1"` (a count of the GPU resource)
    # under deploymentConfig.resources; the operator renders them into its Deployment.
    _crd(
        "vllm",
        "production-stack.vllm.ai",
        "VLLMRuntime",
        "vllmruntimes",
        containers=("spec",),
        fields=("vllmConfig.env", "deploymentConfig.resources"),
    ),
    # Kubeflow Trainer v2: TrainJob's trainer is container-like (resourcesPerNode); runtimes hold JobSets.
    _crd("trainer", "trainer.kubeflow.org", "TrainJob", "trainjobs", containers=("spec.trainer",)),
    _crd(
        "trainer",
        "trainer.kubeflow.org",
        "TrainingRuntime",
        "trainingruntimes",
        "spec.template.spec.replicatedJobs[*].template.spec.template",
    ),
    _crd(
        "trainer",
        "trainer.kubeflow.org",
        "ClusterTrainingRuntime",
        "clustertrainingruntimes",
        "spec.template.spec.replicatedJobs[*].template.spec.template",
    ),
    # Argo Workflows.
    _crd("argo", "argoproj.io", "Workflow", "workflows", containers=_argo("spec.")),
    _crd("argo", "argoproj.io", "WorkflowTemplate", "workflowtemplates", containers=_argo("spec.")),
    _crd("argo", "argoproj.io", "ClusterWorkflowTemplate", "clusterworkflowtemplates", containers=_argo("spec.")),
    _crd("argo", "argoproj.io", "CronWorkflow", "cronworkflows", containers=_argo("spec.workflowSpec.")),
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
