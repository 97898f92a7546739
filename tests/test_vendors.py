"""The GPU vendors as data (issue 36): the model of the AMD Container Runtime's parsing, the config's
vendor switches, and the invariant on a node that runs the AMD runtime.

The AMD runtime (ROCm/container-toolkit internal/oci/oci.go getAMDEnv, internal/gpu-tracker
parseGPUsList) reads every env entry named AMD_VISIBLE_DEVICES or starting with DOCKER_RESOURCE_,
the last one winning; the kubelet hands it the pod's variables in Go map order (kubelet_pods.go
makeEnvironmentVariables: `for k, v := range tmpEnv`), so which of two such pod entries is last is
not defined: the model below takes the worst order.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AMD_NONE, VOID, container, pod
from webhook.config import DEFAULTS, ConfigError, from_mapping
from webhook.policy import engine, gpus
from webhook.policy.vendors import AMD, INTEL, NVIDIA, OTHERS, VENDORS, amd_grants, prefix_reaches

POLICY = from_mapping({}, environ={}).policy


# ---- The value parser, item by item (parseGPUsList), against the values its source distinguishes.


@pytest.mark.parametrize(
    ("value", "grants"),
    [
        ("all", True),
        ("All", True),
        ("ALL", True),
        ("aLL", False),  # only the three spellings are keywords
        ("none", False),
        ("void", False),
        ("", False),
        ("none,0", True),  # "none" is no keyword: it is ignored, and 0 is GPU 0
        ("all,0", True),  # not exactly "all": item by item, 0 grants
        ("0", True),
        ("+0", True),  # Go's strconv.Atoi takes a sign
        ("7", True),
        ("8", False),  # past the node's 8 GPUs: ignored
        (" 0", False),  # no trimming: Atoi refuses the space
        ("0-3", True),
        ("3-1", False),
        ("8-9", False),
        ("-1", False),  # "-" makes it a range: "" and "1", and Atoi("") fails
        ("0x9999", False),  # a unique id the node lacks
        ("0x1A2B", True),  # ... and one it has, in any case
        ("1a2b3c4d5e", False),  # longer than 8 hex digits: a unique id
    ],
)
def test_amd_runtime_reading(value: str, grants: bool) -> None:
    assert amd_grants(value, gpus=8, unique_ids=frozenset({"0x1a2b"})) is grants


ITEMS = st.sampled_from(["all", "ALL", "none", "void", "", "0", "9", "+1", "0-1", "1-0", "0x1a2b", "abcdef012", " "])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(items=st.lists(ITEMS, max_size=4), gpus=st.integers(0, 16))
def test_what_admission_allows_grants_nothing_on_any_node(items: list[str], gpus: int) -> None:
    """no-visible-devices-env lets an AMD variable through only as an exact AMD.no_devices literal;
    every such value grants nothing on any node, and every value that grants is denied."""
    value = ",".join(items)
    c = container(env=[{"name": "AMD_VISIBLE_DEVICES", "value": value}])
    found = engine.find_violations(pod(c), "", "Pod", POLICY)
    assert found is not None
    denied = any(v.rule == "no-visible-devices-env" for v in found)
    if amd_grants(value, gpus, frozenset({"0x1a2b"})):
        assert denied, value
    assert denied is (value not in AMD.no_devices)
    for literal in AMD.no_devices:
        assert not amd_grants(literal, gpus, frozenset({"0x1a2b"}))


def test_prefix_reaches_the_amd_names() -> None:
    assert prefix_reaches("", AMD) == ("AMD_VISIBLE_DEVICES", "DOCKER_RESOURCE_*")
    assert prefix_reaches("DOCKER_", AMD) == ("DOCKER_RESOURCE_*",)
    assert prefix_reaches("DOCKER_RESOURCE_GPU_", AMD) == ("DOCKER_RESOURCE_*",)
    assert prefix_reaches("APP_", AMD) == ()


# ---- The data: NVIDIA's entry is the top-level defaults, the others join when on.


def test_nvidia_entry_is_the_shipped_defaults() -> None:
    assert DEFAULTS["gpuResourceName"] == NVIDIA.resource
    assert DEFAULTS["gpuDeviceResources"] == list(NVIDIA.devices)
    assert DEFAULTS["gpuNodeLabels"] == list(NVIDIA.node_labels)
    assert DEFAULTS["gpuDeviceClasses"] == list(NVIDIA.device_classes)
    assert all(ns in DEFAULTS["exemptNamespaces"] for v in VENDORS for ns in v.agent_namespaces)
    # AMD's GPUs are known, its runtime's variables are not touched until a fleet says it runs it.
    assert [v.key for v in POLICY.vendors] == ["nvidia", "amd", "intel"] and not POLICY.amd_runtime_env


def test_vendor_switches_add_and_remove_their_names() -> None:
    off = from_mapping({"vendors": {"amd": {"enabled": False}, "intel": {"enabled": False}}}, environ={}).policy
    assert off.vendors == (NVIDIA,) and not off.amd_runtime_env
    assert off.device_resources == NVIDIA.devices and off.gpu_node_labels == NVIDIA.node_labels
    for vendor in OTHERS:
        assert all(n in POLICY.device_resources for n in vendor.devices + vendor.node_wide)
        assert all(n in POLICY.gpu_node_labels for n in vendor.node_labels)
        assert all(n in POLICY.gpu_device_classes for n in vendor.device_classes)
    extended = from_mapping({"gpuDeviceResources": [*NVIDIA.devices, "amd.com/custom"]}, environ={}).policy
    assert extended.device_resources.count("amd.com/custom") == 1  # extending works as for NVIDIA


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"vendors": {"nvidia": {"enabled": False}}}, "vendors.nvidia: unknown key"),
        (
            {"vendors": {"amd": {"runtimeenv": True}}},
            "vendors.amd.runtimeenv: unknown key (did you mean vendors.amd.runtimeEnv?)",
        ),
        ({"vendors": {"intel": {"enabled": "yes"}}}, "vendors.intel.enabled: must be true or false"),
        ({"vendors": []}, "vendors: must be a mapping"),
    ],
)
def test_vendor_config_errors_name_the_key(config: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_mapping(config, environ={})
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


# ---- The invariant on a node that runs the AMD Container Runtime.

# What admission cannot see, at its worst: the image bakes AMD_VISIBLE_DEVICES=all. (An image that
# bakes a DOCKER_RESOURCE_* variable beats any pod entry: docs/policy.md says why admission cannot
# close that door and what the node should do.)
IMAGE_ENV = {"AMD_VISIBLE_DEVICES": "all"}


def _reads(name: str) -> bool:
    return name == "AMD_VISIBLE_DEVICES" or name.startswith("DOCKER_RESOURCE_")


def amd_runtime_gpus(c: dict[str, Any]) -> bool:
    """Whether the AMD runtime adds GPUs to container `c` (the pod as stored): image env, then the
    kubelet's map of envFrom keys (the attacker's ConfigMap holds every key its prefix reaches) and env
    entries, in the worst order; valueFrom is the attacker's value."""
    pod_env: dict[str, str] = {}
    for item in c.get("envFrom") or ():
        for name in prefix_reaches(item.get("prefix") or "", AMD):
            pod_env[name.replace("*", "GPU")] = "all"
    for entry in c.get("env") or ():
        pod_env[entry["name"]] = "all" if entry.get("valueFrom") is not None else (entry.get("value") or "")
    final = {**IMAGE_ENV, **pod_env}
    # The image's entry keeps its place when the pod's replaces it; the pod's come in map order.
    return any(_reads(n) and amd_grants(v) for n, v in final.items())


NAMES = st.sampled_from(
    ["AMD_VISIBLE_DEVICES", "DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_", "PATH", "HIP_VISIBLE_DEVICES"]
)
VALUES = st.sampled_from(["all", "none", "void", "", "0", "none,0", "0-1", " none", "$(X)", "ALL"])
ENTRY = st.builds(lambda n, v: {"name": n, "value": v}, NAMES, VALUES) | st.builds(
    lambda n: {"name": n, "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}, NAMES
)
RESOURCES = st.sampled_from(
    [{}, {"limits": {"amd.com/gpu": 1}}, {"limits": {"nvidia.com/gpu": 1}}, {"claims": [{"name": "g"}]}]
)
ENV_FROM = st.sampled_from(
    [
        None,
        [{"configMapRef": {"name": "cm"}, "prefix": "APP_"}],
        [{"configMapRef": {"name": "cm"}}],
        [{"secretRef": {"name": "s"}, "prefix": "DOCKER_"}],
    ]
)
# The platform whose nodes run the AMD runtime says so (vendors.amd.runtimeEnv: isolation's none and
# amd-runtime-envfrom); under it the invariant covers envFrom too.
ON_AMD_RUNTIME = from_mapping({"vendors": {"amd": {"runtimeEnv": True}}}, environ={}).policy


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    envs=st.lists(st.lists(ENTRY, max_size=3), min_size=1, max_size=3),
    resources=st.lists(RESOURCES, min_size=3, max_size=3),
    env_from=ENV_FROM,
)
def test_no_admitted_container_without_an_amd_gpu_gets_one_from_the_amd_runtime(
    envs: list[list[dict[str, Any]]], resources: list[dict[str, Any]], env_from: Any
) -> None:
    containers = []
    for i, env in enumerate(envs):
        c: dict[str, Any] = {"name": f"c{i}", "image": "rocm/pytorch:latest", "env": env, "resources": resources[i]}
        if env_from:
            c["envFrom"] = env_from
        containers.append(c)
    obj = pod(*containers)
    policy = ON_AMD_RUNTIME
    changes = engine.mutate(engine.pod_view(obj, policy), policy)
    stored = jsonpatch.apply_patch(copy.deepcopy(obj), changes.ops) if changes.ops else obj
    found = engine.find_violations(stored, "", "Pod", policy)
    assert found is not None
    if not engine.judge(found, policy, None).allowed:
        return
    ADMITTED.append(1)
    for before, c in zip(obj["spec"]["containers"], stored["spec"]["containers"], strict=True):
        view = engine.pod_view(stored, policy)
        typed = next(t for t in view.containers if t.name == c["name"])
        # A container holding an NVIDIA device lands on a node that advertises it, which runs
        # NVIDIA's runtime, not AMD's (a node has one runtime for its GPUs): left as written.
        if gpus.plugin_env_gpu(typed, view, policy):
            continue
        if not gpus.vendor_gpu(typed, AMD):
            assert not amd_runtime_gpus(c), (before, c)
            last = [e for e in c["env"] if e["name"] == "AMD_VISIBLE_DEVICES"][-1]
            assert "valueFrom" not in last and last.get("value", "") in AMD.no_devices


ADMITTED: list[int] = []


def test_the_property_admits_pods_and_the_doors_are_real() -> None:
    """The property is not vacuous: it admitted pods; and the model sees the doors amd-runtime-envfrom
    and isolation close (an envFrom without a prefix reaches DOCKER_RESOURCE_*; the image's `all`)."""
    assert len(ADMITTED) >= 20
    voided = {"name": "c", "env": [VOID, AMD_NONE], "envFrom": [{"configMapRef": {"name": "cm"}}]}
    assert amd_runtime_gpus(voided)
    assert amd_runtime_gpus({"name": "c", "env": []})  # the image's `all`, without isolation
    assert not amd_runtime_gpus({"name": "c", "env": [AMD_NONE]})


def test_intel_has_no_variable_to_void() -> None:
    """Intel's plugin grants by device nodes only: isolation adds nothing of Intel's."""
    assert INTEL.grant_env == () and INTEL.isolation is None
    for policy in (POLICY, ON_AMD_RUNTIME):
        ops = engine.mutate(engine.pod_view(pod(container()), policy), policy).ops
        assert ops[0] == {"op": "add", "path": "/spec/containers/0/env", "value": [VOID]}
        assert ops[1:] == (
            [{"op": "add", "path": "/spec/containers/0/env/-", "value": AMD_NONE}] if policy.amd_runtime_env else []
        )


# ---- Every rule, for every vendor where it applies.


@pytest.mark.parametrize("resource", ["amd.com/gpu", "amd.com/cpx_nps4", "gpu.intel.com/i915", "gpu.intel.com/xe"])
def test_every_rule_counts_every_vendors_gpus(resource: str) -> None:
    from tests.helpers import default_policy, run
    from webhook.policy import Mode

    def rules(obj: dict[str, Any], policy: Any = None) -> list[str]:
        return [v.rule for v in run(obj, policy)]

    def gpu(value: Any, **extra: Any) -> dict[str, Any]:
        return container("w", image="rocm/pytorch:latest", resources={"limits": {resource: value}}, **extra)

    assert rules(pod(gpu(1))) == []
    assert rules(pod(gpu("0.5"))) == ["gpu-quantity"]  # whole devices only: no shares by count
    assert rules(pod(gpu(1, privileged=True))) == ["no-privileged-gpu"]
    assert rules(pod(gpu(1), hostIPC=True)) == ["no-host-namespaces-gpu"]
    both = {"limits": {resource: 2}, "requests": {resource: 1}}
    assert rules(pod(container("w", resources=both))) == ["gpu-requests-equal-limits"]
    access = default_policy(
        modes={"gpu-max-per-pod": Mode.DENY, "gpu-namespace-allowed": Mode.DENY},
        gpu_max_per_pod=4,
        gpu_namespaces=frozenset({"ml"}),
    )
    assert rules(pod(gpu(8), namespace="team-x"), access) == ["gpu-max-per-pod", "gpu-namespace-allowed"]
    quantity = run(pod(gpu("0.5")))[0]
    assert "nvidia.com" not in quantity.detail and "MIG" not in quantity.detail


def test_vendor_device_nodes_and_quota_advice() -> None:
    """AMD's /dev/kfd and /dev/dri, Intel's /dev/dri by hostPath give an unprivileged container
    nothing (its device cgroup refuses them: issue 48); privileged, every device node is reported.
    A plain quota key of a vendor's GPU caps nothing (quota counts requests.<name> for extended
    resources)."""
    from tests.helpers import run

    for path in ("/dev/kfd", "/dev/dri", "/dev/dri/renderD128", "/dev//dri/"):
        mount = [{"name": "d", "mountPath": "/dev/x"}]
        obj = pod(container(volumeMounts=mount), volumes=[{"name": "d", "hostPath": {"path": path}}])
        assert run(obj) == [], path
        obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        assert [v.rule for v in run(obj)] == ["node-wide-access"], path
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": "team-a"},
        "spec": {"hard": {"amd.com/gpu": "4", "requests.gpu.intel.com/i915": "2"}},
    }
    from tests.helpers import default_policy
    from webhook.policy import Mode

    (v,) = run(quota, default_policy(modes={"gpu-quota-advice": Mode.WARN}))  # off by default
    assert v.rule == "gpu-quota-advice" and "amd.com/gpu" in v.path and "requests.amd.com/gpu" in v.fix
