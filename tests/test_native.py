"""Issue 35: isolation as a MutatingAdmissionPolicy the API server runs, and its agreement with the webhook.

The chart renders isolate-non-gpu's CEL twin (webhook/policy/mutations/isolate_non_gpu.py) as a
MutatingAdmissionPolicy when `enforcement` is both or native. Here cel-python evaluates it as the
API server does (tests/celnative.py) and the JSONPatch it returns, applied, must equal the pod
the webhook's own patch makes, for every corpus pod, the real-world and edge shapes, and the
adversary property's generated pods. tests/test_real_apiserver.py runs the same policy in a
real kube-apiserver 1.36.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings

from tests.apiserver import ApiServer
from tests.celnative import MutatingPolicy, compile_isolation, environment, plain, program, request
from tests.chart import find, render
from tests.helpers import container, corpus, pod
from tests.test_adversary import pods as adversary_pods
from webhook.admission import mutate
from webhook.admission.review import parse
from webhook.config import from_mapping


def webhook_result(obj: dict[str, Any], config: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """The pod after the webhook's own /mutate patch (the in-process decision the server makes)."""
    policy = from_mapping({"clusterVersion": "1.36", **config}, environ={}).policy
    review = ApiServer.build(obj, **kw)
    outcome = mutate(parse(review), policy)
    return jsonpatch.apply_patch(copy.deepcopy(obj), list(outcome.ops))


class Compiled:
    """Rendered and compiled once per config (kept out of Hypothesis' arguments)."""

    policies: ClassVar[dict[str, MutatingPolicy]] = {}


def isolation(config: dict[str, Any], tmp: Path) -> MutatingPolicy:
    key = repr(sorted(config.items()))
    if key not in Compiled.policies:
        Compiled.policies[key] = compile_isolation({"policy": config}, tmp)
    return Compiled.policies[key]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> MutatingPolicy:
    return isolation({}, tmp_path_factory.mktemp("native"))


def agree(policy: MutatingPolicy, obj: dict[str, Any], config: dict[str, Any] | None = None, **kw: Any) -> None:
    namespace = kw.get("namespace") or obj.get("metadata", {}).get("namespace") or "ml"
    user = kw.get("user", "alice")
    native = policy.apply(obj, request(namespace, user))
    assert native == webhook_result(obj, config or {}, namespace=namespace, user=user), obj


def test_the_kubernetes_cel_functions_added_to_cel_python_behave_as_documented() -> None:
    """The three additions, against the Kubernetes CEL docs' and cel-go's examples."""
    env, _functions = environment()

    def run(expression: str) -> Any:
        return plain(program(env, expression).evaluate({}))

    assert run("lists.range(4)") == [0, 1, 2, 3]  # cel-go ext/lists: "lists.range(4) // returns [0, 1, 2, 3]"
    assert run("lists.range(0)") == []
    assert [run(f"sign(quantity('{q}'))") for q in ("1.5G", "0", "0.0", "-1m", "500m", "0Ki")] == [1, 0, 0, -1, 1, 0]
    # && and || stop at a decisive left operand (cel-go does; cel-python evaluated both sides), and
    # keep CEL's commutative error absorption: an error on one side, a decisive other side.
    assert run("false && 1 / 0 == 1") is False and run("true || 1 / 0 == 1") is True
    assert run("1 / 0 == 1 || true") is True and run("1 / 0 == 1 && false") is False
    assert run("true && false") is False and run("false || true") is True
    with pytest.raises(Exception, match=r"divide by zero|division"):
        run("1 / 0 == 1 && true")
    # The Kubernetes CEL docs: quantity("50k").compareTo(quantity("50M")) == -1, and equal values of
    # other spellings compare as 0.
    assert run("quantity('50k').compareTo(quantity('50M'))") == -1
    assert run("quantity('200M').compareTo(quantity('0.2G'))") == 0
    assert run("quantity('1').compareTo(quantity('1000m'))") == 0
    assert run("quantity('2Gi').compareTo(quantity('2G'))") == 1
    assert run("JSONPatch{op: 'add', path: '/a/-', value: {'b': 1}}") == {
        "op": "add",
        "path": "/a/-",
        "value": {"b": 1},
    }


def test_every_corpus_pod_is_patched_as_the_webhook_patches_it(shipped: MutatingPolicy) -> None:
    compared = 0
    for obj in corpus().values():
        if obj.get("kind") != "Pod":
            continue
        agree(shipped, obj)
        compared += 1
    assert compared >= 20, compared


NVD = "NVIDIA_VISIBLE_DEVICES"
EDGE = {
    "cpu-all": pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
    "gpu-zero": pod(container(gpu="0")),
    "mig": pod({"name": "m", "image": "i", "resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}),
    "time-sliced": pod({"name": "s", "image": "i", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}),
    "companion": pod({"name": "h", "image": "i", "resources": {"limits": {"nvidia.com/gpumem": "4000"}}}),
    "negative": pod({"name": "n", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "-1"}}}),
    "envfrom": pod({"name": "e", "image": "i", "envFrom": [{"configMapRef": {"name": "x"}}]}),
    "envfrom-imex-set": pod(
        {
            "name": "e",
            "image": "i",
            "env": [{"name": "NVIDIA_IMEX_CHANNELS", "value": "void"}],
            "envFrom": [{"configMapRef": {"name": "x"}, "prefix": "NVIDIA_"}],
        }
    ),
    "void-last": pod(
        container(
            env=[
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
            ]
        )
    ),
    "none-then-all": pod(
        container(
            env=[
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            ]
        )
    ),
    "init-sidecar": pod(
        container("train", gpu="1"), initContainers=[{"name": "s", "image": "i", "restartPolicy": "Always"}]
    ),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_edge_shapes(name: str, shipped: MutatingPolicy) -> None:
    agree(shipped, EDGE[name])


def test_exemptions_and_kai_as_the_config_says(tmp_path: Path) -> None:
    """Namespaces, users and service accounts exempt; KAI's fraction container left its GPU."""
    config = {
        "exemptNamespaces": ["research"],
        "exemptUsernames": ["system:serviceaccount:ci:deployer"],
        "exemptServiceAccounts": ["monitoring/dcgm"],
        "integrations": {"kai": {"enabled": True}},
    }
    policy = isolation(config, tmp_path)
    cpu = pod(container("app"), namespace="research")
    assert policy.ops(cpu, request("research")) is None
    agree(policy, cpu, config, namespace="research")
    assert policy.ops(pod(container("app")), request("ml", "system:serviceaccount:ci:deployer")) is None
    agent = pod(container("exporter"), namespace="monitoring", serviceAccountName="dcgm")
    assert policy.ops(agent, request("monitoring")) is None
    agree(policy, agent, config, namespace="monitoring")
    for kai_annotations in ({"gpu-fraction": "0.5"}, {"gpu-memory": "2000", "gpu-fraction-container-name": "b"}):
        kai = pod(container("a"), container("b"), schedulerName="kai-scheduler")
        kai["metadata"]["annotations"] = kai_annotations
        agree(policy, kai, config)


@pytest.mark.parametrize(
    "vendors",
    [{}, {"amd": {"runtimeEnv": True}}, {"amd": {"enabled": False}}, {"intel": {"enabled": False}}],
)
def test_amd_isolation_follows_the_vendor_switches(vendors: dict[str, Any], tmp_path: Path) -> None:
    """Issue 36: the chart's vendors values reach the twin as they reach the webhook's config."""
    config = {"vendors": vendors} if vendors else {}
    policy = isolation(config, tmp_path)
    fleet = pod(
        container("cpu"),
        container("nvidia", gpu=1),
        container("rocm", resources={"limits": {"amd.com/gpu": 1}}),
        container("intel", resources={"limits": {"gpu.intel.com/i915": 1}}),
        container("claim", resources={"claims": [{"name": "g"}]}),
        initContainers=[container("init", env=[{"name": "AMD_VISIBLE_DEVICES", "value": "all"}])],
        resourceClaims=[{"name": "g", "resourceClaimTemplateName": "t"}],
    )
    agree(policy, fleet, config)
    stored = policy.apply(fleet, request())
    amd_on = vendors.get("amd", {}).get("runtimeEnv", False)  # the one AMD switch (issue 48)
    cpu = next(c for c in stored["spec"]["containers"] if c["name"] == "cpu")
    assert ({"name": "AMD_VISIBLE_DEVICES", "value": "none"} in cpu["env"]) is amd_on


def test_ephemeral_containers_added_by_kubectl_debug(shipped: MutatingPolicy) -> None:
    """pods/ephemeralcontainers UPDATE: only the containers the old pod lacked are voided."""
    old = pod(container("train", gpu="1"))
    old["spec"]["ephemeralContainers"] = [{"name": "d1", "image": "busybox"}]
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"].append({"name": "d2", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"})
    native = shipped.apply(new, request(operation="UPDATE"), old)
    review = ApiServer.build(new, operation="UPDATE", old=old, sub_resource="ephemeralcontainers")
    outcome = mutate(parse(review), from_mapping({"clusterVersion": "1.36"}, environ={}).policy)
    assert native == jsonpatch.apply_patch(copy.deepcopy(new), list(outcome.ops))
    assert "env" not in native["spec"]["ephemeralContainers"][0]
    assert native["spec"]["ephemeralContainers"][1]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]


class Seen:
    patched = 0
    compared = 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(obj=adversary_pods())
def _agreement(obj: dict[str, Any]) -> None:
    policy = next(iter(Compiled.policies.values()))
    native = policy.apply(obj, request())
    assert native == webhook_result(obj, {}), obj
    Seen.compared += 1
    Seen.patched += native != obj


def test_the_adversary_property_pods_are_patched_alike(shipped: MutatingPolicy) -> None:
    """The adversary property's grammar (tests/test_adversary.py): control characters, `$(…)`,
    envFrom prefixes, claims, resources of every kind, init and ephemeral containers."""
    Compiled.policies = {"": shipped}
    _agreement()
    print(f"\nadversary pods: {Seen.compared} compared, {Seen.patched} patched by both alike")
    assert Seen.compared >= 300 and Seen.patched > 50


@pytest.mark.parametrize(
    ("enforcement", "kube", "policies", "mutating"),
    [
        ("auto", "1.36.0", True, True),
        ("auto", "1.30.0", False, True),
        ("webhook", "1.36.0", False, True),
        ("both", "1.36.0", True, True),
        ("native", "1.36.0", True, False),
    ],
)
def test_enforcement_modes(enforcement: str, kube: str, policies: bool, mutating: bool, tmp_path: Path) -> None:
    docs = render({"enforcement": enforcement}, kube_version=kube, tmp=tmp_path)
    assert isinstance(docs, list)
    for doc in docs:  # the policies and bindings too, against the Kubernetes schemas of that version
        if not doc["apiVersion"].startswith("cert-manager.io/"):
            kubernetes_validate.validate(doc, kube, strict=True)
    kinds = {d["kind"] for d in docs}
    assert ("MutatingAdmissionPolicy" in kinds) is policies
    assert ("MutatingAdmissionPolicyBinding" in kinds) is policies
    assert ("MutatingWebhookConfiguration" in kinds) is mutating
    assert "ValidatingWebhookConfiguration" in kinds  # every rule still needs the webhook
    if policies:
        spec = find(docs, "MutatingAdmissionPolicy")["spec"]
        assert spec["failurePolicy"] == "Fail" and "paramKind" not in spec
        binding = find(docs, "MutatingAdmissionPolicyBinding")["spec"]
        assert "paramRef" not in binding and binding["matchResources"]["namespaceSelector"]


def test_native_keeps_the_mutating_webhook_for_what_cel_does_not_carry(tmp_path: Path) -> None:
    docs = render(
        {"enforcement": "native", "policy": {"acceleratorNodeSelector": {"default": "nvidia-t4"}}},
        kube_version="1.36.0",
        tmp=tmp_path,
    )
    assert isinstance(docs, list)
    (hook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    (condition,) = hook["matchConditions"]  # only GPU pods: isolation is the API server's
    assert "'nvidia.com/gpu' in c.resources.limits" in condition["expression"]
    assert "NVIDIA_VISIBLE_DEVICES" not in condition["expression"]


def test_both_or_native_on_a_cluster_without_mutating_admission_policy_fails_saying_why(tmp_path: Path) -> None:
    result = render({"enforcement": "both"}, kube_version="1.30.0", tmp=tmp_path, check=False)
    assert isinstance(result, subprocess.CompletedProcess) and result.returncode != 0
    assert "enforcement both needs MutatingAdmissionPolicy (admissionregistration.k8s.io/v1" in result.stderr


def test_the_cli_renders_the_same_policy_the_chart_does(tmp_path: Path) -> None:
    """`mutate --engine cel` fills the twin's @values@ from the policy, the chart from its values:
    the same names, and the same patches for a config that uses every one of them."""
    from webhook.buildtime import native as chart_native
    from webhook.offline import native as cli_native
    from webhook.policy.mutations.isolate_non_gpu import NATIVE

    assert set(cli_native.VALUES) == set(chart_native.VALUES)
    config = {
        "exemptNamespaces": ["research"],
        "exemptUsernames": ["ci"],
        "exemptServiceAccounts": ["monitoring/dcgm"],
        "integrations": {"kai": {"enabled": True}},
        "gpuDeviceResources": ["nvidia.com/gpu", "example.com/*-gpu"],
        "gpuCompanionResources": ["example.com/gpu-mem"],
    }
    charted = isolation(config, tmp_path)
    policy = from_mapping({"clusterVersion": "1.36", **config}, environ={}).policy
    cli = cli_native.MutatingPolicy.of(NATIVE, policy)
    cases = [
        (pod({"name": "a", "image": "i", "resources": {"limits": {"example.com/big-gpu": "1"}}}), request()),
        (pod({"name": "a", "image": "i", "resources": {"limits": {"example.com/gpu-mem": "1"}}}), request()),
        (pod(container("a")), request("research")),
        (pod(container("a")), request(user="ci")),
        (pod(container("a"), namespace="monitoring", serviceAccountName="dcgm"), request("monitoring")),
        (pod(container("a"), schedulerName="kai-scheduler"), request()),
    ]
    cases[-1][0]["metadata"]["annotations"] = {"gpu-fraction": "0.5"}
    for obj, req in cases:
        assert cli.ops(obj, req) == charted.ops(obj, req), obj


def test_mutate_engine_cel_prints_what_the_webhook_engine_prints_for_the_corpus() -> None:
    import sys

    corpus_dir = Path(__file__).parent / "corpus"
    outputs = [
        subprocess.run(
            [sys.executable, "-m", "webhook", "mutate", *engine, str(corpus_dir)],
            capture_output=True,
            text=True,
            check=False,
        )
        for engine in ([], ["--engine", "cel"])
    ]
    assert outputs[0].stdout.count("kind: Pod") >= 20
    assert outputs[1].stdout == outputs[0].stdout and outputs[1].returncode == outputs[0].returncode

    def refused(stderr: str) -> list[str]:
        # What is refused, and by whom: a rule's policy names its first finding only (the webhook all).
        return [line.split(" would still refuse it")[0] for line in stderr.splitlines()]

    # A MutatingAdmissionPolicy cannot warn: the webhook's one-line notice to a GPU image voided
    # for want of a request (issue 48) is the webhook's alone.
    told = "runs a GPU image but requests no GPU"
    webhook = [line for line in refused(outputs[0].stderr) if told not in line]
    native = refused(outputs[1].stderr)
    assert len(native) == len(webhook) >= 20
    for w, n in zip(webhook, native, strict=True):
        assert n == w or (n == w.replace("the validating webhook", "the API server") and ": Pod " in w), (w, n)
