"""The shipped configuration: every key with its default (DEFAULTS) and the one-line comment the
chart's values.yaml and docs/configuration.md carry for it (COMMENTS). The one description of the
configuration: webhook.buildtime.generate derives the chart's values and the docs from it, and
webhook.config.settings validates against it (an unknown key is an error).
"""

from __future__ import annotations

from typing import Any, Final

from ..policy import DEFAULT_MODES
from ..policy.vendors import NVIDIA, VENDORS

# The largest AdmissionReview the API server sends for a Pod it can admit, from its own limits:
# - etcd stores an object of at most ETCD_MAX_REQUEST_BYTES, 1.5 MiB (its --max-request-bytes
#   default; a Pod is stored as protobuf, its strings byte for byte). A review is sent for an
#   object before it is stored, but one past that is then refused by etcd: it is never admitted.
# - The API server writes the review's JSON with Go's encoder, which escapes `<`, `>` and `&` as
#   `\u003c` (and an invalid UTF-8 byte or a control character as `\ufffd`, `\u0001`): one
#   stored byte can be JSON_ESCAPE = 6 bytes in the review. Nothing else grows more per byte in
#   bulk (field names cost a few bytes per field in either form), so an object as JSON is at most
#   6 x 1.5 MiB = 9 MiB: a Pod whose containers' env values are all `<`.
# - An UPDATE (a `kubectl debug`'s ephemeralcontainers update too) carries the object and the
#   stored oldObject: 2 x 9 MiB = 18 MiB (18,874,368 bytes).
# - REVIEW_ENVELOPE, 1 MiB, covers the rest of the review: uid, kinds, resources, name and
#   namespace (a few hundred bytes), the options, and userInfo (groups and extra, a few KiB).
# So 2 x 6 x 1.5 MiB + 1 MiB = 19 MiB (19,922,944 bytes). MaxRequestBodyBytes, the API server's
# 3 MiB limit on what a client sends, bounds none of this (the old default was 3 MiB + 1 MiB):
# the review is not the request. A JSON body of 3 MiB of raw `<` is an 18 MiB object in its
# review, and defaulting fills in a hundred bytes for each `{}` container; but such an object is
# past etcd's limit, so its 413 here admits nothing (with failurePolicy Ignore it goes unmutated
# to etcd, which refuses it). An etcd with a larger --max-request-bytes needs 12 x it + 1 MiB.
ETCD_MAX_REQUEST_BYTES: Final = 1536 * 1024
JSON_ESCAPE: Final = 6
REVIEW_ENVELOPE: Final = 1024 * 1024
MAX_REQUEST_BYTES: Final = 2 * JSON_ESCAPE * ETCD_MAX_REQUEST_BYTES + REVIEW_ENVELOPE

# Every key, with its default: the one place defaults are written. `make generate` derives the
# README's configuration reference and the chart's values.yaml `policy` block from it (with
# COMMENTS), and the rule modes come from the registry.
DEFAULTS: dict[str, Any] = {
    "rollout": "enforce",
    "rules": {rule: mode.value for rule, mode in DEFAULT_MODES.items()},
    "sharedGpu": True,
    "gpuResourceName": NVIDIA.resource,
    "gpuDeviceResources": list(NVIDIA.devices),
    "gpuSharedResources": list(NVIDIA.shared),
    "gpuCompanionResources": list(NVIDIA.companions),
    # The other vendors' names (webhook.policy.vendors) are added to the lists above when on.
    "vendors": {
        "amd": {"enabled": True, "runtimeEnv": False},
        "intel": {"enabled": True},
    },
    "integrations": {
        "kai": {"enabled": False, "schedulerNames": ["kai-scheduler"]},
        "hami": {"enabled": False},
        "xgpu": {"enabled": False},
    },
    # The chart's webhook.excludedNamespaces default is the same list (tests/test_chart.py), so
    # `gpu-policy check` judges exactly the namespaces an installed chart judges: Kubernetes' own,
    # then every vendor's node agents (webhook.policy.vendors).
    "exemptNamespaces": [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        *(ns for vendor in VENDORS for ns in vendor.agent_namespaces),
    ],
    "exemptServiceAccounts": [],
    "exemptUsernames": [],
    # Exceptions with an owner and an end: named rules not applied in a namespace (to the pods
    # with some labels) until a date; {name, namespace, rules, owner, reason, expires, podLabels}.
    "exceptions": [],
    "nodeAgentImages": list(NVIDIA.agent_images),
    "gpuNodeLabels": list(NVIDIA.node_labels),
    "gpuRuntimeClasses": list(NVIDIA.runtime_classes),
    "gpuDeviceClasses": list(NVIDIA.device_classes),
    "gpuNamespaces": [],
    "draAdminAccessNamespaces": [],
    "gpuNamespaceSelector": None,
    "gpuMaxPerPod": 8,
    # The kinds that isolate (whole cards, MIG slices, DRA claims); the sharing kinds, which share a
    # card's memory or faults, where a namespace's gpu-policy.io/gpu-kinds annotation allows them.
    "gpuKindsAllowed": ["whole", "mig", "dra"],
    # The controllers whose pods end (Jobs and the training operators' kinds) or serve (ReplicaSets
    # and StatefulSets under Deployments, LeaderWorkerSets, KServe), as ownerReferences name them.
    "gpuControllerKinds": [
        "Job",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "TrainJob",
        "RayCluster",
        "RayJob",
        "Workflow",
        "LeaderWorkerSet",
    ],
    # node.kubernetes.io/instance-type values of GPU machine families (AWS p/g, GCP a2/a3/g2, Azure N).
    "gpuInstanceTypes": [
        "p3.",
        "p3dn.",
        "p4d.",
        "p4de.",
        "p5.",
        "p5e.",
        "p5en.",
        "g4dn.",
        "g5.",
        "g5g.",
        "g6.",
        "g6e.",
        "a2-",
        "a3-",
        "g2-",
        "Standard_NC",
        "Standard_ND",
        "Standard_NV",
    ],
    "webhookNamespace": None,
    "clusterVersion": "auto",
    "ldLibraryPath": {"enabled": True, "path": "/usr/local/nvidia/lib64", "whenUnset": "inject"},
    "acceleratorNodeSelector": {"labelKey": "accelerator", "default": None},
    "optOutAnnotation": "gpu-policy.io/mutate",
    "isolateNonGpu": True,
    # What the GPU nodes' NVIDIA runtime reads from a container (docs/policy.md, "The boundary").
    "nodeProfile": {"toolkitReadsEnv": True},
    "customResources": [],
    "server": {
        "maxRequestBytes": MAX_REQUEST_BYTES,
        "maxConnections": 1000,
        # One largest review received while another is judged (webhook.serve.transport: a large
        # body that does not fit waits its turn instead of a 503); the chart's memory limit holds
        # that beside the costliest parse (docs/operations.md has the measured peaks).
        "maxInflightBytes": 2 * MAX_REQUEST_BYTES,
        "certReloadSeconds": 10.0,
        "configReloadSeconds": 5.0,
        "drainSeconds": 5.0,
        "idleSeconds": 120.0,
        "headerSeconds": 10.0,
        "bodySeconds": 10.0,
        "writeSeconds": 10.0,
        "clusterVersionSeconds": 300.0,
        "clusterView": "auto",
    },
}


# One line per key for the generated YAML (README and values.yaml); keys of nested mappings
# are dotted. A key without a comment fails `make generate`.
COMMENTS: dict[str, str] = {
    "rollout": "enforce: every rule in its mode. audit: no rule denies; each deny rule warns and records "
    "an audit annotation instead (install in audit, read what it reports, then enforce)",
    "rules": "mode per rule: deny | warn | audit | off",
    "sharedGpu": "allow shares of one GPU (0 < x < 1); false: whole GPUs only",
    "gpuResourceName": "the device plugin's GPU resource",
    "gpuDeviceResources": "device-plugin resources that are GPUs (MIG, shared, DRA extended); one * per name",
    "gpuSharedResources": "of those, time-sliced/MPS slots: at most 1 per container (the device plugin refuses more)",
    "gpuCompanionResources": "resources that imply a GPU without a device resource (HAMi, xGPU)",
    "vendors.amd.enabled": "AMD GPUs (amd.com/gpu, partitions, AMD_VISIBLE_DEVICES): their names join the lists above",
    "vendors.amd.runtimeEnv": "nodes run the AMD Container Runtime, which reads AMD_VISIBLE_DEVICES and "
    "DOCKER_RESOURCE_* from container env: isolation adds AMD_VISIBLE_DEVICES=none (with isolateNonGpu) and "
    "amd-runtime-envfrom judges envFrom; off, neither touches a pod (the AMD GPU operator does not install that "
    "runtime)",
    "vendors.intel.enabled": "Intel GPUs (gpu.intel.com/i915, xe; monitoring only for exempt agents)",
    "integrations.kai.enabled": "KAI Scheduler fraction pods: the NVIDIA_VISIBLE_DEVICES KAI injects is allowed",
    "integrations.kai.schedulerNames": "schedulerName values of KAI's pods",
    "integrations.hami.enabled": "HAMi: nvidia.com/gpucores <= 100, gpumem > 0 and gpumem-percentage <= 100 checked",
    "integrations.xgpu.enabled": "CCE xGPU: gpu-mem.128Mi, gpu-core.percentage (steps of 5), no mix with the GPU",
    "exemptNamespaces": "allowed untouched, never mutated",
    "exemptServiceAccounts": "[namespace/name]: pods running as these service accounts are allowed untouched",
    "exceptions": '[{name, namespace, rules: [rule ids], owner, reason, expires: "YYYY-MM-DD", podLabels: {}}]: '
    "the rules named are not applied in the namespace (to pods with all podLabels) through expires (UTC); "
    "after it they apply again, the message says so, and gpu-policy audit lists it",
    "exemptUsernames": "requests by these users (request.userInfo.username) are allowed untouched",
    "nodeAgentImages": "image prefixes of GPU node agents: voided non-exempt agents get a warning",
    "gpuNodeLabels": "node labels that mark GPU nodes, besides acceleratorNodeSelector.labelKey",
    "gpuRuntimeClasses": "runtime classes that give a pod every GPU (the GPU operator's management classes)",
    "gpuDeviceClasses": "DRA DeviceClasses that are GPUs: with the cluster view, claims of other classes are not",
    "gpuInstanceTypes": "prefixes of node.kubernetes.io/instance-type values of GPU machines (nodeSelector)",
    "draAdminAccessNamespaces": "dra-admin-access: namespaces whose DRA claims may ask for adminAccess (devices in "
    "use by other pods); elsewhere such a claim is flagged",
    "gpuNamespaces": "gpu-namespace-allowed: namespaces that may run GPU pods, by name",
    "gpuNamespaceSelector": "gpu-namespace-allowed: {matchLabels: {...}, matchExpressions: [...]} of namespaces "
    "that may run GPU pods (labels from the cluster view; unknown namespaces fail closed)",
    "gpuMaxPerPod": "gpu-max-per-pod: GPU devices one pod may ask for (containers summed, or the largest init)",
    "gpuControllerKinds": "gpu-controller-owned: ownerReferences kinds that may own a GPU pod (Volcano's is Job)",
    "gpuKindsAllowed": "gpu-kinds-allowed: GPU kinds a pod may use unless its namespace's gpu-policy.io/gpu-kinds "
    "annotation says: whole, shared, time-sliced, mig[:profile glob], dra[:device class glob]",
    "webhookNamespace": "the webhook's own namespace, always exempt; default: $POD_NAMESPACE",
    "clusterVersion": 'auto (read /version at start-up) | unknown | "1.27" | "v1.19.10-r0-CCE21.11.1.B006"',
    "ldLibraryPath.enabled": "below v1.28: GPU containers find the driver on LD_LIBRARY_PATH",
    "ldLibraryPath.path": "where the driver is mounted",
    "ldLibraryPath.whenUnset": "inject | warn",
    "acceleratorNodeSelector.labelKey": "the node label that names the GPU model",
    "acceleratorNodeSelector.default": "e.g. nvidia-t4; null: no default GPU model",
    "optOutAnnotation": 'pods annotated <key>: "false" skip the conveniences, never isolation',
    "isolateNonGpu": "NVIDIA_VISIBLE_DEVICES=void for containers that request no GPU",
    "nodeProfile.toolkitReadsEnv": "the GPU nodes' NVIDIA runtime takes device requests from a container's env (its "
    "default: accept-nvidia-visible-devices-envvar-when-unprivileged, IMEX and gated variables); false where it "
    "takes them only from the device plugin (cdi-cri or volume-mounts strategy, envvar ignored, CDI mode), which "
    "lets GPU containers load ConfigMaps and Secrets with envFrom (visible-devices-envfrom is then silent)",
    "customResources": "[{group: x.example.com, kind: Trainer, templates: ['spec.stages[*].template'], "
    "containers: ['spec.steps[*].container']}]; podSpecs: inline pod specs; not Pod (judged as itself)",
    "server.maxRequestBytes": "the largest review the API server sends for a pod etcd can store: an UPDATE's "
    "object and oldObject, each 6 x etcd's 1.5 MiB (a `<` is 6 bytes as JSON), + 1 MiB; larger bodies get HTTP 413",
    "server.maxConnections": "open connections at most (the API servers pool a few dozen); more are answered 503",
    "server.maxInflightBytes": "bodies past 64 KiB being received or judged at once, summed (at least "
    "maxRequestBytes); one past it waits its turn while the API server waits (503 only past 1 per 1.5 MiB waiting)",
    "server.certReloadSeconds": "how often tls.crt/tls.key are checked for a new pair",
    "server.configReloadSeconds": "how often this file is checked for changes (SIGHUP: at once); 0: never",
    "server.drainSeconds": "after SIGTERM: not-ready but still serving this long (Ctrl-C: no wait)",
    "server.idleSeconds": "keep-alive connections idle this long are closed (above the API server's 90 s)",
    "server.headerSeconds": "a request's headers (or a new connection's first) not complete this long: closed",
    "server.bodySeconds": "a request body not complete this long after its headers gets HTTP 408",
    "server.writeSeconds": "a client that reads none of its answers this long is disconnected",
    "server.clusterVersionSeconds": "clusterVersion auto: /version is read again this often (upgrades); 0: once",
    "server.clusterView": "auto (watch nodes, DRA claims when a cluster is reachable) | off: pre-flight rules silent",
}
