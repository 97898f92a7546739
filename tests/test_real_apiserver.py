"""Issue 32 against a REAL kube-apiserver v1.36 (binaries in $KUBE136_BIN, see
tests/realapi.py; tests/realapi.py starts it; skipped where it is absent): the default
chart's two webhooks, as rendered by helm, registered with the API server and pointed at the real
server process on loopback; pods created with dryRun=All, so the API server runs its own defaulting
and validation, our mutating webhook (its patch applied by the API server), then our validating
webhook behind its matchConditions evaluated on the mutated pod by the API server's own CEL.

What it shows that the stand-ins cannot: that the API server accepts `$(a,void,b)` after a variable
named `a,void,b` and a value with \\x1c (relaxed env names and values) so only the webhook stands
between them and the node, that our patch is what it applies, and which pods its CEL sends to the
validating webhook after isolation's `void`.

Issue 35 (native policies, with no webhook registered at all): the MutatingAdmissionPolicy patches
every corpus pod as the webhook does, and the rules' ValidatingAdmissionPolicies refuse exactly the
pods cel-python's evaluation of the same policies refuses, with the same message. What only the
real server shows: a policy's denial is 403 (reason Forbidden) and names one policy, the first that
denied, and of it the first failed validation; validation runs before the validating policies (a
pod the API server finds invalid never reaches them).

What each costs a pod create (native policies against our webhooks) is measured by
`make bench-native` (bench/native.py), in alternating rounds: a timed assertion here failed on a
loaded machine's noise (the webhooks once measured +0.8 ms, the MAP +4.7 ms, in the same run).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.chart import render
from tests.helpers import Server
from tests.realapi import SKIP, RealApi, available, running, webhook_configs

pytestmark = pytest.mark.skipif(not available(), reason=SKIP)
CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


@pytest.fixture(scope="module")
def real_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApi]:
    with running(tmp_path_factory.mktemp("kube136")) as client:
        yield client


@pytest.fixture(scope="module")
def webhooks(
    real_api: RealApi, start_server: Callable[..., Server], tmp_path_factory: pytest.TempPathFactory
) -> Server:
    """The default chart's webhook configurations, pointed at the real server process."""
    server = start_server({"clusterVersion": "1.36"})  # the shipped limits: maxRequestBytes 19 MiB
    docs = render({}, kube_version="1.36.0", tmp=tmp_path_factory.mktemp("chart"))
    assert isinstance(docs, list)
    configs = webhook_configs(docs, server.port, (server.cert_dir / "ca.crt").read_bytes())
    assert [c["kind"] for c in configs] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    real_api.create_all(configs, ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"))
    # Webhook configurations take effect within a second or two: wait until a probe is voided.
    probe = pod(c("probe"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code, body, _ = real_api.create_pod(probe)
        if code == 201 and body["spec"]["containers"][0].get("env"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the webhooks never took effect")
    return server


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "attack-", "namespace": "ml"},
        "spec": {"containers": list(containers), **spec},
    }


def c(name: str = "app", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": CUDA, **fields}


def nvd(value: str) -> dict[str, str]:
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}


def pods_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a corpus object makes: itself, or its pod templates (Deployment-like, CronJob)."""
    if obj.get("kind") == "Pod":
        return [copy.deepcopy(obj)]
    spec = obj.get("spec") or {}
    template = spec.get("template") or ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return []
    meta = {k: v for k, v in (template.get("metadata") or {}).items() if k in ("labels", "annotations")}
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template["spec"])}]


CONTROLLERS = {
    ("v1", "PodTemplate"), ("v1", "ReplicationController"), ("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"), ("batch/v1", "CronJob"),
}  # fmt: skip
ROOT_OF = {"PodTemplate": "template", "Deployment": "spec-template", "CronJob": "spec-jobtemplate-spec-template"}
SAID: dict[str, str] = {}  # what the real API server said, printed for the closing notes


def env_of(container: dict[str, Any]) -> list[tuple[str, str, bool]] | None:
    env = container.get("env")
    return None if env is None else [(e["name"], e.get("value", ""), "valueFrom" in e) for e in env]


def test_native_isolation_in_the_real_api_server_with_no_webhook(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 35: the chart's MutatingAdmissionPolicy (enforcement both, as rendered for 1.36),
    created in the real API server with no webhook registered at all (the outage). Every corpus
    pod (and each corpus workload's pod template) is created with dryRun: the env the API server
    gives each container must be exactly what the webhook's own patch gives it. Runs before the
    webhooks fixture exists, and removes the policy after."""
    from tests.apiserver import ApiServer
    from tests.helpers import corpus
    from webhook.admission import mutate
    from webhook.admission.review import parse
    from webhook.config import default_policy

    docs = render({"enforcement": "both"}, kube_version="1.36.0", tmp=tmp_path_factory.mktemp("native"))
    assert isinstance(docs, list)
    created = real_api.create_all(docs, ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"))
    try:
        probe = pod(c("probe"))
        deadline = time.monotonic() + 30
        while True:
            code, body, _ = real_api.create_pod(probe)
            if code == 201 and body["spec"]["containers"][0].get("env"):
                break
            assert time.monotonic() < deadline, ("the policy never took effect", code, body)
            time.sleep(0.5)
        policy = default_policy(cluster_version=(1, 36))
        compared = refused = 0
        gpu = {"limits": {"nvidia.com/gpu": 1}}
        shapes = {
            "cpu-all": pod(c(env=[nvd("all")])),
            "gpu-zero": pod(c(resources={"limits": {"nvidia.com/gpu": 0}})),
            "mig": pod(c(resources={"limits": {"nvidia.com/mig-1g.5gb": 1}})),
            "time-sliced": pod(c(resources={"limits": {"nvidia.com/gpu.shared": 1}})),
            "companion-only": pod(c(resources={"limits": {"nvidia.com/gpumem": 4000}})),
            "envfrom-cpu": pod(c(envFrom=[{"configMapRef": {"name": "x"}}])),
            "envfrom-prefixed": pod(c(env=[nvd("0")], envFrom=[{"configMapRef": {"name": "x"}, "prefix": "NVIDIA_"}])),
            "init-and-gpu": pod(c("train", resources=gpu), initContainers=[c("fetch", image="busybox")]),
            "already-void": pod(c(env=[nvd("all"), nvd("void")])),
            "void-then-all": pod(c(env=[nvd("void"), nvd("all")])),
            "value-from": pod(
                c(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
            ),
            "claim": pod(
                c(resources={"claims": [{"name": "g"}]}),
                resourceClaims=[{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
            ),
        }
        cases = {name: pods_of(obj) for name, obj in corpus().items()} | {k: [v] for k, v in shapes.items()}
        for name, made in cases.items():
            for p in made:
                p["metadata"] = {**p.get("metadata", {}), "generateName": "corpus-", "namespace": "ml"}
                p["metadata"].pop("name", None)
                code, body, _ = real_api.create_pod(p)
                if code != 201:
                    refused += 1  # the API server's own validation (e.g. a hostPort clash): not ours
                    # A policy's denial names the policy and its binding, not its kind: a CEL error on
                    # a pod without `containers` (null in the typed object) once hid here as "validation".
                    said = json.dumps(body)
                    assert "MutatingAdmissionPolicy" not in said and "isolate-non-gpu" not in said, (name, body)
                    continue
                # The webhook's patch, on the pod as the API server sent it to admission.
                review = ApiServer.build(p, namespace="ml")
                outcome = mutate(parse(review), policy)
                expected = jsonpatch.apply_patch(copy.deepcopy(p), list(outcome.ops))
                for field in ("initContainers", "containers"):
                    # Entries as (name, value, from elsewhere): the API server defaults what valueFrom holds.
                    got = [env_of(c_) for c_ in body["spec"].get(field, [])]
                    want = [env_of(c_) for c_ in expected["spec"].get(field, [])]
                    assert got == want, (name, field, got, want)
                compared += 1
        print(
            f"\nnative isolation, real API server, no webhook: {compared} pods patched as the webhook does, "
            f"{refused} refused by the API server's own validation"
        )
        assert compared > 40
        # kubectl debug during the outage: the debug container added to a running pod is voided.
        trainer = pod(c("train", resources={"limits": {"nvidia.com/gpu": 1}}))
        trainer["metadata"] = {"name": "debugged", "namespace": "ml"}
        code, running, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", trainer)
        assert code == 201, running
        running["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": CUDA, "targetContainerName": "train"}]
        code, body, _ = real_api.call("PUT", "/api/v1/namespaces/ml/pods/debugged/ephemeralcontainers", running)
        assert code == 200, body
        assert body["spec"]["ephemeralContainers"][0]["env"] == [nvd("void")]
        assert "env" not in body["spec"]["containers"][0]  # the GPU container: left as written
        real_api.call("DELETE", "/api/v1/namespaces/ml/pods/debugged")
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


def split_by_action(
    compiled: dict[str, Any], failed: dict[str, list[str]]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The failed policies' messages: of those bound with Deny (they refuse), and with Warn."""
    deny = {rule: m for rule, m in failed.items() if m and compiled[rule][1] == ["Deny"]}
    warn = {rule: m for rule, m in failed.items() if m and compiled[rule][1] == ["Warn"]}
    return deny, warn


def alone(rule: str) -> dict[str, str]:
    """Rule modes with `rule` the only twin on (deny): its policy on Pods holds it alone."""
    from webhook.policy import ALL_RULES

    return {r.id: "deny" if r.id == rule else "off" for r in ALL_RULES if r.native is not None}


def said_by(rule: str, text: str) -> bool:
    """The API server's answer carries `rule`'s sentence (one policy per mode holds every twin of
    that mode, so the policy's name does not say which rule failed; the sentence does)."""
    return f"GPU policy: {rule} (" in text and "AdmissionPolicy 'gpu-policy-rules-" in text


def assert_warned(warnings: list[str], warned: dict[str, list[str]], name: str) -> None:
    """The API server's Warning headers (RFC 7234 `299 - "text"`, its quotes escaped) name exactly
    the warn-mode policies that failed, each with its first failed validation's message."""
    # http.client reads a header as Latin-1; the API server wrote UTF-8 (a "\u3000" in a value).
    texts = [w.encode("latin-1").decode("utf-8").replace('\\"', '"') for w in warnings]
    texts = [t for t in texts if "AdmissionPolicy 'gpu-policy-rules-" in t]
    for policy, messages in warned.items():
        assert any(said_by(policy, t) and messages[0] in t for t in texts), (name, policy, texts)
    assert len(texts) == len(warned), (name, sorted(warned), texts)


def _until_each_policy_refuses_its_example(real_api: RealApi, compiled: dict[str, Any]) -> None:
    """Each policy takes effect on its own, within seconds of its creation: until every rule's
    README example is refused by that rule's own policy (one probe would prove only one)."""
    from webhook.config import default_policy
    from webhook.policy import ALL_RULES
    from webhook.policy.rule import SWITCHES

    shipped = default_policy()
    # A rule whose switch is off as shipped (amd-runtime-envfrom: no AMD runtime declared) fires on nothing.
    examples = {
        r.id: copy.deepcopy(r.example)
        for r in ALL_RULES
        if r.id in compiled and (not getattr(r, "switch", "") or getattr(shipped, SWITCHES[r.switch]))
    }
    for example in examples.values():  # as stored: the API server requires an image
        for container in example["spec"]["containers"]:
            container.setdefault("image", CUDA)
    deadline = time.monotonic() + 30
    last: dict[str, tuple[int, str]] = {}
    while examples:
        for rule, example in list(examples.items()):
            probe = {"apiVersion": "v1", "kind": "Pod", **example}
            probe["metadata"] = {**example.get("metadata", {}), "generateName": "probe-", "namespace": "ml"}
            code, body, warnings = real_api.create_pod(probe)
            last[rule] = (code, body.get("message", "") + " ".join(warnings))
            refused = code == 403 and compiled[rule][1] == ["Deny"]
            warned = code == 201 and compiled[rule][1] == ["Warn"]
            if (refused or warned) and said_by(rule, last[rule][1]):
                del examples[rule]
            elif code == 422:  # the API server's own validation refuses it first (gpu-quantity's
                # 1.5 GPUs: "must be an integer"), so no policy can; its mode's policy is proven
                # in effect by the other rules it holds
                SAID[f"{rule}'s example"] = last[rule][1]
                del examples[rule]
        assert time.monotonic() < deadline, ("policies that never took effect", {r: last[r] for r in examples})
        time.sleep(0.2)


@pytest.mark.timeout(600)
def test_native_rules_in_the_real_api_server_with_no_webhook(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 35: everything enforcement both installs in the API server (isolation's
    MutatingAdmissionPolicy, the rules' ValidatingAdmissionPolicies, their bindings), with no
    webhook registered at all (the outage). Every corpus pod, each corpus workload's pod template
    and the edge shapes of tests/test_native_rules.py are created with dryRun: the API server
    refuses exactly the pods cel-python's evaluation of the same policies fails, with the same
    messages, and those are the pods whose twinned rules the webhook finds violated. Then
    `kubectl debug` adding a debug container that sets NVIDIA_VISIBLE_DEVICES is refused too."""
    from tests.celnative import compile_validations, request
    from tests.helpers import corpus
    from tests.test_native_rules import EDGE, through_the_webhook

    tmp = tmp_path_factory.mktemp("native-rules")
    docs = render({"enforcement": "both"}, kube_version="1.36.0", tmp=tmp)
    assert isinstance(docs, list)
    compiled = compile_validations({}, tmp)
    assert len(compiled) >= 2
    created = real_api.create_all(
        docs,
        (
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ),
    )
    try:
        # The RuntimeClass admission plugin refuses a pod whose runtime class does not exist before
        # any policy runs: the classes the corpus and the edge shapes name, as a GPU operator installs them.
        for handler in ("nvidia", "nvidia-cdi", "nvidia-legacy", "kata"):
            runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": handler}}
            code, body, _ = real_api.call(
                "POST", "/apis/node.k8s.io/v1/runtimeclasses", {**runtime_class, "handler": handler}
            )
            assert code in (201, 409), body
            created.append(f"/apis/node.k8s.io/v1/runtimeclasses/{handler}")
        _until_each_policy_refuses_its_example(real_api, compiled)
        cases = {name: pods_of(obj) for name, obj in corpus().items()}
        cases |= {f"edge {name}": [copy.deepcopy(obj)] for name, obj in EDGE.items()}
        compared = denied = other = 0
        for name, made in cases.items():
            for p in made:
                p["metadata"] = {**p.get("metadata", {}), "generateName": "corpus-", "namespace": "ml"}
                p["metadata"].pop("name", None)
                code, body, warnings = real_api.create_pod(p)
                stored, outcome = through_the_webhook(p, {}, "ml", "admin")
                failed = {
                    rule: vap.failures(stored, request("ml", "admin")) for rule, (vap, _actions) in compiled.items()
                }
                found = [v for vs in outcome.verdict.by_mode.values() for v in vs] if outcome.verdict else []
                webhook = {v.rule for v in found if v.rule in compiled}
                if (stored.get("spec") or {}).get("resourceClaims"):
                    webhook = set()  # the webhook's alone (cel.NO_CLAIMS): the policies let it be
                assert {r for r, m in failed.items() if m} == webhook, name
                expected, warned = split_by_action(compiled, failed)
                if code == 201:  # a warn-mode policy's failures are Warning headers, each with its message
                    assert_warned(warnings, warned, name)
                message = body.get("message", "")
                ours = {rule for rule in compiled if said_by(rule, message)}
                if code == 201:
                    assert not expected, (name, expected)
                elif not ours:
                    other += 1  # the API server's own validation (e.g. a hostPort clash): not ours
                    assert "AdmissionPolicy" not in message, (name, message)
                    continue
                else:
                    # One policy's denial is reported (reason Forbidden, 403), and of its failed
                    # validations the first: a pod two policies deny names one of them.
                    assert code == 403 and len(ours) == 1 and ours <= set(expected), (name, code, message, expected)
                    (rule,) = ours
                    assert message.endswith(f"denied request: {expected[rule][0]}"), (name, message, expected)
                    denied += 1
                    if len(expected) > 1:
                        SAID.setdefault("several", f"{sorted(expected)} fail; the API server said: {message}")
                compared += 1
        print(
            f"\nnative rules, real API server, no webhook: {compared} pods judged as cel-python and the webhook "
            f"judge them ({denied} refused by a rule's policy), {other} refused by the API server's own validation"
        )
        if "several" in SAID:
            print("what the API server says when two policies deny one pod:", SAID["several"])
        assert compared > 40 and denied >= 10
        # The built-in controllers' templates, through the policies of their template paths.
        from tests.test_native_templates import as_template
        from webhook.policy.templates import BUILTIN

        by_root = {r: compile_validations({}, tmp, root=r) for r in ROOT_OF.values()}
        controllers = [o for o in corpus().values() if (o.get("apiVersion"), o.get("kind")) in CONTROLLERS]
        controllers += [
            as_template(p, k)
            for p in EDGE.values()
            if "containers" in p["spec"]
            for k in ("Deployment", "CronJob", "PodTemplate")
        ]
        judged = refused_t = 0
        for obj in controllers:
            obj = copy.deepcopy(obj)
            obj["metadata"] = {**obj.get("metadata", {}), "namespace": "ml", "name": f"t{judged}"}
            group, kind = (obj["apiVersion"].rpartition("/")[0], obj["kind"])
            plural = BUILTIN[(group, kind)].plural
            base = f"/apis/{obj['apiVersion']}" if group else "/api/v1"
            code, body, headers = real_api.call("POST", f"{base}/namespaces/ml/{plural}?dryRun=All", obj)
            root = ROOT_OF.get(kind, "spec-template")
            failed = {rule: vap.failures(obj, request("ml", "admin")) for rule, (vap, _a) in by_root[root].items()}
            expected, warned = split_by_action(by_root[root], failed)
            if code == 201:
                warnings = [v for k, v in headers if k.lower() == "warning"]
                assert_warned(warnings, warned, kind)
            message = body.get("message", "")
            ours = {rule for rule in by_root[root] if said_by(rule, message)}
            if code == 201:
                assert not expected, (kind, expected)
            elif not ours:
                assert "AdmissionPolicy" not in message, (kind, message)
                continue
            else:
                assert code == 403 and len(ours) == 1 and ours <= set(expected), (kind, message, expected)
                (rule,) = ours
                assert message.endswith(f"denied request: {expected[rule][0]}"), (kind, message, expected)
                refused_t += 1
            judged += 1
        print(f"native rules on templates: {judged} controllers judged as cel-python judges them, {refused_t} refused")
        assert judged > 100 and refused_t > 50
        # kubectl debug during the outage: a debug container that asks for the node's GPUs is refused.
        trainer = pod(c("train", resources={"limits": {"nvidia.com/gpu": 1}}))
        trainer["metadata"] = {"name": "debugged-rules", "namespace": "ml"}
        code, running, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods", trainer)
        assert code == 201, running
        running["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": CUDA, "env": [nvd("all")]}]
        code, body, _ = real_api.call("PUT", "/api/v1/namespaces/ml/pods/debugged-rules/ephemeralcontainers", running)
        assert code == 403 and "no-visible-devices-env" in body["message"], body
        assert 'ephemeral container "debugger"' in body["message"], body["message"]
        # kubectl debug --profile=sysadmin: a privileged debug container in a GPU pod.
        running["spec"]["ephemeralContainers"] = [
            {"name": "sysadmin", "image": CUDA, "securityContext": {"privileged": True}}
        ]
        code, body, _ = real_api.call("PUT", "/api/v1/namespaces/ml/pods/debugged-rules/ephemeralcontainers", running)
        assert code == 403 and "no-privileged-gpu" in body["message"], body
        assert (
            'ephemeral container "sysadmin": spec.ephemeralContainers[0].securityContext.privileged' in body["message"]
        )
        real_api.call("DELETE", "/api/v1/namespaces/ml/pods/debugged-rules")
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


def _deny_policy_and_namespaces(
    real_api: RealApi, values: dict[str, Any], rule: str, spaces: dict[str, dict[str, str]], tmp: Path
) -> tuple[Any, list[str]]:
    """The chart's deny policy on Pods for these values (`rule` alone on), created with its binding,
    and the namespaces with their labels: `rule`'s part compiled by cel-python, and what to delete."""
    from tests.celnative import compile_validations

    docs = [
        d
        for d in render(values, kube_version="1.36.0", tmp=tmp)
        if d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"] == "gpu-policy-rules-deny"
    ]
    (vap, _actions) = compile_validations({"policy": values["policy"]}, tmp)[rule]
    created = real_api.create_all(docs, ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))
    for name, labels in spaces.items():
        code, body, _ = real_api.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        )
        assert code == 201, body
        created.append(f"/api/v1/namespaces/{name}")
    return vap, created


def test_the_max_per_pod_twin_reads_the_real_namespace(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpu-max-per-pod on (deny): its policy reads the cap from the label of the namespace the API
    server hands it (namespaceObject). In a namespace labelled 16, in one labelled "lots" (no whole
    number) and in one without the label, the API server refuses exactly the shapes cel-python's
    evaluation with the same namespace fails, with the same message."""
    from tests.celnative import request
    from tests.test_native_rules import MAX_SHAPES, served
    from webhook.offline.native import namespace_object

    tmp = tmp_path_factory.mktemp("max-per-pod")
    values = {"enforcement": "both", "policy": {"rules": alone("gpu-max-per-pod")}}
    label = "gpu-policy.io/max-gpus-per-pod"
    spaces = {"gpu-big": {label: "16"}, "gpu-odd": {label: "lots"}, "gpu-plain": {}}
    vap, created = _deny_policy_and_namespaces(real_api, values, "gpu-max-per-pod", spaces, tmp)
    try:
        _until_each_policy_refuses_its_example(real_api, {"gpu-max-per-pod": (vap, ["Deny"])})
        refused: dict[str, set[str]] = {}
        for namespace, labels in spaces.items():
            for shape_name, shape in MAX_SHAPES.items():
                p = served(copy.deepcopy(shape))
                p["metadata"] = {"generateName": "max-", "namespace": namespace}
                code, body, _ = real_api.call("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", p)
                if code == 422:  # Pod validation first (an extended resource in requests alone)
                    assert "AdmissionPolicy" not in body["message"], (shape_name, body)
                    continue
                expected = vap.failures(p, request(namespace, "admin"), namespace=namespace_object(namespace, labels))
                if expected:
                    assert code == 403 and body["message"].endswith(f"denied request: {expected[0]}"), (
                        shape_name,
                        body,
                    )
                    refused.setdefault(namespace, set()).add(shape_name)
                else:
                    assert code == 201, (namespace, shape_name, body)
        assert "nine-together" in refused["gpu-plain"] and "nine-together" in refused["gpu-odd"]
        assert "nine-together" not in refused.get("gpu-big", set())
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


def test_the_namespace_allowed_twin_reads_the_real_namespace(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpu-namespace-allowed on (deny) with a selector (matchLabels and three kinds of
    expression) and a listed namespace: in real namespaces with matching, partly matching and no
    labels, the API server refuses a GPU pod exactly where cel-python's evaluation with the same
    namespace refuses it, with the same message, and lets a CPU pod through everywhere."""
    from tests.celnative import request
    from tests.test_native_rules import served
    from webhook.offline.native import namespace_object

    tmp = tmp_path_factory.mktemp("namespace-allowed")
    selector = {
        "matchLabels": {"team": "ml"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
            {"key": "frozen", "operator": "DoesNotExist"},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
        ],
    }
    policy_values = {
        "rules": alone("gpu-namespace-allowed"),
        "gpuNamespaces": ["ns-listed"],
        "gpuNamespaceSelector": selector,
    }
    values = {"enforcement": "both", "policy": policy_values}
    spaces = {
        "ns-gold": {"team": "ml", "tier": "gold"},
        "ns-dev": {"team": "ml", "tier": "gold", "env": "dev"},
        "ns-frozen": {"team": "ml", "tier": "silver", "frozen": "yes"},
        "ns-bronze": {"team": "ml", "tier": "bronze"},
        "ns-plain": {},
        "ns-listed": {},
    }
    vap, created = _deny_policy_and_namespaces(real_api, values, "gpu-namespace-allowed", spaces, tmp)
    try:
        gpu = pod(c("train", resources={"limits": {"nvidia.com/gpu": 1}}))
        deadline = time.monotonic() + 30
        refused: set[str] = set()
        for namespace, labels in spaces.items():
            for shape, obj in (("gpu", gpu), ("cpu", pod(c("etl")))):
                p = served(copy.deepcopy(obj))
                p["metadata"] = {"generateName": "ns-", "namespace": namespace}
                expected = vap.failures(p, request(namespace, "admin"), namespace=namespace_object(namespace, labels))
                while True:
                    code, body, _ = real_api.call("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", p)
                    if code != 201 or not expected or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)  # the policy takes effect within seconds of its creation
                if expected:
                    assert code == 403 and body["message"].endswith(f"denied request: {expected[0]}"), (namespace, body)
                    refused.add(f"{namespace} {shape}")
                    SAID.setdefault("gpu-namespace-allowed", body["message"])
                else:
                    assert code == 201, (namespace, shape, body)
        assert refused == {"ns-dev gpu", "ns-frozen gpu", "ns-bronze gpu", "ns-plain gpu"}, refused
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


def test_the_job_deadline_twin_judges_real_jobs_and_cronjobs(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpu-job-deadline on (deny, with validatingWorkloads): its twin sits in the spec.template
    policy (Jobs only, by the object's kind) and the CronJobs' policy. A GPU Job and CronJob
    without a deadline are refused with cel-python's message; with one (on the JobSpec or the pod
    spec) they are created, and a GPU Deployment is not the rule's."""
    from tests.celnative import compile_validations, request
    from tests.helpers import wrap
    from tests.test_native_rules import served

    tmp = tmp_path_factory.mktemp("job-deadline")
    values = {"enforcement": "both", "webhook": {"validatingWorkloads": {"enabled": True}},
              "policy": {"rules": alone("gpu-job-deadline")}}  # fmt: skip
    docs = [d for d in render(values, kube_version="1.36.0", tmp=tmp) if d["kind"].startswith("ValidatingAdmission")]
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy") == [
        "gpu-policy-rules-deny-spec-jobtemplate-spec-template",
        "gpu-policy-rules-deny-spec-template",
    ]
    roots = {"Job": "spec-template", "CronJob": "spec-jobtemplate-spec-template", "Deployment": "spec-template"}
    compiled = {root: compile_validations({"policy": values["policy"]}, tmp, root=root) for root in set(roots.values())}
    gpu = pod(c("train", resources={"limits": {"nvidia.com/gpu": 1}}), restartPolicy="Never")
    created = real_api.create_all(docs, ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))
    plural = {"Job": "batch/v1/namespaces/ml/jobs", "CronJob": "batch/v1/namespaces/ml/cronjobs",
              "Deployment": "apps/v1/namespaces/ml/deployments"}  # fmt: skip

    def create(obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        obj["metadata"] = {"generateName": "deadline-", "namespace": "ml"}
        if obj["kind"] == "Deployment":
            obj["spec"]["template"]["spec"]["restartPolicy"] = "Always"
        code, body, _ = real_api.call("POST", f"/apis/{plural[obj['kind']]}?dryRun=All", obj)
        return code, body

    try:
        deadline = time.monotonic() + 30
        while create(wrap(gpu, "Job"))[0] != 403:  # until the policy is in effect
            assert time.monotonic() < deadline, "the job-deadline policy never took effect"
            time.sleep(0.3)
        for kind in ("Job", "CronJob", "Deployment"):
            obj = served(wrap(gpu, kind))
            (vap, _actions) = compiled[roots[kind]]["gpu-job-deadline"]
            expected = vap.failures(obj, request("ml", "admin"))
            code, body = create(copy.deepcopy(obj))
            if kind == "Deployment":
                assert expected == [] and code == 201, body
                continue
            assert expected and code == 403 and body["message"].endswith(f"denied request: {expected[0]}"), body
            assert f"a {kind} whose pod hangs" in body["message"]
            SAID[f"gpu-job-deadline {kind}"] = body["message"]
            fixed = copy.deepcopy(obj)
            job = fixed["spec"] if kind == "Job" else fixed["spec"]["jobTemplate"]["spec"]
            job["activeDeadlineSeconds"] = 86400
            assert create(fixed)[0] == 201
            on_pod = copy.deepcopy(obj)
            template = (
                on_pod["spec"]["template"] if kind == "Job" else on_pod["spec"]["jobTemplate"]["spec"]["template"]
            )
            template["spec"]["activeDeadlineSeconds"] = 3600
            assert create(on_pod)[0] == 201
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


def test_the_controller_owned_twin_in_the_real_api_server(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpu-controller-owned on (deny): its Pods-only ValidatingAdmissionPolicy, alone in the API
    server, refuses exactly the owner shapes of tests/test_native_rules.py that cel-python's
    evaluation fails, with the same message (dryRun: nothing is stored, no owner need exist)."""
    from tests.celnative import compile_validations, request
    from tests.test_native_rules import OWNER_SHAPES

    tmp = tmp_path_factory.mktemp("controller-owned")
    values = {"enforcement": "both", "policy": {"rules": alone("gpu-controller-owned")}}
    docs = [
        d
        for d in render(values, kube_version="1.36.0", tmp=tmp)
        if d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"] == "gpu-policy-rules-deny"
    ]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    (vap, _actions) = compile_validations({"policy": values["policy"]}, tmp)["gpu-controller-owned"]
    created = real_api.create_all(docs, ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))
    try:
        _until_each_policy_refuses_its_example(real_api, {"gpu-controller-owned": (vap, ["Deny"])})
        refused = set()
        for name, shape in OWNER_SHAPES.items():
            p = copy.deepcopy(shape)
            p["metadata"] = {**p["metadata"], "namespace": "ml"}
            code, body, _ = real_api.call("POST", "/api/v1/namespaces/ml/pods?dryRun=All", p)
            if code == 422:  # Pod validation runs first: an extended resource in requests alone is invalid
                assert "AdmissionPolicy" not in body["message"], (name, body)
                SAID.setdefault(f"controller-owned {name}", body["message"])
                continue
            expected = vap.failures(p, request("ml", "admin"))
            if expected:
                assert code == 403 and body["message"].endswith(f"denied request: {expected[0]}"), (name, body)
                refused.add(name)
            else:
                assert code == 201, (name, body)
        # dra-claim is the webhook's alone (cel.NO_CLAIMS): with no webhook here, created.
        assert {"bare", "node-controller"} <= refused and not refused & {"replicaset", "dra-claim"}
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


@pytest.mark.parametrize(
    "env",
    [
        [nvd("all,void\x1c")],
        [nvd("none\x1f,all")],
        [{"name": "a,void,b", "value": "all"}, nvd("$(a,void,b)")],
        [{"name": "NVIDIA_IMEX_CHANNELS", "value": "0"}],
    ],
    ids=["all,void\\x1c", "none\\x1f,all", "$(a,void,b)", "imex"],
)
def test_attacks_are_refused_by_the_real_api_server(
    env: list[dict[str, str]], real_api: RealApi, webhooks: Server
) -> None:
    code, body, _ = real_api.create_pod(pod(c(env=env)))
    assert code == 403, body
    assert "violates GPU policy" in body["message"]


def test_legitimate_pods_and_isolation_through_the_real_api_server(real_api: RealApi, webhooks: Server) -> None:
    gpu = pod(c("trainer", resources={"limits": {"nvidia.com/gpu": 1}}), c("sidecar", image="busybox"))
    code, body, _ = real_api.create_pod(gpu)
    assert code == 201, body
    trainer, sidecar = body["spec"]["containers"]
    assert "env" not in trainer and sidecar["env"] == [nvd("void")]
    prefixed = pod(
        c("vllm", resources={"limits": {"nvidia.com/gpu": 1}}, envFrom=[{"secretRef": {"name": "hf"}, "prefix": "HF_"}])
    )
    assert real_api.create_pod(prefixed)[0] == 201
    unprefixed = pod(c("vllm", resources={"limits": {"nvidia.com/gpu": 1}}, envFrom=[{"secretRef": {"name": "hf"}}]))
    code, body, _ = real_api.create_pod(unprefixed)
    assert code == 403 and "visible-devices-envfrom" in body["message"]


def validated(server: Server) -> float:
    """Reviews the validating webhook answered so far (the /metrics counter)."""
    total = 0.0
    for line in server.scrape().splitlines():
        if line.startswith("gpu_policy_reviews_total{") and 'webhook="validate"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_voided_cpu_pod_is_not_sent_to_the_validating_webhook(real_api: RealApi, webhooks: Server) -> None:
    """Issue 32 #13, with the API server's own CEL on the mutated pod: the plain pod isolation
    voided reaches /mutate only; a pod with a hand-set variable reaches /validate."""
    before = validated(webhooks)
    code, body, _ = real_api.create_pod(pod(c("web", image="nginx:1.27")))
    assert code == 201 and body["spec"]["containers"][0]["env"] == [nvd("void")]
    assert validated(webhooks) == before
    assert real_api.create_pod(pod(c(env=[nvd("all")])))[0] == 403
    assert validated(webhooks) == before + 1


def test_the_object_twins_judge_real_limitranges_quotas_and_claims(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpu-limitrange, gpu-quota-advice and dra-admin-access on (deny), each in its own policy:
    every object of tests/test_native_objects.py the API server finds valid is refused exactly where
    cel-python's evaluation of the same policy refuses it, with its message; a claim in the listed
    namespace is let through. The claims go in as v1 and, where this server serves it, v1beta1
    (converted to v1 for the policy, which matches v1: matchPolicy Equivalent); 1.36 serves v1 only."""
    from tests.celnative import compile_objects, request
    from tests.test_native_objects import OBJECTS, served

    tmp = tmp_path_factory.mktemp("objects")
    rules = {"gpu-limitrange": "deny", "gpu-quota-advice": "deny", "dra-admin-access": "deny"}
    values = {"enforcement": "both", "policy": {"rules": rules, "draAdminAccessNamespaces": ["monitoring"]}}
    docs = [d for d in render(values, kube_version="1.36.0", tmp=tmp) if d["kind"].startswith("ValidatingAdmission")]
    names = {f"gpu-policy-{rule}" for rule in rules}
    docs = [d for d in docs if d["metadata"]["name"] in names]
    assert len(docs) == 6
    compiled = compile_objects({"policy": values["policy"]}, tmp)
    plural = {"LimitRange": "limitranges", "ResourceQuota": "resourcequotas", "ResourceClaim": "resourceclaims",
              "ResourceClaimTemplate": "resourceclaimtemplates"}  # fmt: skip
    rule_of = {"LimitRange": "gpu-limitrange", "ResourceQuota": "gpu-quota-advice"}

    def create(obj: dict[str, Any], namespace: str) -> tuple[int, dict[str, Any]]:
        group, _, version = obj["apiVersion"].rpartition("/")
        base = f"/apis/{group}/{version}" if group else "/api/v1"
        obj = {**obj, "metadata": {"generateName": "obj-", "namespace": namespace}}
        code, body, _ = real_api.call("POST", f"{base}/namespaces/{namespace}/{plural[obj['kind']]}?dryRun=All", obj)
        return code, body

    created = real_api.create_all(docs, ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))
    # The API server's own validation refuses adminAccess outside a namespace with this label (422,
    # before any policy): the claims go to two labelled namespaces, one listed, one not.
    admin = {"resource.kubernetes.io/admin-access": "true"}
    for name in ("dra-team", "monitoring"):
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": admin}}
        code, body, _ = real_api.call("POST", "/api/v1/namespaces", ns)
        assert code == 201, body
        created.append(f"/api/v1/namespaces/{name}")

    def namespace_of(i: int, obj: dict[str, Any]) -> str:
        if not obj["kind"].startswith("ResourceClaim"):
            return "ml"
        return "monitoring" if i % 3 == 0 else "dra-team"

    counts = {"refused": 0, "created": 0, "invalid": 0, "not served": 0}
    try:
        deadline = time.monotonic() + 30
        probes = [o for o in OBJECTS if o["metadata"].get("namespace")]  # the corpus's three, one per rule
        assert len(probes) == 3
        for probe in probes:
            namespace = namespace_of(1, probe)
            while create(served(probe, namespace), namespace)[0] != 403:
                assert time.monotonic() < deadline, f"{probe['kind']}'s policy never took effect"
                time.sleep(0.3)
        for i, obj in enumerate(OBJECTS):
            namespace = namespace_of(i, obj)
            stored = served(obj, namespace)
            rule = rule_of.get(obj["kind"], "dra-admin-access")
            expected = compiled[rule][0].failures(stored, request(namespace, "admin"))
            code, body = create(stored, namespace)
            if code == 404:  # resource.k8s.io/v1beta1 is off by default from 1.34
                counts["not served"] += 1
                continue
            if code == 422:  # the API server's own validation comes before any policy
                assert body["reason"] == "Invalid", body
                counts["invalid"] += 1
                continue
            if expected:
                assert code == 403 and body["message"].endswith(f"denied request: {expected[0]}"), (stored, body)
                SAID.setdefault(f"{rule} {obj['kind']}", body["message"])
                counts["refused"] += 1
            else:
                assert code == 201, (stored, body)
                counts["created"] += 1
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)
    SAID["object twins"] = json.dumps(counts)
    assert counts["refused"] > 40 and counts["created"] > 40, counts


def test_the_quantity_twin_judges_the_counts_a_real_api_server_lets_through(
    real_api: RealApi, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gpu-quantity alone on (deny), HAMi and xGPU on: a stock API server refuses a decimal of an
    extended resource itself (422, "must be an integer"), so of tests/test_native_rules.py's count
    shapes only whole numbers reach the policy; those it refuses (HAMi's and xGPU's ranges, the
    xGPU mix) it refuses with cel-python's message, and the rest it creates."""
    from tests.celnative import request
    from tests.test_native_rules import QUANTITY, served

    tmp = tmp_path_factory.mktemp("quantity")
    values = {"enforcement": "both", "policy": {"rules": alone("gpu-quantity"),
              "integrations": {"hami": {"enabled": True}, "xgpu": {"enabled": True}}}}  # fmt: skip
    vap, created = _deny_policy_and_namespaces(real_api, values, "gpu-quantity", {}, tmp)
    counts = {"refused": 0, "created": 0, "invalid": 0}
    try:
        probe = served(QUANTITY["gpucores-150"])
        deadline = time.monotonic() + 30
        while real_api.create_pod(copy.deepcopy(probe))[0] != 403:
            assert time.monotonic() < deadline, "the gpu-quantity policy never took effect"
            time.sleep(0.3)
        for name, shape in QUANTITY.items():
            obj = served(shape)
            for c in obj["spec"].get("containers", []) + obj["spec"].get("initContainers", []):
                c.setdefault("image", CUDA)
            expected = vap.failures(obj, request("ml", "admin"))
            code, body, _ = real_api.create_pod(copy.deepcopy(obj))
            if code == 422:
                assert body["reason"] == "Invalid" and "must be" in body["message"], (name, body)
                counts["invalid"] += 1
            elif expected:
                assert code == 403 and body["message"].endswith(f"denied request: {expected[0]}"), (name, body)
                SAID.setdefault("gpu-quantity", body["message"])
                counts["refused"] += 1
            else:
                assert code == 201, (name, body)
                counts["created"] += 1
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)
    SAID["gpu-quantity counts"] = json.dumps(counts)
    assert counts["refused"] >= 4 and counts["created"] >= 4 and counts["invalid"] >= 4, counts
