"""Which pods reach the policy: the chart's CEL selects every pod it acts on.

It is derived from the rules' triggers (webhook.buildtime.generate); a condition that is too narrow is a
silent bypass. So, for several policies, the chart is rendered with a real helm, its
matchConditions are evaluated with a CEL implementation (cel-python), and for every pod the
policy would deny, warn about, audit or patch, the CEL must say "send it". The pods: the corpus
(templates as the pods they become), the benchmark's pods, each rule's own example, and fuzzed
pods that still pass the Kubernetes Pod schema (only those can reach a webhook: the API server
decodes into typed objects first).
"""

from __future__ import annotations

import copy
import functools
import random
from pathlib import Path
from typing import Any, Final

import pytest

from bench.reviews import pods
from tests.celconditions import compile_conditions, sent
from tests.helpers import container, corpus, junk, nodes, pod, replace
from webhook.config import default_policy, from_mapping
from webhook.policy import ALL_RULES, RULES, Mode, Policy, ShapeError, engine
from webhook.policy.objects import find_templates
from webhook.policy.templates import expand

# Policies as platform teams write them (values.policy = the config file).
CONFIGS: dict[str, dict[str, Any]] = {
    "shipped, old cluster, default model": {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "t4"}},
    # A fleet whose nodes run the AMD runtime: AMD's isolation patches nearly every pod too.
    "AMD runtime": {"clusterVersion": "1.27", "vendors": {"amd": {"runtimeEnv": True}}},
    # Every rule denies: the fail-closed webhook must then see all the others would report.
    "everything denies": {"clusterVersion": "1.27", "rules": {r.id: "deny" for r in ALL_RULES}},
    "isolation off": {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "t4"}, "isolateNonGpu": False},
    "renamed resource and label, some rules off": {
        "clusterVersion": "1.25",
        "gpuResourceName": "nvidia.com/mig-1g.5gb",
        "acceleratorNodeSelector": {"labelKey": "cloud.google.com/gke-accelerator", "default": "nvidia-l4"},
        "isolateNonGpu": False,
        "rules": {"no-visible-devices-env": "off", "gpu-quantity": "audit", "visible-devices-envfrom": "deny"},
    },
}

AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "accelerator", "operator": "Exists"}]}]
        }
    }
}
NVD_ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
AMD_ALL = [{"name": "AMD_VISIBLE_DEVICES", "value": "all"}]
# Hand-picked corners: every container list, every way to be a GPU pod.
HAND = {
    "visible devices in init": pod(container(), initContainers=[container("i", env=NVD_ALL)]),
    "visible devices in ephemeral": pod(container(), ephemeralContainers=[container("d", env=NVD_ALL)]),
    "privileged sidecar pinned by selector": pod(container(privileged=True), nodeSelector={"accelerator": "t4"}),
    "sys_admin pinned by affinity": pod(container(caps=["SYS_ADMIN"]), affinity=AFFINITY),
    "privileged ephemeral in gpu pod": pod(container(gpu=1), ephemeralContainers=[container("d", privileged=True)]),
    "gpu in init only": pod(container(), initContainers=[container("i", gpu=1)]),
    "requests only": pod(container(request="1")),
    "plain web pod": pod(container("web", env=[{"name": "PORT", "value": "80"}])),
    # The AMD Container Runtime's variables (webhook.policy.vendors): by name, and by prefix.
    "amd visible devices in init": pod(container(), initContainers=[container("i", env=AMD_ALL)]),
    "docker resource in ephemeral": pod(
        container(), ephemeralContainers=[container("d", env=[{"name": "DOCKER_RESOURCE_GPU", "value": "0"}])]
    ),
    "privileged pinned to AMD nodes": pod(
        container(privileged=True), nodeSelector={"amd.com/gpu.product-name": "AMD_Instinct_MI300X"}
    ),
    "hostIPC pinned to Intel nodes": pod(
        container(), hostIPC=True, nodeSelector={"intel.feature.node.kubernetes.io/gpu": "true"}
    ),
    "amd gpu": pod(container("a", resources={"limits": {"amd.com/gpu": 1}})),
    "intel monitoring": pod(container("m", resources={"limits": {"gpu.intel.com/monitoring": 1}})),
    # For the renamed-resource policy: a MIG request, and a GKE accelerator label.
    "mig request": pod(container(resources={"limits": {"nvidia.com/mig-1g.5gb": 1}})),
    "mig 1.5": pod(container(resources={"limits": {"nvidia.com/mig-1g.5gb": "1.5"}})),
    "privileged on gke gpu nodes": pod(
        container(privileged=True), nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-l4"}
    ),
}
REPORT = "pods-report.validate.gpu-policy.io"  # the fail-open twin of the pods webhook
SHIPPED = from_mapping(CONFIGS["shipped, old cluster, default model"], environ={}).policy
FUZZ_ROUNDS = 8  # per base pod and seed; only schema-valid results are kept


def as_pods(obj: dict[str, Any], policy: Policy) -> list[dict[str, Any]]:
    """`obj` if it is a Pod, else the Pods its templates become."""
    if obj.get("kind") == "Pod":
        return [obj]
    group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
    templates = find_templates(group, obj["kind"], policy)
    out = []
    for pattern in templates.paths if templates else ():
        for keys in expand(obj, pattern):
            node: Any = obj
            for key in keys:
                node = node[key]
            meta = {"name": "from-template", "namespace": "ml", **node.get("metadata", {})}
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": node["spec"]})
    return out


def example_pod(rule: Any) -> dict[str, Any]:
    """The rule's example as a Pod: itself, or the pod its template makes (gpu-job-deadline's Job)."""
    if rule.example.get("kind", "Pod") != "Pod":
        return as_pods(rule.example, default_policy())[0]
    meta = {"name": "ex", **rule.example.get("metadata", {})}
    return {"apiVersion": "v1", "kind": "Pod", **rule.example, "metadata": meta}


@functools.cache
def pod_schema() -> Any:
    """kubernetes-validate's Pod schema for 1.30 (strict), as one validator built once:
    `kubernetes_validate.validate` parses its 3 MB of definitions on every call (19 ms), which
    made collecting this module take 50 s when the population was built at import."""
    import jsonschema
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    folder = "kubernetes-json-schema/v1.30.0-local-strict"
    schema = schema_contents(f"{folder}/pod-v1.json", "1.30.0")
    definitions = schema_contents(f"{folder}/_definitions.json", "1.30.0")
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def fuzzed(bases: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(seed, pod) for every schema-valid pod the seeds make from `bases`."""
    out = []
    validator = pod_schema()
    for seed in range(3):
        rng = random.Random(seed)
        for base in bases:
            for _ in range(FUZZ_ROUNDS):
                obj = copy.deepcopy(base)
                path = rng.choice([p for p in nodes(obj) if len(p) > 2 and p[0] == "spec"])
                obj = replace(obj, path, junk(rng))
                try:
                    if not validator.is_valid(obj):
                        continue
                except Exception:
                    continue
                try:
                    engine.find_violations(obj, "", "Pod", SHIPPED)
                except ShapeError:
                    continue  # denied as malformed (code 400) wherever it is sent, and the API server rejects it
                out.append((seed, obj))
    return out


@functools.cache
def population() -> dict[str, dict[str, Any]]:
    """Built on first use, not at import: collecting the suite must take seconds."""
    shipped = SHIPPED
    found: dict[str, dict[str, Any]] = {}
    for name, obj in corpus().items():
        for i, p in enumerate(as_pods(obj, shipped)):
            found[f"corpus {name} #{i}"] = p
    for name, p in pods().items():
        found[f"bench {name}"] = p
    for rule in RULES:
        found[f"example {rule.id}"] = example_pod(rule)
    for name, p in HAND.items():
        found[f"hand {name}"] = p
    bases = [p for p in found.values()]
    for i, (seed, p) in enumerate(fuzzed(bases)):
        found[f"fuzzed seed {seed} #{i}"] = p
    return found


# The configurations judged on every fuzzed pod; the others on the first seed's (a third: the
# CEL evaluation of the whole population is the test loop's slowest part, and their conditions
# differ from these in the values, not in the shape the fuzz exercises).
EVERY_SEED: Final = frozenset({"shipped, old cluster, default model", "everything denies"})


@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_everything_the_policy_acts_on_is_sent(config_name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    config = CONFIGS[config_name]
    policy = from_mapping(config, environ={}).policy
    conditions = compile_conditions(config, tmp_path_factory.mktemp("cel"))
    acted = {"validate": 0, "mutate": 0, "ignored": 0}
    for name, obj in population().items():
        if name.startswith("fuzzed seed ") and not name.startswith("fuzzed seed 0 ") and config_name not in EVERY_SEED:
            continue
        view = engine.pod_view(obj, policy)
        try:
            violates = bool(engine.pod_violations(view, policy))
            mutates = bool(engine.mutate(view, policy).ops)
        except ShapeError:
            continue  # denied as malformed (code 400) wherever it is sent
        if violates:
            acted["validate"] += 1
            closed = sent(conditions["pods.validate.gpu-policy.io"], obj)
            if any(policy.mode(v.rule) is Mode.DENY for v in engine.pod_violations(view, policy)):
                assert closed, f"{name}: the fail-closed CEL skips a pod a deny rule refuses"
            report = conditions.get(REPORT, [])  # absent: no rule reports
            assert closed or (report != [] and sent(report, obj)), f"{name}: CEL skips a pod the rules judge"
        if mutates:
            acted["mutate"] += 1
            assert sent(conditions["mutate.gpu-policy.io"], obj), f"{name}: CEL skips a pod the mutations patch"
        if not violates and not mutates:
            acted["ignored"] += 1
    # The population must exercise both sides, or the property proves nothing (with AMD's isolation
    # on, every pod without an AMD GPU is patched: nothing is left untouched).
    assert acted["validate"] >= 3 and acted["mutate"] >= 1, acted
    assert acted["ignored"] >= (0 if policy.amd_runtime_env and policy.isolate_non_gpu else 5), acted
    assert sum(name.startswith("fuzzed") for name in population()) >= 100


def test_plain_pods_skip_the_pods_webhook(tmp_path: Path) -> None:
    conditions = compile_conditions(CONFIGS["shipped, old cluster, default model"], tmp_path)
    assert not sent(conditions["pods.validate.gpu-policy.io"], HAND["plain web pod"])
    assert not sent(conditions["pods.validate.gpu-policy.io"], pod(container(resources={"limits": {"cpu": "1"}})))


def test_every_rule_example_is_judged_by_its_rule() -> None:

    policy = default_policy(modes={r.id: Mode.DENY for r in ALL_RULES})  # rules off by default too
    for rule in ALL_RULES:
        if rule in RULES:
            judged_by = engine.example_policy(rule, policy)
            views = engine.example_views(rule, judged_by)
            found = [v for view in views for v in engine.pod_violations(view, judged_by)]
        else:
            found = rule.check(rule.example, policy)
        assert rule.id in {v.rule for v in found}, rule.id


def test_a_rule_switched_off_drops_its_condition(tmp_path: Path) -> None:
    off = {"rules": {r.id: "off" for r in RULES}}
    conditions = compile_conditions(off, tmp_path)
    everything = pod(container(gpu=1, privileged=True, env=NVD_ALL), hostPID=True)
    assert not sent(conditions["pods.validate.gpu-policy.io"], everything)


def test_a_pod_update_is_sent_only_when_it_adds_a_device_annotation(tmp_path: Path) -> None:
    """Issue 48, attack 11: a pod's annotations change after admission, and a sandbox made anew reads
    them again; label, finalizer and status updates never reach the fail-closed webhook."""
    conditions = compile_conditions(CONFIGS["shipped, old cluster, default model"], tmp_path)
    hook = conditions["pods.validate.gpu-policy.io"]
    old = pod(container(gpu=1))
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"team": "a"}
    relabelled["metadata"]["annotations"] = {"note": "x"}
    assert not sent(hook, relabelled, operation="UPDATE", old=old, sub_resource="")
    for key in ("devices.gke.io/container.c", "cdi-devices.nri.io", "nvidia.cdi.k8s.io", "devices.crio.io"):
        added = copy.deepcopy(relabelled)
        added["metadata"]["annotations"][key] = "- path: /dev/nvidia1\n"
        assert sent(hook, added, operation="UPDATE", old=old, sub_resource=""), key
        assert not sent(hook, added, operation="UPDATE", old=added, sub_resource=""), key  # unchanged
    assert sent(hook, old, operation="CREATE")
