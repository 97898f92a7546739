"""Reading a configuration: merged over DEFAULTS (unknown keys are errors, with the nearest known
key suggested), every value checked (webhook.config.checks), and resolved once into the Settings
the server and the CLI run with: the Policy the core judges by, and the server's own settings.
Also the chart's values file, read as the chart renders the policy from it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..policy import DEFAULT_MODES, Mode, Policy
from ..policy.rules.gpu_kinds_allowed import parse_kinds
from ..policy.vendors import AMD, NVIDIA, OTHERS
from . import checks
from .defaults import DEFAULTS


class ConfigError(ValueError):
    """One or more problems with a configuration, each naming its key."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from any gitVersion spelling: "1.27", "v1.19.10-r0-CCE21.11.1.B006".

    `minor` from /version can read "17+", so versions are always taken from gitVersion.
    """
    match = checks.VERSION.match(text.strip())
    return (int(match[1]), int(match[2])) if match else None


@dataclass(frozen=True, slots=True)
class Settings:
    """Configuration resolved for the server and the CLI."""

    policy: Policy
    # "auto": ask the API server's /version at start-up; otherwise the version is in the policy.
    cluster_version_auto: bool
    max_request_bytes: int
    # Hostile clients (webhook.serve.transport): open connections, and request bodies being
    # received or judged (summed over connections), past which a request is answered 503.
    max_connections: int
    max_inflight_bytes: int
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
        from ..policy.templates import BUILTIN

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
        raise ConfigError([f"must be a mapping of chart values, got {checks.kind_of(values)}"], source)
    problems: list[str] = []
    webhook = values.get("webhook") or {}
    policy = values.get("policy") or {}
    if not isinstance(webhook, Mapping):
        problems.append(f"webhook: must be a mapping, got {checks.kind_of(webhook)}")
        webhook = {}
    if not isinstance(policy, Mapping):
        problems.append(f"policy: must be a mapping, got {checks.kind_of(policy)}")
        policy = {}
    excluded = webhook.get("excludedNamespaces", DEFAULTS["exemptNamespaces"])
    own = policy.get("exemptNamespaces") or []
    if not isinstance(excluded, list) or not isinstance(own, list):
        problems.append("webhook.excludedNamespaces and policy.exemptNamespaces: must be lists of namespaces")
        excluded, own = [], []
    switches = webhook.get("customResources") or {}
    if not isinstance(switches, Mapping):
        problems.append(f"webhook.customResources: must be a mapping of switches, got {checks.kind_of(switches)}")
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
                problems.append(f"{where}: must be a mapping, got {checks.kind_of(value)}")
                continue
            out[key] = _merge(default, value, f"{where}.", problems)
        else:
            out[key] = value
    return out


def _build(c: dict[str, Any], environ: Mapping[str, str], problems: list[str]) -> Settings | None:
    modes: dict[str, Mode] = {}
    allowed_modes = ", ".join(m.value for m in Mode)
    for rule, mode in c["rules"].items():
        try:
            modes[rule] = Mode(mode)
        except ValueError:
            problems.append(f"rules.{rule}: must be one of {allowed_modes}, got {mode!r}")

    checks.expect(problems, "sharedGpu", c["sharedGpu"], bool, "true or false")
    if checks.expect(problems, "gpuResourceName", c["gpuResourceName"], str, "a string") and not checks.LABEL_KEY.match(
        c["gpuResourceName"]
    ):
        problems.append(f"gpuResourceName: {c['gpuResourceName']!r} is not a valid resource name")

    devices = checks.resource_patterns(problems, "gpuDeviceResources", c["gpuDeviceResources"])
    shared = checks.resource_patterns(problems, "gpuSharedResources", c["gpuSharedResources"])
    companions = checks.resource_patterns(problems, "gpuCompanionResources", c["gpuCompanionResources"])
    vendors = [NVIDIA]
    for other in OTHERS:
        switches = c["vendors"][other.key]
        for key in switches:
            checks.expect(problems, f"vendors.{other.key}.{key}", switches[key], bool, "true or false")
        if switches["enabled"] is True:
            vendors.append(other)
    amd_isolate = AMD in vendors and c["vendors"]["amd"]["isolate"] is True
    integrations = c["integrations"]
    for name in ("kai", "hami", "xgpu"):
        checks.expect(problems, f"integrations.{name}.enabled", integrations[name]["enabled"], bool, "true or false")
    kai_schedulers = checks.string_list(
        problems, "integrations.kai.schedulerNames", integrations["kai"]["schedulerNames"]
    )
    accounts = checks.string_list(problems, "exemptServiceAccounts", c["exemptServiceAccounts"])
    for i, account in enumerate(accounts):
        ns, _, name = account.partition("/")
        if not checks.NAMESPACE_NAME.match(ns) or not checks.SUBDOMAIN.match(name):
            problems.append(f"exemptServiceAccounts[{i}]: {account!r} is not namespace/name")
    usernames = checks.string_list(problems, "exemptUsernames", c["exemptUsernames"])
    agent_images = checks.string_list(problems, "nodeAgentImages", c["nodeAgentImages"])
    node_labels = checks.names_matching(
        problems, "gpuNodeLabels", c["gpuNodeLabels"], checks.LABEL_KEY, "a valid label key"
    )
    runtime_classes = checks.string_list(problems, "gpuRuntimeClasses", c["gpuRuntimeClasses"])
    instance_types = checks.string_list(problems, "gpuInstanceTypes", c["gpuInstanceTypes"])
    admin_namespaces = checks.names_matching(
        problems, "draAdminAccessNamespaces", c["draAdminAccessNamespaces"], checks.NAMESPACE_NAME, "a namespace name"
    )
    device_classes = checks.names_matching(
        problems, "gpuDeviceClasses", c["gpuDeviceClasses"], checks.SUBDOMAIN, "a DeviceClass name"
    )
    controller_kinds = checks.string_list(problems, "gpuControllerKinds", c["gpuControllerKinds"])
    gpu_namespaces = checks.names_matching(
        problems, "gpuNamespaces", c["gpuNamespaces"], checks.NAMESPACE_NAME, "a namespace name"
    )
    ns_labels, ns_expressions = checks.label_selector(problems, "gpuNamespaceSelector", c["gpuNamespaceSelector"])
    kinds_allowed: tuple[str, ...] = ()
    if checks.expect(problems, "gpuKindsAllowed", c["gpuKindsAllowed"], list, "a list of GPU kinds"):
        kinds_allowed, problem = parse_kinds(c["gpuKindsAllowed"])
        if problem:
            problems.append(f"gpuKindsAllowed: {problem}")
    max_per_pod = c["gpuMaxPerPod"]
    if checks.expect(problems, "gpuMaxPerPod", max_per_pod, int, "a whole number of GPUs") and max_per_pod < 1:
        problems.append(f"gpuMaxPerPod: must be at least 1, got {max_per_pod}")

    exempt: set[str] = set()
    if checks.expect(problems, "exemptNamespaces", c["exemptNamespaces"], list, "a list of namespace names"):
        for i, ns in enumerate(c["exemptNamespaces"]):
            if not isinstance(ns, str) or not checks.NAMESPACE_NAME.match(ns):
                problems.append(f"exemptNamespaces[{i}]: {ns!r} is not a namespace name")
            else:
                exempt.add(ns)
    own = c["webhookNamespace"] if c["webhookNamespace"] is not None else environ.get("POD_NAMESPACE")
    if own is not None:
        if not isinstance(own, str) or not checks.NAMESPACE_NAME.match(own):
            problems.append(f"webhookNamespace: {own!r} is not a namespace name")
        else:
            exempt.add(own)  # the webhook must never judge the pods that bring it back up

    version: tuple[int, int] | None = None
    auto = False
    cv = c["clusterVersion"]
    if not isinstance(cv, str):
        problems.append(
            f'clusterVersion: must be "auto", "unknown" or a version such as "1.27", got {checks.kind_of(cv)}'
        )
    elif cv == "auto":
        auto = True
    elif cv != "unknown":
        version = parse_version(cv)
        if version is None:
            problems.append(f'clusterVersion: {cv!r} is not "auto", "unknown" or a version such as "1.27"')

    ld = c["ldLibraryPath"]
    checks.expect(problems, "ldLibraryPath.enabled", ld["enabled"], bool, "true or false")
    if checks.expect(problems, "ldLibraryPath.path", ld["path"], str, "an absolute path") and (
        not ld["path"].startswith("/") or ":" in ld["path"]
    ):
        problems.append(f"ldLibraryPath.path: {ld['path']!r} must be an absolute path without ':'")
    if ld["whenUnset"] not in ("inject", "warn"):
        problems.append(f"ldLibraryPath.whenUnset: must be inject or warn, got {ld['whenUnset']!r}")

    acc = c["acceleratorNodeSelector"]
    if checks.expect(problems, "acceleratorNodeSelector.labelKey", acc["labelKey"], str, "a label key") and not (
        checks.LABEL_KEY.match(acc["labelKey"])
    ):
        problems.append(f"acceleratorNodeSelector.labelKey: {acc['labelKey']!r} is not a valid label key")
    default = acc["default"]
    if default is not None and (not isinstance(default, str) or len(default) > 63):
        problems.append("acceleratorNodeSelector.default: must be null or a label value such as nvidia-t4")

    if checks.expect(problems, "optOutAnnotation", c["optOutAnnotation"], str, "an annotation key") and not (
        checks.LABEL_KEY.match(c["optOutAnnotation"])
    ):
        problems.append(f"optOutAnnotation: {c['optOutAnnotation']!r} is not a valid annotation key")

    checks.expect(problems, "isolateNonGpu", c["isolateNonGpu"], bool, "true or false")
    custom = checks.custom_resources(c["customResources"], problems)

    server = c["server"]
    max_bytes = server["maxRequestBytes"]
    if checks.expect(problems, "server.maxRequestBytes", max_bytes, int, "an integer") and max_bytes < 64 * 1024:
        problems.append("server.maxRequestBytes: must be at least 65536 (admission bodies reach several MiB)")
    connections, inflight = server["maxConnections"], server["maxInflightBytes"]
    if checks.expect(problems, "server.maxConnections", connections, int, "an integer") and connections < 1:
        problems.append("server.maxConnections: must be at least 1")
    if (
        checks.expect(problems, "server.maxInflightBytes", inflight, int, "an integer")
        and isinstance(max_bytes, int)
        and inflight < max_bytes
    ):
        problems.append(f"server.maxInflightBytes: must be at least server.maxRequestBytes ({max_bytes})")
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
        if checks.expect(problems, f"server.{key}", value, (int, float), "a number of seconds"):
            in_range = (low <= value if low_ok else low < value) and value <= high
            if not in_range and not (zero_ok and value == 0):
                problems.append(f"server.{key}: must be {rule}")
            seconds[key] = float(value)

    if server["clusterView"] not in ("auto", "off"):
        problems.append(f"server.clusterView: must be auto or off, got {server['clusterView']!r}")

    for other in vendors[1:]:  # the other vendors' names join the configured (NVIDIA's) lists
        for names, theirs in (
            (devices, other.devices + other.node_wide),
            (shared, other.shared),
            (companions, other.companions),
            (agent_images, other.agent_images),
            (node_labels, other.node_labels),
            (device_classes, other.device_classes),
            (runtime_classes, other.runtime_classes),
        ):
            names += [n for n in theirs if n not in names]

    if problems:
        return None
    policy = Policy(
        modes={**DEFAULT_MODES, **modes},
        shared_gpu=c["sharedGpu"],
        resource_name=c["gpuResourceName"],
        device_resources=tuple(devices),
        shared_resources=tuple(shared),
        companion_resources=tuple(companions),
        vendors=tuple(vendors),
        amd_isolate=amd_isolate,
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
        dra_admin_namespaces=frozenset(admin_namespaces),
        cluster=None,
    )
    return Settings(
        policy=policy,
        cluster_version_auto=auto,
        max_request_bytes=max_bytes,
        max_connections=connections,
        max_inflight_bytes=inflight,
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
