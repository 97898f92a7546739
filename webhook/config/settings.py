"""Reading a configuration: merged over DEFAULTS (unknown keys are errors, with the nearest known
key suggested), every value checked against the schema (webhook.config.schema, the chart's too)
and then by what no schema says (webhook.config.checks), and resolved once into the Settings
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

from ..policy import DEFAULT_MODES, RULE_IDS, Mode, Policy
from ..policy.rules.gpu_kinds_allowed import parse_kinds
from ..policy.vendors import AMD, NVIDIA, OTHERS
from . import checks, schema
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
class ServerSettings:
    """The config's `server` section: what the running process is built with (its transport's
    limits and deadlines, its watchers' periods). A reload compares it whole (webhook.serve.reload)."""

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

    @staticmethod
    def key(name: str) -> str:
        """The config key of a field: `idle_seconds` -> `server.idleSeconds`."""
        head, *rest = name.split("_")
        return "server." + head + "".join(part.title() for part in rest)


@dataclass(frozen=True, slots=True)
class Settings:
    """A configuration resolved for the server and the CLI: the policy the core judges by, and
    the server's own section."""

    policy: Policy
    server: ServerSettings
    # "auto": ask the API server's /version at start-up; otherwise the version is in the policy.
    cluster_version_auto: bool
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
    return from_bytes(read_file(path), str(path), environ)


def read_file(path: str | os.PathLike[str]) -> bytes:
    """A config file's bytes; a file that cannot be read is a ConfigError naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([f"cannot read file: {exc.strerror or exc}"], str(path)) from exc


def from_bytes(data: bytes, source: str = "config", environ: Mapping[str, str] | None = None) -> Settings:
    """A config file's bytes, as the server reads them at start-up and on every reload: UTF-8
    (a byte that is not is an error at its offset, never a replacement character), then YAML."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError([f"not UTF-8 at byte {exc.start} (line {line}): {exc.reason}"], source) from exc
    return from_text(text, environ=environ, source=source)


def from_text(text: str, *, environ: Mapping[str, str] | None = None, source: str = "config") -> Settings:
    """Validate a config file's text (start-up and live reload take the same path)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"], source) from exc
    return from_mapping({} if data is None else data, environ=environ, source=source)


def with_version(settings: Settings, override: str) -> Settings:
    """`settings` with the command line's --cluster-version (a version such as 1.27, or "unknown")
    in place of the file's clusterVersion."""
    if override == "unknown":
        return settings.with_cluster_version(None)
    version = parse_version(override)
    if version is None:
        raise ConfigError([f"--cluster-version: {override!r} is not a version such as 1.27"], "args")
    return settings.with_cluster_version(version)


def from_mapping(data: Any, *, environ: Mapping[str, str] | None = None, source: str = "config") -> Settings:
    """Unknown keys and bad values together, every problem in one go: unknown keys and sections
    that are no mapping first (each left at its default while the others are checked), then the
    values in the schema's key order."""
    environ = os.environ if environ is None else environ
    if not isinstance(data, Mapping):
        raise ConfigError([f"must be a mapping of keys, got {type(data).__name__}"], source)
    structure: list[str] = []  # unknown keys, sections that are no mapping
    merged = _merge(DEFAULTS, data, "", structure)
    refused = schema.problems(merged)
    found = Found({where for _, where, _ in refused}, [(at, f"{where}: {say}") for at, where, say in refused])
    settings = _build(merged, environ, found)
    if structure or found.problems or settings is None:
        raise ConfigError(structure + found.sorted(), source)
    return settings


class Found:
    """The problems so far, and which keys the schema refused (their values are not read again)."""

    def __init__(self, refused: set[str], problems: list[tuple[tuple[int, ...], str]]) -> None:
        self.refused = refused
        self.problems = problems

    def ok(self, key: str, *, items: bool = True) -> bool:
        """Whether the schema accepted `key` and everything in it (`items=False`: its own type,
        not its items', for checks that skip the items refused)."""
        inside = (key + ".", key + "[") if items else (key + ".",)
        return not any(r == key or r.startswith(inside) for r in self.refused)

    def add(self, problems: list[str]) -> None:
        """Problems from the checks beyond the schema, each "key: message"."""
        self.problems += [(schema.position(p.partition(": ")[0]), p) for p in problems]

    def sorted(self) -> list[str]:
        return [text for _, text in sorted(self.problems, key=lambda p: p[0][:2])]  # then as found


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


def _build(c: dict[str, Any], environ: Mapping[str, str], found: Found) -> Settings | None:
    """The checks no schema can say, on the keys the schema accepted; then the Settings, when
    nothing at all was wrong."""
    problems: list[str] = []
    devices, shared, companions = (
        checks.resource_patterns(problems, key, c[key], found.ok) if found.ok(key, items=False) else []
        for key in ("gpuDeviceResources", "gpuSharedResources", "gpuCompanionResources")
    )
    ns_labels: tuple[tuple[str, str], ...] = ()
    ns_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    if found.ok("gpuNamespaceSelector"):
        ns_labels, ns_expressions = checks.label_selector(problems, "gpuNamespaceSelector", c["gpuNamespaceSelector"])
    kinds_allowed: tuple[str, ...] = ()
    if found.ok("gpuKindsAllowed"):
        kinds_allowed, problem = parse_kinds(c["gpuKindsAllowed"])
        if problem:
            problems.append(f"gpuKindsAllowed: {problem}")
    custom = checks.custom_resources(c["customResources"], problems) if found.ok("customResources") else {}
    excepted = checks.exceptions(c["exceptions"], frozenset(RULE_IDS), problems) if found.ok("exceptions") else ()
    own = c["webhookNamespace"] if c["webhookNamespace"] is not None else environ.get("POD_NAMESPACE")
    if own is not None and found.ok("webhookNamespace") and not checks.NAMESPACE_NAME.fullmatch(own):
        problems.append(f"webhookNamespace: {own!r} is not a namespace name (from POD_NAMESPACE)")
    server = c["server"]
    max_bytes, inflight = server["maxRequestBytes"], server["maxInflightBytes"]
    if found.ok("server.maxRequestBytes") and found.ok("server.maxInflightBytes") and inflight < max_bytes:
        problems.append(f"server.maxInflightBytes: must be at least server.maxRequestBytes ({max_bytes})")
    found.add(problems)
    if found.problems:
        return None

    vendors = [NVIDIA, *(other for other in OTHERS if c["vendors"][other.key]["enabled"])]
    agent_images, node_labels = list(c["nodeAgentImages"]), list(c["gpuNodeLabels"])
    device_classes, runtime_classes = list(c["gpuDeviceClasses"]), list(c["gpuRuntimeClasses"])
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
    exempt = {*c["exemptNamespaces"], *([own] if own is not None else [])}  # never judge our own pods
    version = None if c["clusterVersion"] in ("auto", "unknown") else parse_version(c["clusterVersion"])
    integrations, ld, acc = c["integrations"], c["ldLibraryPath"], c["acceleratorNodeSelector"]
    seconds = {key: float(value) for key, value in server.items() if key.endswith("Seconds")}
    modes = {**DEFAULT_MODES, **{rule: Mode(mode) for rule, mode in c["rules"].items()}}
    # rollout audit: nothing denies; what would is warned of and recorded (engine.judge).
    audited = frozenset(r for r, m in modes.items() if m is Mode.DENY) if c["rollout"] == "audit" else frozenset()
    policy = Policy(
        modes={rule: Mode.WARN if rule in audited else mode for rule, mode in modes.items()},
        audited=audited,
        shared_gpu=c["sharedGpu"],
        toolkit_reads_env=c["nodeProfile"]["toolkitReadsEnv"],
        resource_name=c["gpuResourceName"],
        device_resources=tuple(devices),
        shared_resources=tuple(shared),
        companion_resources=tuple(companions),
        vendors=tuple(vendors),
        amd_runtime_env=AMD in vendors and c["vendors"]["amd"]["runtimeEnv"],
        kai=integrations["kai"]["enabled"],
        kai_schedulers=frozenset(integrations["kai"]["schedulerNames"]),
        hami=integrations["hami"]["enabled"],
        xgpu=integrations["xgpu"]["enabled"],
        exempt_namespaces=frozenset(exempt),
        exempt_service_accounts=frozenset(c["exemptServiceAccounts"]),
        exceptions=excepted,
        exempt_usernames=frozenset(c["exemptUsernames"]),
        node_agent_images=tuple(agent_images),
        gpu_node_labels=tuple(node_labels),
        gpu_runtime_classes=frozenset(runtime_classes),
        gpu_instance_types=tuple(c["gpuInstanceTypes"]),
        cluster_version=version,
        ld_library_path_enabled=ld["enabled"],
        ld_library_path=ld["path"],
        ld_library_path_when_unset=ld["whenUnset"],
        accelerator_label=acc["labelKey"],
        accelerator_default=acc["default"] or None,
        opt_out_annotation=c["optOutAnnotation"],
        isolate_non_gpu=c["isolateNonGpu"],
        custom_templates=custom,
        gpu_device_classes=frozenset(device_classes),
        gpu_max_per_pod=c["gpuMaxPerPod"],
        gpu_controller_kinds=frozenset(c["gpuControllerKinds"]),
        gpu_namespaces=frozenset(c["gpuNamespaces"]),
        gpu_namespace_labels=ns_labels,
        gpu_namespace_expressions=ns_expressions,
        gpu_kinds_allowed=kinds_allowed,
        dra_admin_namespaces=frozenset(c["draAdminAccessNamespaces"]),
        cluster=None,
    )
    return Settings(
        policy=policy,
        server=ServerSettings(
            max_request_bytes=max_bytes,
            max_connections=server["maxConnections"],
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
        ),
        cluster_version_auto=c["clusterVersion"] == "auto",
        effective=c,
    )
