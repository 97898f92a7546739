"""isolate-non-gpu: every container that requests no GPU is given NVIDIA_VISIBLE_DEVICES=void."""

from __future__ import annotations

from typing import Any

import pytest

from tests import helpers
from tests.helpers import POLICY, VOID, container, default_policy, mutate, pod, view, wrap
from webhook.policy import engine

# NVIDIA's void on its own, as the policy ships; where nodes run the AMD runtime
# (vendors.amd.runtimeEnv) isolation also gives AMD_VISIBLE_DEVICES=none: tests at the end of this file.
P = default_policy(amd_runtime_env=False)
AMD_RUNTIME = default_policy(amd_runtime_env=True)
AMD_NONE = {"name": "AMD_VISIBLE_DEVICES", "value": "none"}


def mutated(obj: dict[str, Any], policy: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return helpers.mutated(obj, policy or P)


def test_guide_isolation_pod_without_gpu_gets_void_everywhere() -> None:
    # The managed-cloud guide's isolation test pod, with its GPU request removed.
    obj = pod(
        container("cuda", env=[{"name": "CUDA_VERSION", "value": "11.0"}]),
        container("sidecar"),
        initContainers=[container("init")],
    )
    ops, out = mutated(obj)
    assert ops == [
        {"op": "add", "path": "/spec/initContainers/0/env", "value": [VOID]},
        {"op": "add", "path": "/spec/containers/0/env/-", "value": VOID},
        {"op": "add", "path": "/spec/containers/1/env", "value": [VOID]},
    ]
    for c in out["spec"]["containers"] + out["spec"]["initContainers"]:
        assert c["env"][-1] == VOID


def test_gpu_containers_are_untouched() -> None:
    ops, out = mutated(pod(container("gpu", gpu="1"), container("cpu"), container("zero", gpu="0")))
    assert [op["path"] for op in ops] == ["/spec/containers/1/env", "/spec/containers/2/env"]
    assert "env" not in out["spec"]["containers"][0]


def test_containers_whose_last_entry_grants_nothing_exactly_are_left_alone() -> None:
    for value in ("void", "none", ""):
        ops, _ = mutated(pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])))
        assert ops == [], value


@pytest.mark.parametrize("value", ["all", "0", " void", "all,void", "void\x1c", "$(X)", "none,all"])
def test_anything_else_gets_void_appended_last(value: str) -> None:
    """Issue 32 #1/#2: only the exact literals grant nothing on every toolkit; the appended void is
    the entry the kubelet keeps, whatever the earlier one expands to."""
    obj = pod(container("c", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]))
    ops, out = mutated(obj)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env/-", "value": VOID}]
    assert out["spec"]["containers"][0]["env"][-1] == VOID
    by_ref = [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    assert mutated(pod(container(env=by_ref)))[0] == [{"op": "add", "path": "/spec/containers/0/env/-", "value": VOID}]


def test_hand_set_all_is_voided_and_still_denied() -> None:
    obj = pod(container("c", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    _ops, out = mutated(obj)
    found = engine.find_violations(out, "", "Pod", P)
    assert found is not None and [v.rule for v in found] == ["no-visible-devices-env"]


def test_dra_claim_holders_are_voided_and_unparsable_requests_skipped() -> None:
    """Issue 32 #5: a DRA driver's devices come through CDI, whose edits replace the variable after
    the pod's env; void only keeps the image's `all` from the legacy hook."""
    dra = container("d")
    dra["resources"] = {"claims": [{"name": "gpu"}]}
    assert mutated(pod(dra))[0] == [{"op": "add", "path": "/spec/containers/0/env", "value": [VOID]}]
    assert mutated(pod(container(gpu="lots")))[0] == []


def test_envfrom_in_a_voided_container_gets_imex_void_too() -> None:
    c = container("c")
    c["envFrom"] = [{"configMapRef": {"name": "cm"}}]
    ops, out = mutated(pod(c))
    assert out["spec"]["containers"][0]["env"] == [{"name": "NVIDIA_IMEX_CHANNELS", "value": "void"}, VOID]
    c["envFrom"] = [{"configMapRef": {"name": "cm"}, "prefix": "APP_"}]
    assert mutated(pod(c))[1]["spec"]["containers"][0]["env"] == [VOID]
    del ops


def test_unknown_gpu_like_resources_are_voided_with_a_warning() -> None:
    """Issue 32 #11: never silently: the owner hears why a container lost its card."""
    _ops, warnings, out = mutate(pod(container("v", resources={"limits": {"example.com/vgpu": 1}})), P)
    assert out["spec"]["containers"][0]["env"] == [VOID]
    assert len(warnings) == 1 and "example.com/vgpu" in warnings[0] and "gpuDeviceResources" in warnings[0]
    for known in ("volcano.sh/vgpu-number", "aliyun.com/gpu-mem", "nvidia.com/t4-shared"):
        assert mutated(pod(container("v", resources={"limits": {known: 1}})))[0] == [], known


def test_opt_out_annotation_does_not_disable_isolation() -> None:
    obj = pod(container("c"))
    obj["metadata"]["annotations"] = {"gpu-policy.io/mutate": "false"}
    assert mutated(obj)[0] == [{"op": "add", "path": "/spec/containers/0/env", "value": [VOID]}]


def test_disabled_and_templates() -> None:
    assert mutated(pod(container()), default_policy(amd_runtime_env=False, isolate_non_gpu=False))[0] == []
    assert mutated(wrap(pod(container()), "Deployment"))[0] == []


def test_only_new_ephemeral_containers_on_the_subresource() -> None:
    obj = pod(container("app"), ephemeralContainers=[container("old-debug"), container("debugger")])
    ops = engine.mutate_new_ephemeral(view(obj, P), P, {"old-debug"}).ops
    assert ops == [{"op": "add", "path": "/spec/ephemeralContainers/1/env", "value": [VOID]}]


def mig(name: str, resource: str, value: object = 1) -> dict:
    return container(name, resources={"limits": {resource: value}})


def test_mig_and_shared_gpu_containers_are_never_voided() -> None:
    # MIG (mixed strategy) and renamed time-sliced GPUs reach containers under their own resource
    # names; the kubelet appends pod env after the device plugin's, so a void would hide them.
    obj = pod(
        mig("mig", "nvidia.com/mig-1g.5gb"),
        mig("mig3", "nvidia.com/mig-3g.20gb", "1"),
        mig("shared", "nvidia.com/gpu.shared"),
        mig("renamed", "nvidia.com/a100.shared"),
        mig("zero-mig", "nvidia.com/mig-1g.5gb", 0),
        mig("fpga", "example.com/fpga"),
        container("plain"),
    )
    ops, out = mutated(obj)
    voided = [c["name"] for c in out["spec"]["containers"] if VOID in c.get("env", [])]
    assert voided == ["zero-mig", "fpga", "plain"]
    assert len(ops) == 3


def test_device_resources_are_configurable() -> None:
    obj = pod(mig("npu", "example.com/npu"), mig("bad-value", "nvidia.com/mig-1g.5gb", "abc"))
    ops, out = mutated(
        obj, default_policy(amd_runtime_env=False, device_resources=("example.com/npu", "nvidia.com/mig-*"))
    )
    assert ops == []  # an unparsable MIG request is left for validation, never voided
    _, out = mutated(obj)
    assert [c["name"] for c in out["spec"]["containers"] if VOID in c.get("env", [])] == ["npu"]


def test_companions_dra_extended_resources_and_kai_fraction_containers() -> None:
    # HAMi's memory-only request (its webhook adds nvidia.com/gpu later), CCE xGPU's resources and
    # DRA-backed extended resources all hand out a GPU without nvidia.com/gpu.
    obj = pod(
        mig("hami", "nvidia.com/gpumem", 3000),
        mig("xgpu", "volcano.sh/gpu-mem.128Mi", 5),
        mig("dra-extended", "deviceclass.resource.kubernetes.io/gpu.nvidia.com"),
        container("plain"),
    )
    _, out = mutated(obj)
    assert [c["name"] for c in out["spec"]["containers"] if VOID in c.get("env", [])] == ["plain"]


def test_kai_fraction_container_only_with_the_integration_and_only_that_container() -> None:
    obj = pod(container("sidecar"), container("gpu"), schedulerName="kai-scheduler")
    obj["metadata"]["annotations"] = {"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu"}
    kai = default_policy(amd_runtime_env=False, kai=True)
    _, out = mutated(obj, kai)
    assert [c["name"] for c in out["spec"]["containers"] if VOID in c.get("env", [])] == ["sidecar"]
    _, out = mutated(obj)  # without the integration KAI's own webhook replaces the void
    assert [c["name"] for c in out["spec"]["containers"] if VOID in c.get("env", [])] == ["sidecar", "gpu"]
    other = dict(obj, spec={**obj["spec"], "schedulerName": "default-scheduler"})
    _, out = mutated(other, kai)  # the annotation alone (any author can set it) changes nothing
    assert [c["name"] for c in out["spec"]["containers"] if VOID in c.get("env", [])] == ["sidecar", "gpu"]


def test_exempt_service_account_is_never_mutated() -> None:
    obj = pod(container("exporter"), namespace="monitoring", serviceAccountName="dcgm-exporter")
    assert (
        mutated(
            obj, default_policy(amd_runtime_env=False, exempt_service_accounts=frozenset({"monitoring/dcgm-exporter"}))
        )[0]
        == []
    )
    assert len(mutated(obj)[0]) == 1


# ---- AMD's entry (issue 36): AMD_VISIBLE_DEVICES=none, after NVIDIA's void, as the policy ships.


def amd(name: str, resource: str, value: object = 1) -> dict[str, Any]:
    return container(name, image="rocm/pytorch:latest", resources={"limits": {resource: value}})


def test_every_container_without_an_amd_gpu_gets_amd_none_last() -> None:
    obj = pod(
        container("cpu"),
        container("nvidia", gpu=1),
        amd("rocm", "amd.com/gpu"),
        amd("partition", "amd.com/cpx_nps4"),
        amd("zero", "amd.com/gpu", 0),
        initContainers=[container("init", env=[{"name": "AMD_VISIBLE_DEVICES", "value": "all"}])],
    )
    _ops, out = helpers.mutated(obj, AMD_RUNTIME)
    env = {c["name"]: c.get("env", []) for c in out["spec"]["initContainers"] + out["spec"]["containers"]}
    assert env["cpu"] == [VOID, AMD_NONE]
    assert env["nvidia"] == []  # a GPU container is left as written: it lands where nothing reads AMD's variable
    assert env["rocm"] == [VOID] and env["partition"] == [VOID]  # AMD's own: its variable never touched
    assert env["zero"] == [VOID, AMD_NONE]  # 0 of an AMD resource is no AMD GPU
    assert env["init"] == [{"name": "AMD_VISIBLE_DEVICES", "value": "all"}, VOID, AMD_NONE]  # last wins
    assert helpers.mutated(out, AMD_RUNTIME)[0] == []  # idempotent: the webhook's reinvocation changes nothing


@pytest.mark.parametrize("value", ["none", "void", ""])
def test_an_exact_amd_no_device_literal_is_left_alone(value: str) -> None:
    entry = {"name": "AMD_VISIBLE_DEVICES", "value": value}
    _ops, out = helpers.mutated(pod(container(env=[entry])), AMD_RUNTIME)
    assert out["spec"]["containers"][0]["env"] == [entry, VOID]


def test_claims_any_amd_domain_resource_and_the_switches() -> None:
    claim = container("dra", resources={"claims": [{"name": "gpu"}]})
    custom = amd("custom", "amd.com/some-future-partition")  # a name of AMD's domain the model lacks
    _, out = helpers.mutated(pod(claim, custom, resourceClaims=[{"name": "gpu"}]), AMD_RUNTIME)
    assert [c.get("env") for c in out["spec"]["containers"]] == [[VOID], [VOID]]
    for policy in (POLICY, default_policy(amd_runtime_env=True, isolate_non_gpu=False)):
        assert AMD_NONE not in helpers.mutated(pod(container()), policy)[1]["spec"]["containers"][0].get("env", [])


def test_ephemeral_debug_container_gets_amd_none() -> None:
    obj = pod(amd("rocm", "amd.com/gpu"))
    obj["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox"}]
    ops = engine.mutate_new_ephemeral(view(obj, AMD_RUNTIME), AMD_RUNTIME, set()).ops
    assert ops == [
        {"op": "add", "path": "/spec/ephemeralContainers/0/env", "value": [VOID]},
        {"op": "add", "path": "/spec/ephemeralContainers/0/env/-", "value": AMD_NONE},
    ]
