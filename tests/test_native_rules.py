"""Issue 35: the rules with a CEL twin as ValidatingAdmissionPolicies, and their agreement with the webhook.

The chart renders each twin (webhook/policy/rules, rule.NativeRule) as a ValidatingAdmissionPolicy
and a binding whose action is the rule's mode, when `enforcement` is both or native. cel-python
evaluates them as the API server does (tests/celnative.py), on the pod as the mutating stage left
it (the webhook's own patch applied, which the MutatingAdmissionPolicy equals: tests/test_native.py).
For every corpus pod, the edge shapes below and the adversary property's generated pods, a twin
fails exactly when its rule finds a violation, and for a pod with one finding it says the
webhook's sentence. Each rule also has a policy per built-in template path (cel.ROOTS), judged
here against the workloads webhook over every corpus controller and the edge shapes as templates.
tests/test_real_apiserver.py runs the same policies in a real API server.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import jsonpatch
import pytest
import yaml
from hypothesis import given, settings

from tests.apiserver import ApiServer
from tests.celnative import ValidatingPolicy, compile_validations, request
from tests.chart import find, render
from tests.helpers import GPU, container, corpus, pod
from webhook.admission import mutate, validate
from webhook.admission.review import parse
from webhook.config import from_mapping
from webhook.policy import ALL_RULES, OBJECT_RULES, RULES, Mode

TWINS = sorted(r.id for r in RULES if r.native is not None)
RULES_BY_ID = {r.id: r for r in RULES}
# What the shipped values install (a rule that is off has no policy), and on templates too.
SHIPPED = sorted(r.id for r in RULES if r.native is not None and r.default_mode is not Mode.OFF)
ON_TEMPLATES = sorted(r.id for r in RULES if r.native is not None and r.id in SHIPPED and r.native.roots != ("pod",))
Compiled = dict[str, tuple[ValidatingPolicy, list[str]]]


class Cache:
    """Rendered and compiled once per config (kept out of Hypothesis' arguments)."""

    by_config: ClassVar[dict[str, Compiled]] = {}


def twins(config: dict[str, Any], tmp: Path) -> Compiled:
    key = repr(sorted(config.items()))
    if key not in Cache.by_config:
        Cache.by_config[key] = compile_validations({"policy": config} if config else {}, tmp)
    return Cache.by_config[key]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    return twins({}, tmp_path_factory.mktemp("vap"))


def served(node: Any, key: str = "") -> Any:
    """`node` as the API server sends it to admission: every resource quantity a string (a YAML
    `nvidia.com/gpu: 1` is decoded into a resource.Quantity and served as "1"), so the webhook
    quotes the same text the policy's message does. (The API server also canonicalises the
    spelling, "1000m" as "1"; both engines see the same text either way.)"""
    if isinstance(node, dict):
        if key in ("limits", "requests"):
            return {k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in node.items()}
        return {k: served(v, k) for k, v in node.items()}
    if isinstance(node, list):
        return [served(v) for v in node]
    return node


def through_the_webhook(obj: dict[str, Any], config: dict[str, Any], namespace: str, user: str) -> tuple[Any, Any]:
    """The pod as the validating stage sees it (the webhook's /mutate patch applied), and the
    webhook's /validate outcome for it."""
    obj = served(obj)
    policy = from_mapping({"clusterVersion": "1.36", **config}, environ={}).policy
    patched = mutate(parse(ApiServer.build(obj, namespace=namespace, user=user)), policy)
    stored = jsonpatch.apply_patch(copy.deepcopy(obj), list(patched.ops))
    return stored, validate(parse(ApiServer.build(stored, namespace=namespace, user=user)), policy)


def agree(compiled: Compiled, obj: dict[str, Any], config: dict[str, Any] | None = None, **kw: Any) -> set[str]:
    """The twins fail exactly where their rules find violations; one finding, one sentence.
    Returns the rules that fired."""
    namespace = kw.get("namespace") or obj.get("metadata", {}).get("namespace") or "ml"
    user = kw.get("user", "alice")
    stored, outcome = through_the_webhook(obj, config or {}, namespace, user)
    found = [v for vs in outcome.verdict.by_mode.values() for v in vs] if outcome.verdict else []
    webhook = {v.rule for v in found if v.rule in compiled}
    failures = {rule: vap.failures(stored, request(namespace, user)) for rule, (vap, _actions) in compiled.items()}
    native = {rule for rule, messages in failures.items() if messages}
    if (stored.get("spec") or {}).get("resourceClaims"):  # the webhook's alone (cel.NO_CLAIMS)
        assert native == set(), (obj, failures)
        return native
    assert native == webhook, (obj, failures, [v.describe() for v in found])
    denied = outcome.verdict.of(Mode.DENY) if outcome.verdict else []
    if len(denied) == 1 and denied[0].rule in compiled:
        assert failures[denied[0].rule][0] == outcome.message, obj
    return native


def test_every_rule_with_a_twin_is_installed_with_its_action(shipped: Compiled) -> None:
    from webhook.policy.cel import ACTIONS

    assert SHIPPED and sorted(shipped) == SHIPPED
    modes = {r.id: r.default_mode for r in RULES}
    assert {rule: actions for rule, (_vap, actions) in shipped.items()} == {
        rule: [ACTIONS[modes[rule]]] for rule in SHIPPED
    }


@pytest.mark.parametrize("rule", [r for r in TWINS if RULES_BY_ID[r].native.judges("pod")])
def test_each_twin_says_what_its_rule_says_for_the_rule_example(rule: str, tmp_path: Path) -> None:
    """The README's example of each rule, the rule on (deny): the same sentence from the API
    server as from the webhook. (A twin of templates only, with its example:
    tests/test_native_templates.py.)"""
    (r,) = [r for r in ALL_RULES if r.id == rule]
    example = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "example", "namespace": "ml"}, **r.example}
    config: dict[str, Any] = {"rules": {rule: "deny"}}
    if r.switch:  # the config switch without which the rule never fires (Rule.switch), on
        *parents, last = r.switch.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = True
    assert agree(twins(config, tmp_path), example, config) == {rule}


def test_every_corpus_pod_is_judged_as_the_webhook_judges_it(shipped: Compiled) -> None:
    compared = fired = 0
    for obj in corpus().values():
        if obj.get("kind") != "Pod":
            continue
        fired += bool(agree(shipped, obj))
        compared += 1
    assert compared >= 20 and fired >= 3, (compared, fired)


NVD = "NVIDIA_VISIBLE_DEVICES"


def env(name: str, value: str | None = None, **source: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name}
    if value is not None:
        entry["value"] = value
    if source:
        entry["valueFrom"] = source
    return entry


FIELD = {"fieldRef": {"fieldPath": "metadata.name"}}
DRIVER_CAPS = "NVIDIA_DRIVER_CAPABILITIES"
EDGE = {
    "all": pod(container(env=[env(NVD, "all")])),
    "void": pod(container(env=[env(NVD, "void")])),
    "empty": pod(container(env=[env(NVD, "")])),
    "space-void": pod(container(env=[env(NVD, " void")])),
    "None-case": pod(container(env=[env(NVD, "None")])),
    "none-comma-all": pod(container(env=[env(NVD, "none,all")])),
    "control-char": pod(container(env=[env(NVD, "void\x1c")])),
    "value-from": pod(container(env=[env(NVD, **FIELD)])),
    "void-then-all": pod(container(env=[env(NVD, "void"), env(NVD, "all")])),
    "gpu-container-all": pod(container(gpu="1", env=[env(NVD, "all")])),
    # The fix names the container's own resource (gpus.resource_hint): a device, a companion, AMD's.
    "mig-container-all": pod(container(resources={"limits": {"nvidia.com/mig-1g.5gb": "1"}}, env=[env(NVD, "all")])),
    "gpu-and-mig-all": pod(
        container(resources={"limits": {"nvidia.com/mig-1g.5gb": "1", "nvidia.com/gpu": "1"}}, env=[env(NVD, "0")])
    ),
    "companion-all": pod(container(resources={"limits": {"nvidia.com/gpumem": "4000"}}, env=[env(NVD, "all")])),
    "amd-partition-env": pod(
        container(resources={"limits": {"amd.com/cpx_nps4": "1"}}, env=[env("AMD_VISIBLE_DEVICES", "0")])
    ),
    "amd-env-on-nvidia": pod(container(gpu="1", env=[env("AMD_VISIBLE_DEVICES", "0")])),
    "lower-case-name": pod(container(env=[env("nvidia_visible_devices", "all")])),
    "init": pod(container(), initContainers=[container("i", env=[env("X", "1"), env(NVD, "0")])]),
    "ephemeral": pod(container(), ephemeralContainers=[container("d", env=[env(NVD, "all")])]),
    "second-container": pod(container("a"), container("b", env=[env("A", "1"), env(NVD, "GPU-1")])),
    "amd": pod(container(env=[env("AMD_VISIBLE_DEVICES", "0")])),
    "amd-none": pod(container(env=[env("AMD_VISIBLE_DEVICES", "none")])),
    "docker-resource": pod(container(env=[env("DOCKER_RESOURCE_GPU", "all")])),
    "docker-resource-from": pod(container(env=[env("DOCKER_RESOURCE_X", **FIELD)])),
    "imex": pod(container(env=[env("NVIDIA_IMEX_CHANNELS", "0")])),
    "imex-void": pod(container(env=[env("NVIDIA_IMEX_CHANNELS", "void")])),
    "mig-config": pod(container(env=[env("NVIDIA_MIG_CONFIG_DEVICES", "all")])),
    "mig-monitor-from": pod(container(env=[env("NVIDIA_MIG_MONITOR_DEVICES", **FIELD)])),
    "both-rules": pod(container(env=[env("NVIDIA_MIG_CONFIG_DEVICES", "all"), env(NVD, "all")])),
    "no-containers-key": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}},
    # no-privileged-gpu: what makes a GPU pod (gpus.gpu_pod), and what is privileged.
    "privileged-cpu-pod": pod(container(privileged=True)),
    "privileged-gpu": pod(container(gpu="1", privileged=True)),
    "privileged-false-gpu": pod(container(gpu="1", privileged=False)),
    "privileged-sidecar": pod(container("t", gpu="2"), container("s", privileged=True)),
    "privileged-zero-gpu": pod(container(gpu="0", privileged=True)),
    "privileged-mig": pod(container(privileged=True, resources={"limits": {"nvidia.com/mig-1g.5gb": "1"}})),
    "privileged-shared": pod(container(privileged=True, resources={"limits": {"nvidia.com/gpu.shared": "1"}})),
    "privileged-companion": pod(container(privileged=True, resources={"limits": {"nvidia.com/gpumem": "4000"}})),
    "privileged-request-only": pod(container(privileged=True, resources={"requests": {"nvidia.com/gpu": "1"}})),
    "privileged-init": pod(container(gpu="1"), initContainers=[container("i", privileged=True)]),
    "privileged-ephemeral": pod(container(gpu="1"), ephemeralContainers=[container("d", privileged=True)]),
    "privileged-node-selector": pod(container(privileged=True), nodeSelector={"accelerator": "nvidia-t4"}),
    "privileged-gke-label": pod(
        container(privileged=True), nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-l4"}
    ),
    "privileged-other-label": pod(container(privileged=True), nodeSelector={"disktype": "ssd"}),
    "privileged-affinity-in": pod(
        container(privileged=True),
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]},
                    ]
                }
            }
        },
    ),
    "privileged-affinity-notin": pod(
        container(privileged=True),
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "accelerator", "operator": "NotIn", "values": ["a"]}]}
                    ]
                }
            }
        },
    ),
    "privileged-instance-type": pod(
        container(privileged=True), nodeSelector={"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    ),
    "privileged-cpu-instance-type": pod(
        container(privileged=True), nodeSelector={"node.kubernetes.io/instance-type": "m5.large"}
    ),
    "privileged-claim": pod(
        container(privileged=True, resources={"claims": [{"name": "g"}]}),
        resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
    ),
    "privileged-kai": {
        **pod(container(privileged=True), schedulerName="kai-scheduler"),
        "metadata": {"name": "k", "namespace": "ml", "annotations": {"gpu-fraction": "0.5"}},
    },
    "privileged-gke-devices": {
        **pod(container("main", privileged=True)),
        "metadata": {
            "name": "g",
            "namespace": "ml",
            "annotations": {"devices.gke.io/container.main": "- path: /dev/nvidia0\n"},
        },
    },
    "privileged-gke-ctl-only": {
        **pod(container("main", privileged=True)),
        "metadata": {
            "name": "g",
            "namespace": "ml",
            "annotations": {"devices.gke.io/container.main": "- path: /dev/nvidiactl\n"},
        },
    },
    "cap-sys-admin": pod(container(gpu="1", caps=["NET_ADMIN", "sys_admin"])),
    "cap-prefixed-spaced": pod(container(gpu="1", caps=[" CAP_SYS_ADMIN\t"])),
    "cap-all": pod(container(gpu="1", caps=["all"])),
    "cap-unicode-case": pod(container(gpu="1", caps=["\u017fys_adm\u0131n"])),
    "cap-harmless": pod(container(gpu="1", caps=["NET_BIND_SERVICE", "SYS_ADMINX", "CAP_SYS_ADMIN_"])),
    "cap-cpu-pod": pod(container(caps=["SYS_ADMIN"])),
    "cap-and-privileged": pod(container(gpu="1", privileged=True, caps=["SYS_ADMIN"])),
    "cap-amd": pod(container(caps=["SYS_ADMIN"], resources={"limits": {"amd.com/gpu": "1"}})),
    "cap-intel-agent": pod(
        container(caps=["SYS_ADMIN"], image="intel/intel-gpu-plugin:0.30.0", resources={"limits": {GPU: "1"}})
    ),
    "host-pid-gpu": pod(container(gpu="1"), hostPID=True),
    "host-ipc-gpu": pod(container(gpu="1"), hostIPC=True),
    "host-both-pinned": pod(container(), hostPID=True, hostIPC=True, nodeSelector={"accelerator": "nvidia-a100"}),
    "host-ipc-amd": pod(container(resources={"limits": {"amd.com/gpu": "1"}}), hostIPC=True),
    "host-pid-cpu": pod(container(), hostPID=True),
    "host-pid-false-gpu": pod(container(gpu="1"), hostPID=False),
    "runtime-class-cpu": pod(container(), runtimeClassName="nvidia"),
    "runtime-class-gpu": pod(container(gpu="1"), runtimeClassName="nvidia"),
    "runtime-class-cdi-sidecar": pod(container(gpu="1"), container("s"), runtimeClassName="nvidia-cdi"),
    "runtime-class-other": pod(container(), runtimeClassName="kata"),
    "runtime-class-claim": pod(
        container(resources={"claims": [{"name": "g"}]}),
        runtimeClassName="nvidia",
        resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
    ),
    "runtime-class-kai": {
        **pod(container(), schedulerName="kai-scheduler", runtimeClassName="nvidia"),
        "metadata": {"name": "k", "namespace": "ml", "annotations": {"gpu-fraction": "0.5"}},
    },
    "runtime-class-agent": pod(
        container(image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3", resources={"limits": {GPU: "0"}}),
        runtimeClassName="nvidia",
        hostPID=True,
    ),
    "privileged-amd-labelled": pod(
        container(privileged=True, resources={"limits": {"amd.com/gpu": "1"}}),
        nodeSelector={"amd.com/gpu.family": "AI"},
    ),
    # gpu-node-wide-resource: Intel's node-wide resources, on any side and container list.
    "wide-request-only": pod(container(resources={"requests": {"gpu.intel.com/monitoring": "1"}})),
    "wide-zero": pod(container(resources={"limits": {"gpu.intel.com/monitoring": "0"}})),
    "wide-milli": pod(container(resources={"limits": {"gpu.intel.com/xe_monitoring": "500m"}})),
    "wide-two-names": pod(
        container(resources={"limits": {"gpu.intel.com/i915_monitoring": "1", "gpu.intel.com/monitoring": "1"}})
    ),
    "wide-zero-limit-request": pod(
        container(
            resources={"limits": {"gpu.intel.com/monitoring": "0"}, "requests": {"gpu.intel.com/i915_monitoring": "1"}}
        )
    ),
    "wide-beside-i915": pod(
        container("a", resources={"limits": {"gpu.intel.com/i915": "1"}}),
        container("b", resources={"limits": {"gpu.intel.com/monitoring": "1"}}),
    ),
    "wide-init": pod(
        container(), initContainers=[container("i", resources={"limits": {"gpu.intel.com/monitoring": "1"}})]
    ),
    "wide-ephemeral": pod(
        container(), ephemeralContainers=[container("d", resources={"limits": {"gpu.intel.com/monitoring": "1"}})]
    ),
    "wide-agent": pod(
        container(image="intel/xpumanager:v1.2.41", resources={"limits": {"gpu.intel.com/monitoring": "1"}}),
        hostPID=True,
        serviceAccountName="xpumanager",
    ),
    "wide-other-domain": pod(container(resources={"limits": {"example.com/monitoring": "1"}})),
    # driver-capabilities-non-gpu: `all` among the comma-separated items, trimmed as str.strip() trims.
    "caps-all-cpu": pod(container(env=[env(DRIVER_CAPS, "all")])),
    "caps-list-all": pod(container(env=[env(DRIVER_CAPS, "compute, all ")])),
    "caps-unicode-space": pod(container(env=[env(DRIVER_CAPS, "utility,\u3000all\u2029")])),
    "caps-upper": pod(container(env=[env(DRIVER_CAPS, "ALL")])),
    "caps-allx": pod(container(env=[env(DRIVER_CAPS, "allx,compute")])),
    "caps-compute": pod(container(env=[env(DRIVER_CAPS, "compute,utility")])),
    "caps-gpu": pod(container(gpu="1", env=[env(DRIVER_CAPS, "all")])),
    "caps-value-from": pod(container(env=[env(DRIVER_CAPS, **FIELD)])),
    "caps-second-entry": pod(container(env=[env(DRIVER_CAPS, "compute"), env(DRIVER_CAPS, "all")])),
    "caps-init": pod(container(gpu="1"), initContainers=[container("i", env=[env(DRIVER_CAPS, "all")])]),
    "caps-claim": pod(
        container(env=[env(DRIVER_CAPS, "all")], resources={"claims": [{"name": "g"}]}),
        resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
    ),
    # visible-devices-envfrom: what a prefix reaches in a container whose GPU the node's environment carries.
    "envfrom-gpu-no-prefix": pod(container(gpu="1", envFrom=[{"configMapRef": {"name": "settings"}}])),
    "envfrom-gpu-app-prefix": pod(container(gpu="1", envFrom=[{"prefix": "APP_", "configMapRef": {"name": "s"}}])),
    "envfrom-gpu-nvidia-prefix": pod(container(gpu="1", envFrom=[{"prefix": "NVIDIA_", "secretRef": {"name": "s"}}])),
    "envfrom-gpu-visible-set": pod(
        container(
            gpu="1",
            env=[env("NVIDIA_VISIBLE_DEVICES", **FIELD)],
            envFrom=[{"prefix": "NVIDIA_VISIBLE", "configMapRef": {"name": "s"}}],
        )
    ),
    "envfrom-gpu-some-set": pod(
        container(
            gpu="1", env=[env(NVD, "void"), env("NVIDIA_IMEX_CHANNELS", "0")], envFrom=[{"configMapRef": {"name": "s"}}]
        )
    ),
    "envfrom-second-item": pod(
        container(
            gpu="1",
            envFrom=[{"prefix": "APP_", "configMapRef": {"name": "a"}}, {"prefix": "NVIDIA_MIG_", "secretRef": {}}],
        )
    ),
    "envfrom-no-ref": pod(container(gpu="1", envFrom=[{"prefix": "N"}])),
    "envfrom-cpu": pod(container(envFrom=[{"configMapRef": {"name": "settings"}}])),
    "envfrom-mig": pod(
        container(resources={"limits": {"nvidia.com/mig-1g.5gb": "1"}}, envFrom=[{"configMapRef": {"name": "s"}}])
    ),
    "envfrom-companion": pod(
        container(resources={"limits": {"nvidia.com/gpumem": "4000"}}, envFrom=[{"configMapRef": {"name": "s"}}])
    ),
    "envfrom-amd-gpu": pod(
        container(resources={"limits": {"amd.com/gpu": "1"}}, envFrom=[{"configMapRef": {"name": "s"}}])
    ),
    "envfrom-init": pod(container(), initContainers=[container("i", gpu="1", envFrom=[{"secretRef": {"name": "x"}}])]),
    # gpu-node-agent: a per-node pod there for the GPUs, whose container isolation blinds.
    "agent-daemonset-image": {
        **pod(container("exporter", image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04")),
        "metadata": {
            "name": "a",
            "namespace": "monitoring",
            "ownerReferences": [
                {"kind": "DaemonSet", "controller": True, "name": "d", "apiVersion": "apps/v1", "uid": "u"}
            ],
        },
    },
    "agent-host-pid-zero": pod(
        container("probe", image="ghcr.io/acme/gpu-probe:1", resources={"requests": {GPU: "0"}}), hostPID=True
    ),
    "agent-pinned-sidecar": pod(
        container("main", image="busybox"), hostPID=True, nodeSelector={"nvidia.com/gpu.present": "true"}
    ),
    "agent-with-gpu": pod(container("w", gpu="1", image="nvcr.io/nvidia/cuda:12.4.0-base"), hostPID=True),
    "agent-intel-image": pod(
        container("intel", image="intel/intel-gpu-plugin:0.30.0", resources={"limits": {"gpu.intel.com/i915": "0"}}),
        hostPID=True,
    ),
    "agent-not-per-node": pod(container("x", image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3")),
    # gpu-shared-slots: more than 1 of a shared resource, on the side that decides (limits, else requests).
    "shared-two": pod(container(resources={"limits": {"nvidia.com/gpu.shared": "2"}})),
    "shared-one": pod(container(resources={"limits": {"nvidia.com/gpu.shared": "1"}})),
    "shared-milli-over": pod(container(resources={"limits": {"nvidia.com/gpu.shared": "1001m"}})),
    "shared-dash": pod(container(resources={"limits": {"nvidia.com/a100-shared": "3"}})),
    "shared-requests-only": pod(container(resources={"requests": {"nvidia.com/gpu.shared": "2"}})),
    "shared-requests-beside-limits": pod(
        container(resources={"limits": {"cpu": "1"}, "requests": {"nvidia.com/gpu.shared": "4"}})
    ),
    "shared-second": pod(
        container("a", resources={"limits": {GPU: "2"}}),
        container("b", resources={"limits": {"nvidia.com/mig-1g.5gb.shared": "2", "cpu": "1"}}),
    ),
    "shared-init": pod(
        container(), initContainers=[container("i", resources={"limits": {"nvidia.com/gpu.shared": "2"}})]
    ),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_edge_shapes(name: str, shipped: Compiled) -> None:
    agree(shipped, EDGE[name])


def kai_pod(ref: str, prefix: str | None = "p-abc", container_name: str = "") -> dict[str, Any]:
    """KAI Scheduler's fraction pod as its webhook leaves it: the configMapKeyRef it injects."""
    obj = pod(
        container("a", env=[env(NVD, configMapKeyRef={"name": ref, "key": NVD})]),
        container("b"),
        schedulerName="kai-scheduler",
    )
    obj["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    if prefix is not None:
        obj["metadata"]["annotations"]["runai/shared-gpu-configmap"] = prefix
    if container_name:
        obj["metadata"]["annotations"]["gpu-fraction-container-name"] = container_name
    return obj


@pytest.mark.parametrize("kai", [False, True])
def test_kai_injected_entry_as_the_integration_says(kai: bool, tmp_path: Path) -> None:
    config = {"integrations": {"kai": {"enabled": True}}} if kai else {}
    compiled = twins(config, tmp_path)
    cases = [
        kai_pod("p-abc-0"),  # the entry KAI's webhook injects
        kai_pod("p-abc-1"),  # another container's ConfigMap
        kai_pod("p-abc-0", prefix=None),
        kai_pod("p-abc-0", prefix=""),
        kai_pod("p-abc-0", container_name="b"),  # the annotation names another container
    ]
    fired = [agree(compiled, obj, config) for obj in cases]
    assert (fired[0] == set()) is kai  # allowed only with the integration on
    assert all(f == {"no-visible-devices-env"} for f in fired[1:])


@pytest.mark.parametrize("kai", [False, True])
def test_the_envfrom_rules_as_the_config_says(kai: bool, tmp_path: Path) -> None:
    """visible-devices-envfrom and amd-runtime-envfrom (on): KAI's own `-evar` ConfigMap is trusted
    only with the integration on, in its fraction container at its index; AMD's names and the
    DOCKER_RESOURCE_ family as prefixes reach them."""
    config: dict[str, Any] = {"vendors": {"amd": {"runtimeEnv": True}}}
    if kai:
        config["integrations"] = {"kai": {"enabled": True}}
    compiled = twins(config, tmp_path)
    assert "amd-runtime-envfrom" in compiled

    def kai_from(name: str, **kw: Any) -> dict[str, Any]:
        obj = kai_pod("p-abc-0", **kw)
        obj["spec"]["containers"][0]["envFrom"] = [
            {"prefix": "APP_", "configMapRef": {"name": "a"}},
            {"configMapRef": {"name": name}},
        ]
        return obj

    def amd(*items: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return pod(container(envFrom=list(items), **kw))

    cases = {
        "kai-evar": kai_from("p-abc-0-evar"),
        "kai-other-index": kai_from("p-abc-1-evar"),
        "kai-other-container": kai_from("p-abc-0-evar", container_name="b"),
        "amd-no-prefix": amd({"configMapRef": {"name": "s"}}),
        "amd-docker": amd({"prefix": "DOCKER_", "configMapRef": {"name": "s"}}),
        "amd-docker-longer": amd({"prefix": "DOCKER_RESOURCE_GPU", "secretRef": {"name": "s"}}),
        "amd-visible-set": amd(
            {"prefix": "AMD_", "configMapRef": {"name": "s"}}, env=[env("AMD_VISIBLE_DEVICES", "none")]
        ),
        "amd-visible": amd({"prefix": "AMD_VISIBLE", "configMapRef": {"name": "s"}}),
        "amd-app": amd({"prefix": "APP_", "configMapRef": {"name": "s"}}),
    }
    fired = {name: agree(compiled, obj, config) for name, obj in cases.items()}
    amd_fired = {"kai-other-index", "kai-other-container", "amd-no-prefix", "amd-docker", "amd-docker-longer"}
    # amd-visible: isolation's own AMD_VISIBLE_DEVICES=none is in env by the time either judges it.
    amd_fired |= set() if kai else {"kai-evar"}
    assert {n for n, rules in fired.items() if "amd-runtime-envfrom" in rules} == amd_fired
    # KAI's fraction container gets its GPU through the node's environment only with the integration on.
    assert {n for n, rules in fired.items() if "visible-devices-envfrom" in rules} == (
        {"kai-other-index"} if kai else set()
    )


@pytest.mark.parametrize(
    ("config", "namespace", "user"),
    [
        ({"exemptNamespaces": ["research"]}, "research", "alice"),
        ({"exemptUsernames": ["system:serviceaccount:ci:deployer"]}, "ml", "system:serviceaccount:ci:deployer"),
        ({"exemptServiceAccounts": ["ml/dcgm"]}, "ml", "alice"),
        ({"vendors": {"amd": {"enabled": False}}}, "ml", "alice"),
        ({"vendors": {"intel": {"enabled": False}}}, "ml", "alice"),
        ({"vendors": {"intel": {"enabled": False}, "amd": {"enabled": False}}}, "ml", "alice"),
        ({"rules": {"no-visible-devices-env": "warn"}}, "ml", "alice"),
        ({"isolateNonGpu": False}, "ml", "alice"),
    ],
)
def test_exemptions_and_switches_as_the_config_says(
    config: dict[str, Any], namespace: str, user: str, tmp_path: Path
) -> None:
    compiled = twins(config, tmp_path)
    fleet = pod(
        container("a", env=[env(NVD, "all"), env("AMD_VISIBLE_DEVICES", "1")]),
        container("b", env=[env("DOCKER_RESOURCE_GPU", "0")]),
        namespace=namespace,
        serviceAccountName="dcgm",
    )
    agree(compiled, fleet, config, namespace=namespace, user=user)
    amd_only = pod(container("a", env=[env("AMD_VISIBLE_DEVICES", "1")]), namespace=namespace)
    agree(compiled, amd_only, config, namespace=namespace, user=user)
    monitoring = pod(
        container("m", resources={"limits": {"gpu.intel.com/monitoring": "1"}}),
        namespace=namespace,
        serviceAccountName="dcgm",
    )
    agree(compiled, monitoring, config, namespace=namespace, user=user)
    for last in ("void", "all"):  # isolation off: only an agent that voids itself is blind
        agent = pod(
            container("e", image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3", env=[env(NVD, last)]),
            hostPID=True,
            namespace=namespace,
        )
        agree(compiled, agent, config, namespace=namespace, user=user)


def test_modes_become_binding_actions_and_words(tmp_path: Path) -> None:
    modes = {"no-visible-devices-env": "warn", "no-device-grant-env": "audit"}
    compiled = twins({"rules": modes}, tmp_path)
    assert compiled["no-visible-devices-env"][1] == ["Warn"]
    assert compiled["no-device-grant-env"][1] == ["Audit"]
    vap = compiled["no-visible-devices-env"][0]
    (message,) = vap.failures(EDGE["all"], request())
    assert message.startswith("would violate GPU policy: no-visible-devices-env (container")
    off = twins({"rules": {"no-visible-devices-env": "off"}}, tmp_path)
    assert "no-visible-devices-env" not in off and "no-device-grant-env" in off


def test_enforcement_webhook_installs_no_validating_policy(tmp_path: Path) -> None:
    docs = render({"enforcement": "webhook"}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(docs, list)
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_native_leaves_the_twinned_rules_out_of_the_pods_webhook(tmp_path: Path) -> None:
    """In enforcement native the API server alone judges a twinned rule: a pod only it could
    fire on is not sent to a webhook; in both the webhook backs it up, failing open (the API server
    judged it first), so the fail-closed webhook is not sent it either (issue 48). A pod with DRA
    claims, which the policies leave to the webhook, goes to the fail-closed one."""
    conditions: dict[str, str] = {}
    for enforcement in ("both", "native"):
        docs = render({"enforcement": enforcement}, kube_version="1.36.0", tmp=tmp_path)
        assert isinstance(docs, list)
        hooks = {h["name"]: h for h in find(docs, "ValidatingWebhookConfiguration")["webhooks"]}
        conditions[enforcement] = hooks["pods.validate.gpu-policy.io"]["matchConditions"][0]["expression"]
        report = hooks.get("pods-report.validate.gpu-policy.io")
        conditions[enforcement + " report"] = report["matchConditions"][0]["expression"] if report else ""
        assert (report or {}).get("failurePolicy", "Ignore") == "Ignore"
    for name in ("NVIDIA_IMEX_CHANNELS", "DOCKER_RESOURCE_", "e.name == 'NVIDIA_VISIBLE_DEVICES'"):
        assert name in conditions["both report"], name
        assert name not in conditions["native report"], name
        assert name not in conditions["both"], name  # the twins' rules fail closed in the API server
    assert "nvidia.com/gpu" in conditions["native"]
    # A pod with DRA claims the rules' policies leave to the webhook (cel.NO_CLAIMS): sent in native.
    import celpy

    from tests.celconditions import sent

    env = celpy.Environment()
    native = [env.program(env.compile(conditions["native"]))]
    claim = pod(
        container(privileged=True, resources={"claims": [{"name": "nic"}]}),
        resourceClaims=[{"name": "nic", "resourceClaimTemplateName": "sriov-nic"}],
    )
    assert sent(native, claim) and not sent(native, pod(container()))


def owned(p: dict[str, Any], *refs: tuple[str, bool | None]) -> dict[str, Any]:
    """`p` with ownerReferences of these kinds (controller: True, False, or the field left out)."""
    out = copy.deepcopy(p)
    out["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": kind, "name": f"o{i}", "uid": f"u{i}", **({} if c is None else {"controller": c})}
        for i, (kind, c) in enumerate(refs)
    ]
    return out


GPU_POD = pod(container(gpu="1"))
OWNER_SHAPES = {
    "bare": GPU_POD,
    "replicaset": owned(GPU_POD, ("ReplicaSet", True)),
    "job-not-controller": owned(GPU_POD, ("Job", False)),
    "job-controller-unset": owned(GPU_POD, ("Job", None)),
    "node-controller": owned(GPU_POD, ("Node", True)),
    "second-is-the-controller": owned(GPU_POD, ("Job", False), ("ConfigMap", True)),
    "lower-case-kind": owned(GPU_POD, ("replicaset", True)),
    "no-gpu": pod(container()),
    "zero-gpu": pod(container(gpu="0")),
    "mig": pod(container(resources={"limits": {"nvidia.com/mig-1g.5gb": "1"}})),
    "amd": pod(container(resources={"limits": {"amd.com/gpu": "1"}})),
    "requests-only": pod(container(resources={"requests": {GPU: "1"}})),
    "init-gpu": pod(container(), initContainers=[container("i", gpu="1")]),
    "dra-claim": pod(
        container(resources={"claims": [{"name": "gpu"}]}),
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
    ),
    "pinned-no-gpu": pod(container(), nodeSelector={"nvidia.com/gpu.present": "true"}),
    "kai-fraction": {
        **pod(container(), schedulerName="kai-scheduler"),
        "metadata": {"name": "p", "namespace": "ml", "annotations": {"gpu-fraction": "0.5"}},
    },
    "daemonset-agent": owned(pod(container(gpu="1"), hostPID=True), ("DaemonSet", True)),
    "node-agent-bare": pod(container(image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2", gpu="0"), hostPID=True),
}


@pytest.mark.parametrize(
    "config",
    [
        {"rules": {"gpu-controller-owned": "deny"}},
        {"rules": {"gpu-controller-owned": "deny"}, "gpuControllerKinds": ["Job"]},
    ],
    ids=["default-kinds", "jobs-only"],
)
def test_the_controller_owned_twin_judges_pods_as_the_webhook(config: dict[str, Any], tmp_path: Path) -> None:
    """gpu-controller-owned (off by default) on: its Pods-only twin fails exactly where the rule
    does, with its sentence, over the owner shapes and every corpus pod; no template policy."""
    compiled = twins(config, tmp_path)
    assert "gpu-controller-owned" in compiled
    fired = {name for name, p in OWNER_SHAPES.items() if "gpu-controller-owned" in agree(compiled, p, config)}
    expected = {"bare", "job-not-controller", "job-controller-unset", "node-controller", "second-is-the-controller",
                "lower-case-kind", "mig", "amd", "requests-only", "init-gpu", "kai-fraction"}  # fmt: skip
    # "dra-claim" is the webhook's alone (cel.NO_CLAIMS): agree() checks the twin lets it be.
    if config.get("gpuControllerKinds") == ["Job"]:
        expected |= {"replicaset", "daemonset-agent"}
    assert fired == expected
    for obj in corpus().values():
        if obj.get("kind") == "Pod":
            agree(compiled, obj, config)
    docs = render({"enforcement": "both", "policy": config}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(docs, list)
    holds = {
        d["metadata"]["name"]: d["metadata"]["annotations"]["gpu-policy.io/rules"].split(",")
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    # On Pods only: in the deny policy of Pods, in none of the template paths' policies.
    assert [n for n, rules in holds.items() if "gpu-controller-owned" in rules] == ["gpu-policy-rules-deny"]


def test_one_policy_per_mode_and_root_holds_every_twin_of_that_mode(tmp_path: Path) -> None:
    """A policy costs a pod create about a millisecond in the API server whatever it holds, so the
    chart installs one per mode and root, not one per rule; its annotation lists its rules (the
    order of their validations) and each rule's variables are scoped to it, but for those several of
    its rules define alike (the API server evaluates each variable once)."""
    from webhook.buildtime.native import SHARED, scope_of, shared_variables

    twins = [(r.id, r.native) for r in RULES if r.native is not None]
    modes = {"driver-capabilities-non-gpu": "audit", "no-device-grant-env": "warn"}
    docs = render({"enforcement": "both", "policy": {"rules": modes}}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(docs, list)
    vaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert sorted(vaps) == sorted(bindings)
    on_pods = {
        n: d
        for n, d in vaps.items()
        if n in ("gpu-policy-rules-deny", "gpu-policy-rules-warn", "gpu-policy-rules-audit")
    }
    # Three modes, Pods and three template paths; and the object rules that are on, one each.
    objects = [r.id for r in OBJECT_RULES if r.default_mode is not Mode.OFF]
    assert len(on_pods) == 3 and len(vaps) == 3 * 4 + len(objects) == 14
    for name, vap in on_pods.items():
        rules = vap["metadata"]["annotations"]["gpu-policy.io/rules"].split(",")
        mode = name.rsplit("-", 1)[1]
        assert all(modes.get(r, {x.id: x.default_mode.value for x in RULES}[r]) == mode for r in rules), (name, rules)
        assert bindings[name]["spec"]["validationActions"] == [mode.capitalize()]
        names = [v["name"] for v in vap["spec"]["variables"]]
        assert len(names) == len(set(names)) and all(
            n.startswith(SHARED) or any(n.startswith(scope_of(r)) for r in rules) for n in names
        )
        # What two of its rules define alike is defined once, before the rules' own variables;
        # only what one of its rules reads.
        shared = [n for n in names if n.startswith(SHARED)]
        assert names[: len(shared)] == shared
        wanted = {x for r in rules for x in shared_variables(twins)[0][r].values()}
        assert set(shared) == wanted, (name, shared, wanted)
    # The deny policy on Pods holds thirteen twins reading one node-agent test: defined once.
    deny = [v["name"] for v in on_pods["gpu-policy-rules-deny"]["spec"]["variables"]]
    assert "shared_nodeAgent" in deny and not [n for n in deny if n.endswith("_nodeAgent") and n != "shared_nodeAgent"]
    assert "no-device-grant-env" in on_pods["gpu-policy-rules-warn"]["metadata"]["annotations"]["gpu-policy.io/rules"]


def test_the_capability_pattern_is_python_s_strip_and_upper_exactly() -> None:
    """no-privileged-gpu's twin matches a capability with an RE2 pattern (cel.upper_pattern), since
    CEL has no Unicode upper-casing: every code point that str.upper() turns into an ASCII capital,
    and every str.isspace() character, is in the pattern's tables; and over names built from them
    the pattern and nvidia.privileged_capability agree."""
    import sys

    import re2
    from hypothesis import strategies as st

    from webhook.policy import cel
    from webhook.policy.nvidia import PRIVILEGED_CAPS, privileged_capability

    to_ascii = [(ch, ch.upper()) for ch in map(chr, range(sys.maxunicode + 1)) if not ch.isascii()]
    to_ascii = [(ch, up) for ch, up in to_ascii if up.isascii()]
    assert {up: ch for ch, up in to_ascii if len(up) == 1} == cel.UPPER_FROM
    # The others become two or three capitals (ß: SS, ﬁ: FI), none of which a name contains.
    assert not [up for _ch, up in to_ascii if len(up) > 1 and any(up in w for w in PRIVILEGED_CAPS)]
    assert "".join(ch for ch in map(chr, range(sys.maxunicode + 1)) if ch.isspace()) == cel.SPACE
    pattern = re2.compile(cel.upper_pattern(PRIVILEGED_CAPS))
    pieces = ["SYS_ADMIN", "CAP_", "ALL", "s", "ſ", "ı", "i", "K", " ", "\t", "\u3000", "\x1c", "_", "X", "é", "ß"]

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.sampled_from(pieces), max_size=6).map("".join))
    def same(cap: str) -> None:
        assert bool(pattern.search(cap)) == privileged_capability(cap), repr(cap)

    same()
    for cap in ("sys_admin", " CAP_SYS_ADMIN\t", "ſys_admın", "All", "cap_all"):
        assert pattern.search(cap) and privileged_capability(cap)


def test_the_twins_values_are_the_same_names_from_the_chart_and_from_a_policy() -> None:
    """Every @name@ a twin uses is filled in both ways: from the chart's values (Helm, the installed
    policies) and from a Policy (`check --engine cel`); the two tables name the same values."""
    import re

    from webhook.buildtime import native as chart
    from webhook.offline import native as offline
    from webhook.policy import MUTATIONS, RULES
    from webhook.policy.cel import ROOT_PLACEHOLDERS

    assert set(chart.VALUES) == set(offline.VALUES)
    used: set[str] = set()
    for twin in [r.native for r in RULES if r.native is not None]:
        for text in [cel for _, cel in twin.variables] + [t for c in twin.checks for t in (c.expression, c.message)]:
            used |= set(re.findall(r"@(\w+)@", text))
    for m in MUTATIONS:
        if m.native is not None:
            used |= set(re.findall(r"@(\w+)@", repr(m.native)))
    assert used - ROOT_PLACEHOLDERS <= set(chart.VALUES), used - set(chart.VALUES)


@pytest.mark.parametrize(("amd", "intel"), [(True, True), (True, False), (False, True), (False, False)])
def test_no_value_a_policy_reads_renders_as_null(amd: bool, intel: bool, tmp_path: Path) -> None:
    """Sprig's concat of empty lists is nil, which toJson prints as `null`, and `k in null` fails the
    policy (it once did for @nodeWide@ with Intel off and AMD on, which only a node agent's message
    read). With each vendor on or off and every list the values may empty emptied, no expression of
    any native policy holds a null."""
    import re

    lists = ["gpuRuntimeClasses", "nodeAgentImages", "gpuCompanionResources", "gpuDeviceResources"]
    policy = {"vendors": {"amd": {"enabled": amd}, "intel": {"enabled": intel}}, **{key: [] for key in lists}}
    docs = render({"enforcement": "both", "policy": policy}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(docs, list)
    policies = [d for d in docs if d["kind"] in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")]
    assert len(policies) >= 5  # isolation's, and the deny and warn policies of Pods and of templates

    def strings(node: Any) -> list[str]:
        if isinstance(node, dict):
            return [s for v in node.values() for s in strings(v)]
        if isinstance(node, list):
            return [s for v in node for s in strings(v)]
        return [node] if isinstance(node, str) else []

    nulls = [(p["metadata"]["name"], s[:80]) for p in policies for s in strings(p["spec"]) if re.search(r"\bnull\b", s)]
    assert nulls == []


MAX_SHAPES = {
    "eight": pod(container(gpu="8")),
    "nine-together": pod(container("a", gpu="8"), container("b", gpu="1")),
    "init-largest": pod(container(gpu="2"), initContainers=[container("i", gpu="9"), container("j", gpu="3")]),
    "requests-only": pod(container(resources={"requests": {GPU: "9"}})),
    "limits-decide": pod(container(resources={"limits": {GPU: "1", "cpu": "1"}, "requests": {GPU: "1"}})),
    "share-counts-a-card": pod(*[container(f"c{i}", resources={"limits": {GPU: "0.2"}}) for i in range(9)]),
    "mig-and-shared": pod(
        container(resources={"limits": {"nvidia.com/mig-1g.5gb": "5", "nvidia.com/gpu.shared": "4"}})
    ),
    "amd": pod(container(resources={"limits": {"amd.com/gpu": "9"}})),
    "ephemeral-ignored": pod(container(gpu="1"), ephemeralContainers=[container("d", gpu="9")]),
    "companion-ignored": pod(container(resources={"limits": {"nvidia.com/gpumem": "40000"}})),
}


@pytest.mark.parametrize(
    "labels", [None, {"gpu-policy.io/max-gpus-per-pod": "16"}, {"gpu-policy.io/max-gpus-per-pod": "1"},
               {"gpu-policy.io/max-gpus-per-pod": "lots"}, {"gpu-policy.io/max-gpus-per-pod": "12345"}],
)  # fmt: skip
def test_gpu_max_per_pod_reads_the_namespace_as_the_api_server_hands_it(
    labels: dict[str, str] | None, tmp_path: Path
) -> None:
    """gpu-max-per-pod (on): the twin reads the cap from namespaceObject's label, where the webhook
    reads the cluster view's copy of the same namespace; with equal labels they agree on every
    shape, with the same sentence (the cap, and what says so)."""
    from tests.helpers import with_nodes
    from webhook.offline.native import namespace_object

    config = {"rules": {"gpu-max-per-pod": "deny"}}
    compiled = twins(config, tmp_path)
    vap, _actions = compiled["gpu-max-per-pod"]
    base = from_mapping({"clusterVersion": "1.36", **config}, environ={}).policy
    policy = with_nodes([], base, namespaces={"ml": list((labels or {}).items())})
    refused = set()
    for name, obj in MAX_SHAPES.items():
        stored = served(obj)
        outcome = validate(parse(ApiServer.build(stored, namespace="ml", user="alice")), policy)
        webhook = [v for v in outcome.verdict.of(Mode.DENY) if v.rule == "gpu-max-per-pod"]
        native = vap.failures(stored, request("ml", "alice"), namespace=namespace_object("ml", labels))
        assert bool(native) == bool(webhook), (name, native, webhook)
        if webhook:
            refused.add(name)
            assert native[0].endswith(webhook[0].describe()), (name, native[0], webhook[0].describe())
    cap = {"16": 16, "1": 1}.get((labels or {}).get("gpu-policy.io/max-gpus-per-pod", ""), 8)
    assert ("nine-together" in refused) is (cap < 9) and ("eight" in refused) is (cap < 8)


def test_check_engine_cel_says_why_a_native_policy_fails(tmp_path: Path) -> None:
    """A manifest a policy cannot evaluate (a quantity the API server's parser refuses) is refused
    with the reason, never a traceback: the API server fails such a policy closed."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(pod(container(resources={"limits": {"nvidia.com/gpu.shared": "abc"}}))))
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "--engine", "cel", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "a native policy failed, so the API server would refuse it" in r.stdout and "'abc'" in r.stdout, r.stdout


NS_CONFIGS = {
    "listed only": {"gpuNamespaces": ["research"]},
    "selector": {
        "gpuNamespaces": ["research"],
        "gpuNamespaceSelector": {
            "matchLabels": {"team": "ml", "gpu": "true"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                {"key": "frozen", "operator": "DoesNotExist"},
                {"key": "cost-center", "operator": "Exists"},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
            ],
        },
    },
    "by name": {"gpuNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml"}}},
}
NS_LABELS = {
    "none": {},
    "all": {"team": "ml", "gpu": "true", "tier": "gold", "cost-center": "42", "env": "prod"},
    "no-env": {"team": "ml", "gpu": "true", "tier": "silver", "cost-center": "42"},
    "dev": {"team": "ml", "gpu": "true", "tier": "gold", "cost-center": "42", "env": "dev"},
    "frozen": {"team": "ml", "gpu": "true", "tier": "gold", "cost-center": "42", "frozen": ""},
    "bronze": {"team": "ml", "gpu": "true", "tier": "bronze", "cost-center": "42"},
    "no-cost": {"team": "ml", "gpu": "true", "tier": "gold"},
    "team-only": {"team": "ml"},
}


@pytest.mark.parametrize("name", sorted(NS_CONFIGS))
def test_gpu_namespace_allowed_reads_the_namespace_as_the_api_server_hands_it(name: str, tmp_path: Path) -> None:
    """gpu-namespace-allowed (on): the twin matches namespaceObject's labels against the selector
    inlined at render time, where the webhook matches the cluster view's copy of the same
    namespace. In two namespaces (ml, research) with eight label sets, for a GPU pod, a node agent
    and a CPU pod: the same verdicts, with the same sentence (the selector as the webhook writes
    it); a DRA claim pod it leaves to the webhook."""
    from tests.helpers import with_nodes
    from webhook.offline.native import namespace_object

    config = {"rules": {"gpu-namespace-allowed": "deny"}, **NS_CONFIGS[name]}
    compiled = twins(config, tmp_path)
    vap, _actions = compiled["gpu-namespace-allowed"]
    base = from_mapping({"clusterVersion": "1.36", **config}, environ={}).policy
    gpu = {"limits": {"nvidia.com/gpu": 1}}
    shapes = {
        "gpu": pod(container(resources=gpu)),
        "claim": pod(
            container(resources={"claims": [{"name": "g"}]}),
            resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
        ),
        "agent": pod(container(resources=gpu), hostPID=True),
        "cpu": pod(container()),
    }
    refused = set()
    for namespace in ("ml", "research"):
        for label_set, labels in NS_LABELS.items():
            policy = with_nodes([], base, namespaces={namespace: list(labels.items())})
            for shape, obj in shapes.items():
                stored = served({**obj, "metadata": {"name": "p", "namespace": namespace}})
                outcome = validate(parse(ApiServer.build(stored, namespace=namespace, user="alice")), policy)
                webhook = [v for v in outcome.verdict.of(Mode.DENY) if v.rule == "gpu-namespace-allowed"]
                native = vap.failures(
                    stored, request(namespace, "alice"), namespace=namespace_object(namespace, labels)
                )
                if shape == "claim":  # the webhook's alone (cel.NO_CLAIMS)
                    assert native == [], (namespace, label_set, native)
                    continue
                assert bool(native) == bool(webhook), (namespace, label_set, shape, native, webhook)
                if webhook:
                    refused.add((namespace, label_set, shape))
                    assert native[0].endswith(webhook[0].describe()), (native[0], webhook[0].describe())
    assert not [r for r in refused if (r[0] == "research" and name != "by name") or r[2] == "cpu"], refused
    if name == "selector":
        allowed = {label_set for label_set in NS_LABELS if ("ml", label_set, "gpu") not in refused}
        assert allowed == {"all", "no-env"}, allowed
    if name == "by name":
        assert not [r for r in refused if r[0] == "ml"] and ("research", "none", "gpu") in refused


def _qc(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return container(name, resources=resources)


# gpu-quantity: each constraint's edges (the GPU resource, a device, a vendor's, HAMI's and xGPU's
# ranges), unparsable and negative counts, requests equal to or apart from limits, and the xGPU mix.
QUANTITY = {
    "gpu-1.5": pod(container(gpu="1.5")),
    "gpu-share": pod(container(gpu="0.5")),
    "gpu-500m": pod(container(gpu="500m")),
    "gpu-1000m": pod(container(gpu="1000m")),
    "gpu-1e0": pod(container(gpu="1e0")),
    "gpu-2": pod(container(gpu="2")),
    "gpu-0": pod(container(gpu="0")),
    "gpu-share-requests-equal": pod(container(gpu="0.5", request="0.5")),
    "gpu-requests-apart": pod(container(gpu="1", request="1.5")),
    "gpu-requests-only": pod(container(request="2.5")),
    "mig-half": pod(_qc("m", {"limits": {"nvidia.com/mig-1g.5gb": "0.5"}})),
    "amd-half": pod(_qc("a", {"limits": {"amd.com/gpu": "0.5"}})),
    "amd-partition-half": pod(_qc("a", {"limits": {"amd.com/cpx_nps4": "1.5"}})),
    "two-bad-names": pod(_qc("m", {"limits": {"nvidia.com/mig-1g.5gb": "0.5", "nvidia.com/gpu": "1.5"}})),
    "gpucores-150": pod(_qc("h", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}})),
    "gpucores-50": pod(_qc("h", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}})),
    "gpumem-0": pod(_qc("h", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0"}})),
    "gpumem-pct-half": pod(_qc("h", {"limits": {"nvidia.com/gpumem-percentage": "50.5"}})),
    "xgpu-core-7": pod(_qc("x", {"limits": {"volcano.sh/gpu-core.percentage": "7"}})),
    "xgpu-core-10": pod(_qc("x", {"limits": {"volcano.sh/gpu-core.percentage": "10"}})),
    "xgpu-mem-4": pod(_qc("x", {"limits": {"volcano.sh/gpu-mem.128Mi": "4"}})),
    "xgpu-mixed": pod(container("t", gpu="1"), _qc("x", {"limits": {"volcano.sh/gpu-mem.128Mi": "4"}})),
    "init-bad": pod(container(), initContainers=[container("i", gpu="1.5")]),
    "cpu-half": pod(_qc("c", {"limits": {"cpu": "500m", "example.com/fpga": "0.5"}})),
}


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"sharedGpu": False},
        {"integrations": {"hami": {"enabled": True}, "xgpu": {"enabled": True}}},
    ],
    ids=["shipped", "no-shares", "hami-and-xgpu"],
)
def test_the_quantity_twin_judges_counts_as_the_webhook(config: dict[str, Any], tmp_path: Path) -> None:
    """gpu-quantity's twin (quantity's isQuantity, isInteger, compareTo and asInteger over each count,
    the ranges from the same Bounds) fails exactly where the rule does, with its sentence. (A stock
    API server refuses a decimal of an extended resource itself, "must be an integer": the policy
    matters where validation was patched to allow shares, and for the companions' ranges.)"""
    compiled = twins(config, tmp_path)
    fired = {name for name, obj in QUANTITY.items() if "gpu-quantity" in agree(compiled, obj, config)}
    assert {"gpu-1.5", "mig-half", "amd-half", "init-bad", "gpu-requests-apart"} <= fired
    assert not fired & {"gpu-2", "gpu-0", "gpu-1000m", "gpu-1e0", "cpu-half", "gpucores-50", "xgpu-core-10"}
    assert ("gpu-share" in fired) == (config.get("sharedGpu") is False)
    assert ({"gpucores-150", "gpumem-0", "xgpu-core-7", "xgpu-mixed"} <= fired) == ("integrations" in config)
