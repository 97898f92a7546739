"""Issue 32's attacks, one by one, and the legitimate shapes they must not break: through the real
server as the API server drives it (/mutate, the patch applied with jsonpatch, /validate of the
patched pod) and through `gpu-policy mutate` then `gpu-policy check` on the same manifests.

Each attack is the smallest pod that reached a GPU before; each legitimate case is shaped after the
project's own published example (vLLM's Kubernetes deployment with its Hugging Face secret,
Volcano's vGPU user guide, NVIDIA's Kata GPU pass-through pod, the NVIDIA DRA driver's gpu-test
with a NIC claim, GKE's TCPX sample).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import render
from tests.helpers import Server
from tests.test_gpu_world import VOID, Case, cli, rule_ids, through_the_cli, through_the_server

CONFIG: dict[str, Any] = {"clusterVersion": "1.30"}
CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def pod(
    *containers: dict[str, Any], name: str = "p", annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers), **spec}}


def c(name: str = "app", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": CUDA, **fields}


def nvd(value: str) -> dict[str, str]:
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}


GPU1 = {"limits": {"nvidia.com/gpu": 1}}

VLLM = yaml.safe_load(
    """
apiVersion: v1
kind: Pod
metadata: {name: vllm-server, namespace: ml, labels: {app: vllm}}
spec:
  containers:
  - name: vllm
    image: vllm/vllm-openai:latest
    command: ["/bin/sh", "-c"]
    args: ["vllm serve meta-llama/Llama-3.2-1B-Instruct --trust-remote-code"]
    env:
    - name: HUGGING_FACE_HUB_TOKEN
      valueFrom: {secretKeyRef: {name: hf-token-secret, key: token}}
    ports: [{containerPort: 8000}]
    resources:
      limits: {cpu: "10", memory: 20G, nvidia.com/gpu: "1"}
      requests: {cpu: "2", memory: 6G, nvidia.com/gpu: "1"}
    volumeMounts: [{name: cache-volume, mountPath: /root/.cache/huggingface}]
  volumes:
  - name: cache-volume
    persistentVolumeClaim: {claimName: mistral-7b}
"""
)


def vllm_with(env_from: list[dict[str, Any]]) -> dict[str, Any]:
    out = json.loads(json.dumps(VLLM))
    out["spec"]["containers"][0]["envFrom"] = env_from
    return out


# Volcano's GPU sharing user guide (vgpu device plugin).
VOLCANO = yaml.safe_load(
    """
apiVersion: v1
kind: Pod
metadata: {name: gpu-pod12, namespace: ml}
spec:
  schedulerName: volcano
  containers:
  - name: ubuntu-container
    image: ubuntu:20.04
    command: ["bash", "-c", "sleep 86400"]
    resources:
      limits: {volcano.sh/vgpu-number: 2, volcano.sh/vgpu-memory: 3000}
"""
)

# NVIDIA's GPU operator with Kata Containers: GPU pass-through into the sandbox VM.
KATA = yaml.safe_load(
    """
apiVersion: v1
kind: Pod
metadata:
  name: cuda-vectoradd-kata
  namespace: ml
  annotations: {cdi.k8s.io/gpu: "nvidia.com/pgpu=0", io.katacontainers.config.hypervisor.default_memory: "16384"}
spec:
  runtimeClassName: kata-qemu-nvidia-gpu
  restartPolicy: OnFailure
  containers:
  - name: cuda-vectoradd
    image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1-ubuntu20.04
    resources:
      limits: {nvidia.com/pgpu: 1}
"""
)

CASES = [
    # 1. the toolkit's own reading, current and legacy
    *(
        Case(
            f"1: {value!r} in a CPU container",
            pod(c(env=[nvd(value)])),
            denied=["no-visible-devices-env"],
            voided=["app"],
        )
        for value in ("all,void\x1c", "none\x1f,all", "all,void", " void")
    ),
    Case("1: exact void is fine", pod(c(env=[nvd("void")]))),
    # 2. $(VAR) expansion with relaxed names
    Case(
        "2: $(a,void,b) after a variable named a,void,b",
        pod(c(env=[{"name": "a,void,b", "value": "all"}, nvd("$(a,void,b)")])),
        denied=["no-visible-devices-env"],
        voided=["app"],
    ),
    # 3. envFrom where the plugin's variable carries the GPU
    Case(
        "3: vLLM with an unprefixed envFrom",
        vllm_with([{"secretRef": {"name": "hf-token-secret"}}]),
        denied=["visible-devices-envfrom"],
        says=["prefix"],
    ),
    Case(
        "3: prefix NVIDIA_ still reaches the names",
        vllm_with([{"configMapRef": {"name": "x"}, "prefix": "NVIDIA_"}]),
        denied=["visible-devices-envfrom"],
    ),
    Case("3: vLLM with a prefixed envFrom (legitimate)", vllm_with([{"secretRef": {"name": "hf"}, "prefix": "HF_"}])),
    Case("3: vLLM as published (legitimate)", VLLM),
    Case("3: envFrom in a CPU container is voided", pod(c(envFrom=[{"configMapRef": {"name": "cm"}}])), voided=["app"]),
    # 4. nodeName skips the scheduler; the kubelet drops what its node lacks
    Case(
        "4: MIG on a named node the webhook cannot vouch for",
        pod(c(resources={"limits": {"nvidia.com/mig-7g.80gb": 1}}), nodeName="gpu-node-7"),
        denied=["gpu-node-name-advertised"],
        says=["spec.nodeName"],
    ),
    Case(
        "4: a HAMi companion on a named node",
        pod(c(resources={"limits": {"nvidia.com/gpumem": 4000}}), nodeName="gpu-node-7"),
        denied=["gpu-node-name-advertised"],
    ),
    # 5. DRA: claim holders are voided (CDI delivers their devices), a NIC-only request too
    Case(
        "5: a container naming only the NIC request of a GPU+NIC claim",
        pod(
            c("nic-user", resources={"claims": [{"name": "gpu-and-nic", "request": "nic"}]}),
            c("trainer", resources={"claims": [{"name": "gpu-and-nic", "request": "gpu"}]}),
            resourceClaims=[{"name": "gpu-and-nic", "resourceClaimTemplateName": "gpu-nic-template"}],
        ),
        voided=["nic-user", "trainer"],
    ),
    # 6. device-injector annotations
    *(
        Case(f"6: {key}", pod(c(), annotations={key: value}), denied=["gke-device-annotation"], voided=["app"])
        for key, value in (
            ("devices.gke.io/pod", "- path: /dev/nvidia0\n"),
            ("devices.gke.io", "- path: /dev/nvidia0\n"),
            ("devices.gke.io/container.app", "- path: /dev//nvidia1\n"),
            ("devices.gke.io/container.app", '- {path: "/dev/./nvidia2"}\n'),
            ("devices.noderesource.dev/container.app", "- path: /dev/nvidia0\n"),
        )
    ),
    # 7. toolkit variables that grant more than GPUs
    Case(
        "7: NVIDIA_IMEX_CHANNELS=0 in a GPU container",
        pod(c(resources=GPU1, env=[{"name": "NVIDIA_IMEX_CHANNELS", "value": "0"}])),
        denied=["no-device-grant-env"],
        says=["ComputeDomain"],
    ),
    Case(
        "7: NVIDIA_MIG_CONFIG_DEVICES=all",
        pod(c(resources=GPU1, env=[{"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"}])),
        denied=["no-device-grant-env"],
    ),
    # 8. pods without a GPU request that reach every GPU of their node: warned, naming the risk
    Case(
        "8: kubectl debug --profile=sysadmin on a CPU pod",
        pod(c("web", image="nginx:1.27"), ephemeralContainers=[c("debugger", securityContext={"privileged": True})]),
        warned=["node-wide-access"],
        voided=["web"],
        says=["every GPU"],
    ),
    Case(
        "8: the container runtime's socket",
        pod(
            c(volumeMounts=[{"name": "sock", "mountPath": "/run/containerd/containerd.sock"}]),
            volumes=[{"name": "sock", "hostPath": {"path": "/run/containerd/containerd.sock"}}],
        ),
        warned=["node-wide-access"],
        voided=["app"],
    ),
    # hostPID alone reaches no device (issue 48: node-exporter's is harm to warn about); with SYS_PTRACE,
    # other pods' open GPU descriptors.
    Case("8: hostPID alone", pod(c(image="ubuntu:24.04"), hostPID=True), voided=["app"]),
    Case(
        "8: hostPID with SYS_PTRACE",
        pod(c(image="ubuntu:24.04", securityContext={"capabilities": {"add": ["SYS_PTRACE"]}}), hostPID=True),
        warned=["node-wide-access"],
        voided=["app"],
    ),
    # 11. sharing plugins the model now knows, and one it does not
    Case("11: Volcano vGPU (legitimate)", VOLCANO),
    Case(
        "11: a renamed time-sliced resource (legitimate)",
        pod(c(resources={"limits": {"nvidia.com/t4-shared": 1}})),
    ),
    Case(
        "11: an unknown GPU-like resource is voided, and told so",
        pod(c(resources={"limits": {"example.com/vgpu": 1}})),
        voided=["app"],
        says=["gpuDeviceResources"],
    ),
    # 12. NVIDIA's Kata pass-through pod
    Case("12: Kata GPU pass-through (legitimate)", KATA),
]


@pytest.fixture(scope="module")
def server(start_server: Callable[..., Server]) -> Server:
    return start_server(CONFIG)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_through_the_server(case: Case, server: Server) -> None:
    through_the_server(case, server)
    assert server.log_problems() == []


def test_through_the_cli(tmp_path: Path) -> None:
    # The texts of `says` include mutation warnings, which `check` does not print.
    through_the_cli(CASES, CONFIG, tmp_path, says=False)


def test_voided_container_with_envfrom_gets_imex_void(server: Server) -> None:
    client = server.client()
    try:
        _, after = client.mutate(pod(c(envFrom=[{"configMapRef": {"name": "cm"}}])))
    finally:
        client.close()
    assert after["spec"]["containers"][0]["env"] == [{"name": "NVIDIA_IMEX_CHANNELS", "value": "void"}, VOID]


ADMIN_CLAIM = yaml.safe_load(
    """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: gpu-monitor, namespace: team-a}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com, adminAccess: true, allocationMode: All}
"""
)


def test_admin_access_claims_are_flagged_through_the_server_and_check(server: Server, tmp_path: Path) -> None:
    """Issue 32 #10: a claim with adminAccess (the DRA drivers' monitoring examples) is flagged where it is made."""
    client = server.client()
    try:
        answer = client.validate(ADMIN_CLAIM)
    finally:
        client.close()
    assert answer["allowed"] is True
    assert rule_ids(answer.get("warnings", []), "would violate GPU policy: ") == ["dra-admin-access"]
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(ADMIN_CLAIM))
    r = cli("check", "-f", str(path), "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    (result,) = json.loads(r.stdout)["results"]
    assert rule_ids(result["warnings"], "would violate GPU policy: ") == ["dra-admin-access"]


def test_chart_refuses_the_default_namespace(tmp_path: Path) -> None:
    """Issue 32 #9: the release namespace is always exempt, so `default` would exempt every pod there."""
    result = render({}, namespace="default", tmp=tmp_path, check=False)
    assert not isinstance(result, list) and result.returncode != 0
    assert 'the release namespace "default" is exempt' in result.stderr
    assert isinstance(render({}, namespace="gpu-policy", tmp=tmp_path), list)
