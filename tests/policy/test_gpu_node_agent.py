"""gpu-node-agent: a GPU node agent that isolation blinds is told which exemption to ask for."""

from __future__ import annotations

import copy
from typing import Any

from tests.helpers import VOID, container, pod, run, wrap
from webhook.config import default_policy

ID = "gpu-node-agent"
IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"


def exporter(**extra: Any) -> dict[str, Any]:
    return {"name": "exporter", "image": IMAGE, **extra}


def agent_pod(**spec: Any) -> dict[str, Any]:
    p = pod(exporter(), namespace="monitoring", serviceAccountName="dcgm-exporter", **spec)
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm-exporter", "uid": "u", "controller": True}
    ]
    return p


def test_daemonset_pod_and_template_are_flagged_naming_the_exemption() -> None:
    (v,) = run(agent_pod(), rule=ID)
    assert v.path == "spec.containers[0].image" and v.value == f'"{IMAGE}"'
    assert 'exemptServiceAccounts lists "monitoring/dcgm-exporter"' in v.detail
    assert v.fix.startswith('a trusted agent: add "monitoring/dcgm-exporter" to exemptServiceAccounts')
    template = wrap(pod(exporter(), namespace="monitoring", serviceAccountName="dcgm-exporter"), "DaemonSet")
    (v,) = run(template, rule=ID)
    assert v.path == "spec.template.spec.containers[0].image"


def test_hostpid_pod_without_owner_is_flagged() -> None:
    assert [v.rule for v in run(pod(exporter(), hostPID=True), rule=ID)] == [ID]


def test_not_an_agent_shape_or_not_an_agent_image_is_not_flagged() -> None:
    assert run(pod(exporter()), rule=ID) == []  # one-off pod: no hostPID, no DaemonSet
    p = agent_pod()
    p["spec"]["containers"][0]["image"] = "fluent/fluent-bit:3.1"
    assert run(p, rule=ID) == []
    assert run(wrap(pod(exporter()), "Deployment"), rule=ID) == []


def test_agents_that_get_a_gpu_are_fine() -> None:
    p = agent_pod()
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    assert run(p, rule=ID) == []


def test_already_voided_agent_is_still_flagged_and_granting_values_too() -> None:
    p = agent_pod()
    p["spec"]["containers"][0]["env"] = [dict(VOID)]  # as the validating webhook sees it after /mutate
    assert [v.rule for v in run(p, rule=ID)] == [ID]
    # A hand-set `all` gets isolation's void after it (the last entry wins), so the agent is voided too.
    p["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert sorted(v.rule for v in run(p)) == sorted([ID, "no-visible-devices-env"])


def test_exempt_service_account_and_isolation_off() -> None:
    exempt = default_policy(exempt_service_accounts=frozenset({"monitoring/dcgm-exporter"}))
    assert run(agent_pod(), exempt) == []
    other = copy.deepcopy(agent_pod())
    other["metadata"]["namespace"] = "team-a"  # the same account name elsewhere is not exempt
    assert [v.rule for v in run(other, exempt, rule=ID)] == [ID]
    assert run(agent_pod(), default_policy(isolate_non_gpu=False), rule=ID) == []


def test_a_per_node_pod_asking_for_0_gpus_is_an_agent_from_any_registry() -> None:
    """Health checkers reach every GPU with `nvidia.com/gpu: 0` (the device plugin is never asked)."""
    p = agent_pod()
    p["spec"]["containers"][0]["image"] = "ghcr.io/gpu-health/agent:v0.4.2"
    p["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "200m", "nvidia.com/gpu": 0}}
    (v,) = run(p, rule=ID)
    assert v.path == 'spec.containers[0].resources.limits["nvidia.com/gpu"]' and v.value == '"0"'
    assert 'exemptServiceAccounts lists "monitoring/dcgm-exporter"' in v.detail
    p["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/mig-1g.10gb": "0"}}
    assert [v.path for v in run(p, rule=ID)] == ['spec.containers[0].resources.requests["nvidia.com/mig-1g.10gb"]']
    del p["metadata"]["ownerReferences"]  # a one-off pod asking for 0 is no agent
    assert run(p, rule=ID) == []


def test_a_per_node_pod_pinned_to_gpu_nodes_is_an_agent_every_voided_container_named() -> None:
    p = agent_pod(nodeSelector={"nvidia.com/gpu.present": "true"})
    p["spec"]["containers"][0]["image"] = "registry.internal.example.com/mirror/dcgm-exporter:4.2.3"
    p["spec"]["initContainers"] = [{"name": "wait", "image": "busybox:1.36"}]
    found = run(p, rule=ID)
    assert [(v.container, v.path) for v in found] == [
        ("wait", "spec.initContainers[0].image"),
        ("exporter", "spec.containers[0].image"),
    ]
    assert "runs in a per-node pod on GPU nodes" in found[1].detail
    instance = agent_pod(nodeSelector={"node.kubernetes.io/instance-type": "p4d.24xlarge"})
    instance["spec"]["containers"][0]["image"] = "fluent/fluent-bit:3.1"
    assert [v.rule for v in run(instance, rule=ID)] == [ID]


def test_a_per_node_pod_that_asks_the_device_plugin_for_gpus_is_a_workload() -> None:
    p = agent_pod(nodeSelector={"nvidia.com/gpu.present": "true"})
    p["spec"]["containers"].append({"name": "burn", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}})
    assert run(p, rule=ID) == []


def test_every_other_rule_leads_with_the_exemption_for_an_agent() -> None:
    """An agent pinned to GPU nodes that mounts the device-plugin folder (as device plugins do): a
    workload's fix ("drop the hostPath") is no help to it."""
    mount = {"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"}
    volumes = [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]
    gfd = agent_pod(nodeSelector={"nvidia.com/gpu.present": "true"}, volumes=volumes)
    gfd["spec"]["containers"][0]["volumeMounts"] = [mount]
    (hostpath,) = run(gfd, rule="no-gpu-device-hostpath")
    assert hostpath.fix.startswith(
        'if this is a trusted GPU node agent, the platform exempts it: "monitoring/dcgm-exporter" in '
        "exemptServiceAccounts (or its namespace in exemptNamespaces); otherwise a GPU pod gets its devices"
    )
    workload = pod({"name": "t", "image": "x", "volumeMounts": [mount]}, container("g", gpu=1), volumes=volumes)
    (plain,) = run(workload, rule="no-gpu-device-hostpath")
    assert plain.fix.startswith("a GPU pod gets its devices") and plain.detail == hostpath.detail


def test_agent_images_come_from_config() -> None:
    p = agent_pod()
    p["spec"]["containers"][0]["image"] = "registry.example.com/gpu/health-check:1"
    assert run(p, rule=ID) == []
    policy = default_policy(node_agent_images=("registry.example.com/gpu/",))
    assert [v.rule for v in run(p, policy, rule=ID)] == [ID]
