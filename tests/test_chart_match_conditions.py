"""The chart's matchConditions (CEL) must send the webhook every pod the policy would act on.

A condition that is too narrow is a silent bypass, so the rendered expressions are evaluated
with a CEL implementation against pods that each rule denies or each mutation patches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest

from tests.builders import container, pod
from tests.chart import find, render
from webhook import policy
from webhook.policy import Policy

NVD_ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "accelerator", "operator": "Exists"}]}]
        }
    }
}

ACTED_ON = {
    "bad quantity": pod(container(gpu="1.5")),
    "requests != limits": pod(container(gpu="2", request="1")),
    "requests only": pod(container(request="1")),
    "visible devices": pod(container(env=NVD_ALL)),
    "visible devices in init": pod(container(), initContainers=[container("i", env=NVD_ALL)]),
    "visible devices in ephemeral": pod(container(), ephemeralContainers=[container("d", env=NVD_ALL)]),
    "privileged gpu": pod(container(gpu=1, privileged=True)),
    "privileged sidecar pinned by selector": pod(container(privileged=True), nodeSelector={"accelerator": "t4"}),
    "sys_admin pinned by affinity": pod(container(caps=["SYS_ADMIN"]), affinity=AFFINITY),
    "privileged ephemeral in gpu pod": pod(container(gpu=1), ephemeralContainers=[container("d", privileged=True)]),
    "gpu in init only": pod(container(), initContainers=[container("i", gpu=1)]),
    "hostPath /dev": pod(container(), volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]),
    "device-list mount": pod(
        container(volumeMounts=[{"name": "e", "mountPath": "/var/run/nvidia-container-devices/x"}]),
        volumes=[{"name": "e", "emptyDir": {}}],
    ),
    "cdi annotation": {
        **pod(container()),
        "metadata": {"name": "p", "annotations": {"nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all"}},
    },
    "hostPID gpu pod": pod(container(gpu=1), hostPID=True),
    "envFrom gpu pod": pod(container(gpu=1, envFrom=[{"configMapRef": {"name": "c"}}])),
}
IGNORED = {
    "plain web pod": pod(container("web", env=[{"name": "PORT", "value": "80"}])),
    "cpu limits": pod(container(resources={"limits": {"cpu": "1"}})),
}


@pytest.fixture(scope="module")
def conditions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    docs = render(
        {"policy": {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "t4"}}},
        kube_version="1.30.0",
        tmp=tmp_path_factory.mktemp("cel"),
    )
    assert isinstance(docs, list)
    env = celpy.Environment()
    hooks = (
        find(docs, "MutatingWebhookConfiguration")["webhooks"]
        + find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    )
    return {
        h["name"]: [env.program(env.compile(c["expression"])) for c in h["matchConditions"]]
        for h in hooks
        if "matchConditions" in h
    }


def matches(programs: list[Any] | None, obj: dict[str, Any]) -> bool:
    if programs is None:
        return True  # a webhook without matchConditions sees every pod
    return all(bool(p.evaluate({"object": celpy.json_to_cel(obj)})) for p in programs)


def acted_on(obj: dict[str, Any], p: Policy) -> tuple[bool, bool]:
    view = policy.view(obj, "", "Pod", p)
    assert view is not None
    return bool(policy.violations(view, p)), bool(policy.mutate(view, p).ops)


@pytest.mark.parametrize("name", list(ACTED_ON))
def test_every_pod_the_policy_acts_on_reaches_the_webhook(conditions: dict[str, Any], name: str) -> None:
    obj = ACTED_ON[name]
    violates, mutates = acted_on(obj, Policy(cluster_version=(1, 27), accelerator_default="t4"))
    assert violates or mutates, "fixture must be something the policy acts on"
    if violates:
        assert matches(conditions["pods.validate.gpu-policy.io"], obj)
    if mutates:
        assert matches(conditions.get("mutate.gpu-policy.io"), obj)


@pytest.mark.parametrize("name", list(IGNORED))
def test_ordinary_pods_skip_the_webhook(conditions: dict[str, Any], name: str) -> None:
    assert not matches(conditions["pods.validate.gpu-policy.io"], IGNORED[name])


def test_without_isolation_mutating_conditions_cover_every_mutation(tmp_path: Path) -> None:
    docs = render(
        {"policy": {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "t4"}, "isolateNonGpu": False}},
        tmp=tmp_path,
    )
    assert isinstance(docs, list)
    env = celpy.Environment()
    (hook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    programs = [env.program(env.compile(c["expression"])) for c in hook["matchConditions"]]
    p = Policy(cluster_version=(1, 27), accelerator_default="t4", isolate_non_gpu=False)
    for obj in ACTED_ON.values():
        if acted_on(obj, p)[1]:
            assert matches(programs, obj)
    assert not matches(programs, IGNORED["plain web pod"])
