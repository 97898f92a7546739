"""The one place configuration is defined, defaulted and validated.

A config file is YAML with the keys in `DEFAULTS`. Unknown keys and bad values stop
start-up with every problem listed at once, each naming its key path: a typo that is
silently ignored is a policy that is silently off.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .policy import DEFAULT_MODES, Mode, Policy
from .policy.rules.gpu_kinds_allowed import parse_kinds
from .policy.templates import Shape, Templates, parse_path

# Every key, with its default: the one place defaults are written. `make generate` derives the
# README's configuration reference and the chart's values.yaml `policy` block from it (with
# COMMENTS), and the rule modes come from the registry.
DEFAULTS: dict[str, Any] = {
    "rules": {rule: mode.value for rule, mode in DEFAULT_MODES.items()},
    "sharedGpu": True,
    "gpuResourceName": "nvidia.com/gpu",
    "gpuDeviceResources": [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
        "nvidia.com/*.shared",
        "deviceclass.resource.kubernetes.io/*",
    ],
    "gpuSharedResources": ["nvidia.com/*.shared"],
    "gpuCompanionResources": [
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "volcano.sh/gpu-mem.128Mi",
        "volcano.sh/gpu-core.percentage",
    ],
    "integrations": {
        "kai": {"enabled": False, "schedulerNames": ["kai-scheduler"]},
        "hami": {"enabled": False},
        "xgpu": {"enabled": False},
    },
    # The chart's webhook.excludedNamespaces default is the same list (tests/test_chart.py), so
    # `gpu-policy check` judges exactly the namespaces an installed chart judges.
    "exemptNamespaces": ["kube-system", "kube-public", "kube-node-lease", "gpu-operator", "nvidia-device-plugin"],
    "exemptServiceAccounts": [],
    "exemptUsernames": [],
    "nodeAgentImages": ["nvcr.io/nvidia/"],
    "gpuNodeLabels": [
        "cloud.google.com/gke-accelerator",
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.product",
        "k8s.amazonaws.com/accelerator",
    ],
    "gpuRuntimeClasses": ["nvidia", "nvidia-legacy", "nvidia-cdi"],
    # The NVIDIA DRA driver's classes for whole GPUs and MIG devices (its ComputeDomain classes
    # hand out IMEX channels, not GPUs).
    "gpuDeviceClasses": ["gpu.nvidia.com", "mig.nvidia.com"],
    "gpuNamespaces": [],
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
    "customResources": [],
    "server": {
        "maxRequestBytes": 8 * 1024 * 1024,
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
    "rules": "mode per rule: deny | warn | audit | off",
    "sharedGpu": "allow shares of one GPU (0 < x < 1); false: whole GPUs only",
    "gpuResourceName": "the device plugin's GPU resource",
    "gpuDeviceResources": "device-plugin resources that are GPUs (MIG, shared, DRA extended); one * per name",
    "gpuSharedResources": "of those, time-sliced/MPS slots: at most 1 per container (the device plugin refuses more)",
    "gpuCompanionResources": "resources that imply a GPU without a device resource (HAMi, xGPU)",
    "integrations.kai.enabled": "KAI Scheduler fraction pods: the NVIDIA_VISIBLE_DEVICES KAI injects is allowed",
    "integrations.kai.schedulerNames": "schedulerName values of KAI's pods",
    "integrations.hami.enabled": "HAMi: nvidia.com/gpucores <= 100, gpumem > 0 and gpumem-percentage <= 100 checked",
    "integrations.xgpu.enabled": "CCE xGPU: gpu-mem.128Mi, gpu-core.percentage (steps of 5), no mix with the GPU",
    "exemptNamespaces": "allowed untouched, never mutated",
    "exemptServiceAccounts": "[namespace/name]: pods running as these service accounts are allowed untouched",
    "exemptUsernames": "requests by these users (request.userInfo.username) are allowed untouched",
    "nodeAgentImages": "image prefixes of GPU node agents: voided non-exempt agents get a warning",
    "gpuNodeLabels": "node labels that mark GPU nodes, besides acceleratorNodeSelector.labelKey",
    "gpuRuntimeClasses": "runtime classes that give a pod every GPU (the GPU operator's management classes)",
    "gpuDeviceClasses": "DRA DeviceClasses that are GPUs: with the cluster view, claims of other classes are not",
    "gpuInstanceTypes": "prefixes of node.kubernetes.io/instance-type values of GPU machines (nodeSelector)",
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
    "customResources": "[{group: x.example.com, kind: Trainer, templates: ['spec.stages[*].template'], "
    "containers: ['spec.steps[*].container']}]; podSpecs: inline pod specs",
    "server.maxRequestBytes": "admission bodies reach several MiB; larger bodies get HTTP 413",
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

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class ConfigError(ValueError):
    """One or more problems with a configuration, each naming its key."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from any gitVersion spelling: "1.27", "v1.19.10-r0-CCE21.11.1.B006".

    `minor` from /version can read "17+", so versions are always taken from gitVersion.
    """
    match = _VERSION.match(text.strip())
    return (int(match[1]), int(match[2])) if match else None


@dataclass(frozen=True, slots=True)
class Settings:
    """Configuration resolved for the server and the CLI."""

    policy: Policy
    # "auto": ask the API server's /version at start-up; otherwise the version is in the policy.
    cluster_version_auto: bool
    max_request_bytes: int
    cert_reload_seconds: float
    config_reload_seconds: float  # 0: only on SIGHUP
    # After SIGTERM: report not-ready but keep serving this long, so the API server stops
    # sending reviews here before the listener closes (endpoint changes take a moment).
    drain_seconds: float
    # Slow or hostile clients (webhook.serve.transport): idle keep-alive connections close after
    # idle_seconds, half-sent headers after header_seconds; a body still incomplete after
    # body_seconds gets 408; a client that stops reading is cut off after write_seconds.
    idle_seconds: float
    body_seconds: float
    header_seconds: float
    write_seconds: float
    cluster_version_seconds: float  # clusterVersion auto: how often /version is read again; 0: once
    cluster_view: bool  # watch nodes and DRA objects when a cluster is reachable (webhook.cluster.view)
    # Every key with its value after defaults: what start-up logs (the config holds no secrets).
    effective: Mapping[str, Any] = field(default_factory=dict)

    def with_cluster_version(self, version: tuple[int, int] | None) -> Settings:
        return replace(self, policy=replace(self.policy, cluster_version=version), cluster_version_auto=False)


@cache
def _shipped() -> Settings:
    return from_mapping({}, environ={})


def default_policy(**changes: Any) -> Policy:
    """The policy that ships (every default), with `changes` (Policy field names) applied.

    `modes` is merged into the shipped modes: name only the rules whose mode changes.
    """
    shipped = _shipped().policy
    if "modes" in changes:
        changes["modes"] = {**shipped.modes, **changes["modes"]}
    return replace(shipped, **changes)


@dataclass(frozen=True, slots=True)
class ChartView:
    """What an installed chart (a Helm values file) does: the policy its ConfigMap holds, and
    which objects its webhook configurations send at all, so `gpu-policy check --values` judges
    exactly as the cluster would. Mirrors templates/_helpers.tpl (gpu-policy.config) and the
    webhook rules; tests/test_chart_values.py compares both with helm's own rendering."""

    settings: Settings
    custom_resources: frozenset[str]  # webhook.customResources switches that are on
    pods: bool  # webhook.validatingPods.enabled
    workloads: bool  # webhook.validatingWorkloads.enabled
    mutating: bool  # webhook.mutating.enabled

    def not_sent(self, group: str, kind: str, *, mutate: bool = False) -> str | None:
        """Why the chart's webhooks never send this kind to gpu-policy, or None when they do."""
        from .policy.templates import BUILTIN

        if mutate:
            return None if self.mutating else "not sent: webhook.mutating.enabled is false"
        if (group, kind) == ("", "Pod"):
            return None if self.pods else "not sent: webhook.validatingPods.enabled is false"
        if not self.workloads:
            return "not sent: webhook.validatingWorkloads.enabled is false"
        workload = BUILTIN.get((group, kind))
        if workload is not None and workload.chart_switch and workload.chart_switch not in self.custom_resources:
            return f"not sent: webhook.customResources.{workload.chart_switch} is false"
        return None


def from_chart_values(values: Any, release_namespace: str, source: str) -> ChartView:
    """The ChartView of a Helm values file (the chart's defaults for what it leaves out)."""
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ConfigError([f"must be a mapping of chart values, got {_kind(values)}"], source)
    problems: list[str] = []
    webhook = values.get("webhook") or {}
    policy = values.get("policy") or {}
    if not isinstance(webhook, Mapping):
        problems.append(f"webhook: must be a mapping, got {_kind(webhook)}")
        webhook = {}
    if not isinstance(policy, Mapping):
        problems.append(f"policy: must be a mapping, got {_kind(policy)}")
        policy = {}
    excluded = webhook.get("excludedNamespaces", DEFAULTS["exemptNamespaces"])
    own = policy.get("exemptNamespaces") or []
    if not isinstance(excluded, list) or not isinstance(own, list):
        problems.append("webhook.excludedNamespaces and policy.exemptNamespaces: must be lists of namespaces")
        excluded, own = [], []
    switches = webhook.get("customResources") or {}
    if not isinstance(switches, Mapping):
        problems.append(f"webhook.customResources: must be a mapping of switches, got {_kind(switches)}")
        switches = {}

    def enabled(section: str) -> bool:
        part = webhook.get(section) or {}
        return not isinstance(part, Mapping) or part.get("enabled", True) is not False

    if problems:
        raise ConfigError(problems, source)
    config = {
        **policy,
        "exemptNamespaces": list(dict.fromkeys([*own, *excluded])),
        "webhookNamespace": release_namespace,
    }
    settings = from_mapping(config, environ={}, source=f"{source}: policy")
    return ChartView(
        settings=settings,
        custom_resources=frozenset(k for k, v in switches.items() if v is True),
        pods=enabled("validatingPods"),
        workloads=enabled("validatingWorkloads"),
        mutating=enabled("mutating"),
    )


def load_chart_values(path: str, release_namespace: str) -> ChartView:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror or exc}"], path) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"], path) from exc
    return from_chart_values(data, release_namespace, path)


def load(path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate a config file; None means all defaults."""
    environ = os.environ if environ is None else environ
    if path is None:
        return from_mapping({}, environ=environ)
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror or exc}"], source) from exc
    return from_text(text, environ=environ, source=source)


def from_text(text: str, *, environ: Mapping[str, str] | None = None, source: str = "config") -> Settings:
    """Validate a config file's text (start-up and live reload take the same path)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"], source) from exc
    return from_mapping({} if data is None else data, environ=environ, source=source)


def from_mapping(data: Any, *, environ: Mapping[str, str] | None = None, source: str = "config") -> Settings:
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    if not isinstance(data, Mapping):
        raise ConfigError([f"must be a mapping of keys, got {type(data).__name__}"], source)
    # Unknown keys and bad values together, every problem in one go: a key that is not known is
    # left at its default while the others are checked.
    merged = _merge(DEFAULTS, data, "", problems)
    settings = _build(merged, environ, problems)
    if problems or settings is None:
        raise ConfigError(problems, source)
    return settings


def _merge(defaults: Mapping[str, Any], given: Mapping[str, Any], prefix: str, problems: list[str]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in given.items():
        where = f"{prefix}{key}"
        if key not in defaults:
            hint = difflib.get_close_matches(str(key), list(defaults), n=1)
            problems.append(f"{where}: unknown key" + (f" (did you mean {prefix}{hint[0]}?)" if hint else ""))
            continue
        default = defaults[key]
        if isinstance(default, dict):
            if not isinstance(value, Mapping):
                problems.append(f"{where}: must be a mapping, got {_kind(value)}")
                continue
            out[key] = _merge(default, value, f"{where}.", problems)
        else:
            out[key] = value
    return out


def _kind(value: Any) -> str:
    """What was found, value included: `str 'yes'`, `int 1`, `null`, `list ['a']` (shortened)."""
    if value is None:
        return "null"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 60 else shown[:57] + '...'}"


def _expect(problems: list[str], key: str, value: Any, kind: type | tuple[type, ...], what: str) -> bool:
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        problems.append(f"{key}: must be {what}, got {_kind(value)}")
        return False
    if not isinstance(value, kind):
        problems.append(f"{key}: must be {what}, got {_kind(value)}")
        return False
    return True


def _build(c: dict[str, Any], environ: Mapping[str, str], problems: list[str]) -> Settings | None:
    modes: dict[str, Mode] = {}
    allowed_modes = ", ".join(m.value for m in Mode)
    for rule, mode in c["rules"].items():
        try:
            modes[rule] = Mode(mode)
        except ValueError:
            problems.append(f"rules.{rule}: must be one of {allowed_modes}, got {mode!r}")

    _expect(problems, "sharedGpu", c["sharedGpu"], bool, "true or false")
    if _expect(problems, "gpuResourceName", c["gpuResourceName"], str, "a string") and not _LABEL_KEY.match(
        c["gpuResourceName"]
    ):
        problems.append(f"gpuResourceName: {c['gpuResourceName']!r} is not a valid resource name")

    devices = _resource_patterns(problems, "gpuDeviceResources", c["gpuDeviceResources"])
    shared = _resource_patterns(problems, "gpuSharedResources", c["gpuSharedResources"])
    companions = _resource_patterns(problems, "gpuCompanionResources", c["gpuCompanionResources"])
    integrations = c["integrations"]
    for name in ("kai", "hami", "xgpu"):
        _expect(problems, f"integrations.{name}.enabled", integrations[name]["enabled"], bool, "true or false")
    kai_schedulers = _strings(problems, "integrations.kai.schedulerNames", integrations["kai"]["schedulerNames"])
    accounts = _strings(problems, "exemptServiceAccounts", c["exemptServiceAccounts"])
    for i, account in enumerate(accounts):
        ns, _, name = account.partition("/")
        if not _NAMESPACE.match(ns) or not _SUBDOMAIN.match(name):
            problems.append(f"exemptServiceAccounts[{i}]: {account!r} is not namespace/name")
    usernames = _strings(problems, "exemptUsernames", c["exemptUsernames"])
    agent_images = _strings(problems, "nodeAgentImages", c["nodeAgentImages"])
    node_labels = _names(problems, "gpuNodeLabels", c["gpuNodeLabels"], _LABEL_KEY, "a valid label key")
    runtime_classes = _strings(problems, "gpuRuntimeClasses", c["gpuRuntimeClasses"])
    instance_types = _strings(problems, "gpuInstanceTypes", c["gpuInstanceTypes"])
    device_classes = _names(problems, "gpuDeviceClasses", c["gpuDeviceClasses"], _SUBDOMAIN, "a DeviceClass name")
    controller_kinds = _strings(problems, "gpuControllerKinds", c["gpuControllerKinds"])
    gpu_namespaces = _names(problems, "gpuNamespaces", c["gpuNamespaces"], _NAMESPACE, "a namespace name")
    ns_labels, ns_expressions = _label_selector(problems, "gpuNamespaceSelector", c["gpuNamespaceSelector"])
    kinds_allowed: tuple[str, ...] = ()
    if _expect(problems, "gpuKindsAllowed", c["gpuKindsAllowed"], list, "a list of GPU kinds"):
        kinds_allowed, problem = parse_kinds(c["gpuKindsAllowed"])
        if problem:
            problems.append(f"gpuKindsAllowed: {problem}")
    max_per_pod = c["gpuMaxPerPod"]
    if _expect(problems, "gpuMaxPerPod", max_per_pod, int, "a whole number of GPUs") and max_per_pod < 1:
        problems.append(f"gpuMaxPerPod: must be at least 1, got {max_per_pod}")

    exempt: set[str] = set()
    if _expect(problems, "exemptNamespaces", c["exemptNamespaces"], list, "a list of namespace names"):
        for i, ns in enumerate(c["exemptNamespaces"]):
            if not isinstance(ns, str) or not _NAMESPACE.match(ns):
                problems.append(f"exemptNamespaces[{i}]: {ns!r} is not a namespace name")
            else:
                exempt.add(ns)
    own = c["webhookNamespace"] if c["webhookNamespace"] is not None else environ.get("POD_NAMESPACE")
    if own is not None:
        if not isinstance(own, str) or not _NAMESPACE.match(own):
            problems.append(f"webhookNamespace: {own!r} is not a namespace name")
        else:
            exempt.add(own)  # the webhook must never judge the pods that bring it back up

    version: tuple[int, int] | None = None
    auto = False
    cv = c["clusterVersion"]
    if not isinstance(cv, str):
        problems.append(f'clusterVersion: must be "auto", "unknown" or a version such as "1.27", got {_kind(cv)}')
    elif cv == "auto":
        auto = True
    elif cv != "unknown":
        version = parse_version(cv)
        if version is None:
            problems.append(f'clusterVersion: {cv!r} is not "auto", "unknown" or a version such as "1.27"')

    ld = c["ldLibraryPath"]
    _expect(problems, "ldLibraryPath.enabled", ld["enabled"], bool, "true or false")
    if _expect(problems, "ldLibraryPath.path", ld["path"], str, "an absolute path") and (
        not ld["path"].startswith("/") or ":" in ld["path"]
    ):
        problems.append(f"ldLibraryPath.path: {ld['path']!r} must be an absolute path without ':'")
    if ld["whenUnset"] not in ("inject", "warn"):
        problems.append(f"ldLibraryPath.whenUnset: must be inject or warn, got {ld['whenUnset']!r}")

    acc = c["acceleratorNodeSelector"]
    if _expect(problems, "acceleratorNodeSelector.labelKey", acc["labelKey"], str, "a label key") and not (
        _LABEL_KEY.match(acc["labelKey"])
    ):
        problems.append(f"acceleratorNodeSelector.labelKey: {acc['labelKey']!r} is not a valid label key")
    default = acc["default"]
    if default is not None and (not isinstance(default, str) or len(default) > 63):
        problems.append("acceleratorNodeSelector.default: must be null or a label value such as nvidia-t4")

    if _expect(problems, "optOutAnnotation", c["optOutAnnotation"], str, "an annotation key") and not (
        _LABEL_KEY.match(c["optOutAnnotation"])
    ):
        problems.append(f"optOutAnnotation: {c['optOutAnnotation']!r} is not a valid annotation key")

    _expect(problems, "isolateNonGpu", c["isolateNonGpu"], bool, "true or false")
    custom = _custom_resources(c["customResources"], problems)

    server = c["server"]
    max_bytes = server["maxRequestBytes"]
    if _expect(problems, "server.maxRequestBytes", max_bytes, int, "an integer") and max_bytes < 64 * 1024:
        problems.append("server.maxRequestBytes: must be at least 65536 (admission bodies reach several MiB)")
    # server.* periods: (key, lowest, highest, lowest allowed itself, 0 allowed too, what to say)
    seconds: dict[str, float] = {}
    for key, low, high, low_ok, zero_ok, rule in (
        ("certReloadSeconds", 0, 3600, False, False, "between 0 and 3600"),
        ("configReloadSeconds", 0, 3600, True, True, "between 0 and 3600"),
        ("idleSeconds", 0.1, 3600, True, False, "between 0.1 and 3600"),
        ("headerSeconds", 0.1, 60, True, False, "between 0.1 and 60"),
        ("bodySeconds", 0.1, 60, True, False, "between 0.1 and 60"),
        ("writeSeconds", 0.1, 300, True, False, "between 0.1 and 300"),
        ("clusterVersionSeconds", 1, 86400, True, True, "0 or between 1 and 86400"),
        ("drainSeconds", 0, 300, True, True, "between 0 and 300"),
    ):
        value = server[key]
        if _expect(problems, f"server.{key}", value, (int, float), "a number of seconds"):
            in_range = (low <= value if low_ok else low < value) and value <= high
            if not in_range and not (zero_ok and value == 0):
                problems.append(f"server.{key}: must be {rule}")
            seconds[key] = float(value)

    if server["clusterView"] not in ("auto", "off"):
        problems.append(f"server.clusterView: must be auto or off, got {server['clusterView']!r}")

    if problems:
        return None
    policy = Policy(
        modes={**DEFAULT_MODES, **modes},
        shared_gpu=c["sharedGpu"],
        resource_name=c["gpuResourceName"],
        device_resources=tuple(devices),
        shared_resources=tuple(shared),
        companion_resources=tuple(companions),
        kai=integrations["kai"]["enabled"],
        kai_schedulers=frozenset(kai_schedulers),
        hami=integrations["hami"]["enabled"],
        xgpu=integrations["xgpu"]["enabled"],
        exempt_namespaces=frozenset(exempt),
        exempt_service_accounts=frozenset(accounts),
        exempt_usernames=frozenset(usernames),
        node_agent_images=tuple(agent_images),
        gpu_node_labels=tuple(node_labels),
        gpu_runtime_classes=frozenset(runtime_classes),
        gpu_instance_types=tuple(instance_types),
        cluster_version=version,
        ld_library_path_enabled=ld["enabled"],
        ld_library_path=ld["path"],
        ld_library_path_when_unset=ld["whenUnset"],
        accelerator_label=acc["labelKey"],
        accelerator_default=default or None,
        opt_out_annotation=c["optOutAnnotation"],
        isolate_non_gpu=c["isolateNonGpu"],
        custom_templates=custom,
        gpu_device_classes=frozenset(device_classes),
        gpu_max_per_pod=max_per_pod if isinstance(max_per_pod, int) else 0,
        gpu_controller_kinds=frozenset(controller_kinds),
        gpu_namespaces=frozenset(gpu_namespaces),
        gpu_namespace_labels=ns_labels,
        gpu_namespace_expressions=ns_expressions,
        gpu_kinds_allowed=kinds_allowed,
        cluster=None,
    )
    return Settings(
        policy=policy,
        cluster_version_auto=auto,
        max_request_bytes=max_bytes,
        cert_reload_seconds=seconds["certReloadSeconds"],
        config_reload_seconds=seconds["configReloadSeconds"],
        drain_seconds=seconds["drainSeconds"],
        idle_seconds=seconds["idleSeconds"],
        body_seconds=seconds["bodySeconds"],
        header_seconds=seconds["headerSeconds"],
        write_seconds=seconds["writeSeconds"],
        cluster_version_seconds=seconds["clusterVersionSeconds"],
        cluster_view=server["clusterView"] == "auto",
        effective=c,
    )


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _label_selector(
    problems: list[str], key: str, value: Any
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, tuple[str, ...]], ...]]:
    """A Kubernetes label selector (matchLabels, matchExpressions), or null: (pairs, expressions)."""
    if value is None:
        return (), ()
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be null or a label selector (matchLabels, matchExpressions), got {_kind(value)}")
        return (), ()
    for extra in sorted(set(value) - {"matchLabels", "matchExpressions"}):
        problems.append(f"{key}.{extra}: unknown key (a label selector has matchLabels and matchExpressions)")
    pairs: list[tuple[str, str]] = []
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        problems.append(f"{key}.matchLabels: must be a mapping of label keys to values, got {_kind(labels)}")
        labels = {}
    for k, v in labels.items():
        if not isinstance(k, str) or not _LABEL_KEY.match(k) or not isinstance(v, str):
            problems.append(f"{key}.matchLabels: {k!r}: {v!r} is not a label key and a string value")
        else:
            pairs.append((k, v))
    expressions: list[tuple[str, str, tuple[str, ...]]] = []
    found = value.get("matchExpressions") or []
    if not isinstance(found, list):
        problems.append(f"{key}.matchExpressions: must be a list, got {_kind(found)}")
        found = []
    for i, e in enumerate(found):
        where = f"{key}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or e.get("operator") not in _OPERATORS:
            problems.append(f"{where}: must have a key and an operator of {', '.join(_OPERATORS)}, got {e!r}")
            continue
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(f"{where}.values: must be a list of strings, got {_kind(values)}")
            continue
        if (e["operator"] in ("In", "NotIn")) != bool(values):
            problems.append(f"{where}: In and NotIn need values, Exists and DoesNotExist take none")
            continue
        expressions.append((e["key"], e["operator"], tuple(values)))
    return tuple(pairs), tuple(expressions)


def _names(problems: list[str], key: str, value: Any, pattern: re.Pattern[str], what: str) -> list[str]:
    """`_strings` whose items must also match `pattern` (label keys, object names)."""
    out = _strings(problems, key, value)
    for i, name in enumerate(out):
        if not pattern.match(name):
            problems.append(f"{key}[{i}]: {name!r} is not {what}")
    return out


def _strings(problems: list[str], key: str, value: Any) -> list[str]:
    """A list of non-empty strings, each bad item reported with its index."""
    if not _expect(problems, key, value, list, "a list of strings"):
        return []
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item:
            out.append(item)
        else:
            problems.append(f"{key}[{i}]: must be a non-empty string, got {item!r}")
    return out


def _resource_patterns(problems: list[str], key: str, value: Any) -> list[str]:
    """Resource names, each with at most one * (fnmatch: nvidia.com/mig-* matches every MIG profile)."""
    if not _expect(problems, key, value, list, "a list of resource names"):
        return []
    out = []
    for i, name in enumerate(value):
        bare = name.replace("*", "x", 1) if isinstance(name, str) else ""
        if name.count("*") > 1 or "/" not in bare or not _LABEL_KEY.match(bare) if bare else True:
            problems.append(f"{key}[{i}]: {name!r} is not a domain-qualified resource name (one * allowed)")
        else:
            out.append(name)
    return out


_CR_KEYS = ("group", "kind", "templates", "podSpecs", "containers")


def _custom_resources(value: Any, problems: list[str]) -> dict[tuple[str, str], Templates]:
    """customResources: [{group, kind, templates|podSpecs|containers: [path, ...]}] -> the table.

    Three shapes, as pod specs live in the wild: `templates` ({metadata, spec}: Kubeflow, Ray),
    `podSpecs` (a PodSpec inline: KServe's predictor), `containers` (one container-like object:
    Argo's container, KServe's model). At least one list is required.
    """
    out: dict[tuple[str, str], Templates] = {}
    if not _expect(problems, "customResources", value, list, "a list of {group, kind, templates}"):
        return out
    shapes = tuple(shape.key for shape in Shape)
    for i, item in enumerate(value):
        where = f"customResources[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: must be a mapping with group, kind and templates, podSpecs or containers")
            continue
        for key in item:
            if key not in _CR_KEYS:
                hint = difflib.get_close_matches(str(key), _CR_KEYS, n=1)
                problems.append(f"{where}.{key}: unknown key" + (f" (did you mean {where}.{hint[0]}?)" if hint else ""))
        group, kind = item.get("group", ""), item.get("kind")
        if not isinstance(group, str):
            problems.append(f'{where}.group: must be a string ("" for the core group)')
        if not isinstance(kind, str) or not kind:
            problems.append(f"{where}.kind: is required")
        found: dict[str, tuple[tuple[str, ...], ...]] = {}
        for key in shapes:
            texts = item.get(key)
            if texts is None:
                continue
            if not isinstance(texts, list) or not texts:
                problems.append(f"{where}.{key}: must be a non-empty list of paths such as spec.tasks[*].template")
                continue
            paths = []
            for j, text in enumerate(texts):
                try:
                    paths.append(parse_path(text if isinstance(text, str) else ""))
                except ValueError as exc:
                    problems.append(f"{where}.{key}[{j}]: {exc}")
            found[key] = tuple(paths)
        if not any(key in item for key in shapes):
            problems.append(f"{where}: needs templates, podSpecs or containers (paths such as spec.tasks[*].template)")
        if isinstance(group, str) and isinstance(kind, str) and kind:
            out[(group, kind)] = Templates(
                found.get("templates", ()),
                pod_specs=found.get("podSpecs", ()),
                containers=found.get("containers", ()),
            )
    return out
