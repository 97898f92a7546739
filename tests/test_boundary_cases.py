"""Issue 48's ways around, and the ones found reading the sources for it, one by one; and the
legitimate GPU shapes the boundary must not break. Through the real server as the API server drives
it (/mutate, the patch applied with jsonpatch, /validate of the patched pod) and through
`gpu-policy mutate` then `gpu-policy check` on the same manifests.

The boundary (docs/policy.md): channels a node-isolated pod can open are denied (device-list
mounts, injector annotations, gated variables, a GKE name for a GPU another pod may hold); node
access outside it is reported, with the exemption a node agent takes, in pods that ask for no GPU,
and denied in GPU pods. Attack 1 (review size, 503) has its own tests (tests/test_review_size.py);
attack 9 (Service links into the AMD runtime) is stated in docs/policy.md's residue.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Server
from tests.test_gpu_world import Case, through_the_cli, through_the_server

CONFIG: dict[str, Any] = {"clusterVersion": "1.30"}
CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
GPU1 = {"limits": {"nvidia.com/gpu": 1}}


def pod(
    *containers: dict[str, Any],
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers), **spec}}


def c(name: str = "app", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": CUDA, **fields}


def host(path: str, read_only: bool = False, **container: Any) -> dict[str, Any]:
    """A pod whose container `app` mounts host `path`."""
    mount = {"name": "h", "mountPath": "/host", **({"readOnly": True} if read_only else {})}
    return pod(c(volumeMounts=[mount], **container), volumes=[{"name": "h", "hostPath": {"path": path}}])


DEV_NULL_LIST = [{"name": "n", "mountPath": "/var/run/nvidia-container-devicesall"}]

ATTACKS = [
    # 2. the toolkit's device-list prefix has no trailing slash
    Case(
        "2: /dev/null at /var/run/nvidia-container-devicesall",
        pod(c(volumeMounts=DEV_NULL_LIST), volumes=[{"name": "n", "hostPath": {"path": "/dev/null"}}]),
        denied=["no-gpu-device-hostpath"],
        voided=["app"],
    ),
    # 3. containerd's NRI device injector beyond devices.*
    *(
        Case(f"3: {key}", pod(c(), annotations={key: value}), denied=["gke-device-annotation"], voided=["app"])
        for key, value in (
            ("cdi-devices.noderesource.dev/container.app", "- nvidia.com/gpu=all\n"),
            ("cdi-devices.nri.io", "- nvidia.com/gpu=all\n"),
            ("mounts.noderesource.dev/container.app", "- {source: /run/containerd/containerd.sock, destination: /c}\n"),
            ("mounts.nri.io/pod", "- {source: /dev/null, destination: /var/run/nvidia-container-devicesall}\n"),
        )
    ),
    # 4. HAMi's opt-out label and a companion resource alone: voided, not left with the image's `all`
    Case(
        "4: hami.io/webhook=ignore with only nvidia.com/gpumem",
        pod(c(resources={"limits": {"nvidia.com/gpumem": 4000}}), labels={"hami.io/webhook": "ignore"}),
        voided=["app"],
    ),
    # 5. the runtime's socket in a GPU pod (it returned early for GPU pods)
    Case(
        "5: containerd's socket in a GPU pod",
        host("/run/containerd/containerd.sock", read_only=True, resources=GPU1),
        denied=["no-gpu-device-hostpath"],
    ),
    Case(
        "5: containerd's socket in a CPU pod pinned to GPU nodes",
        {**host("/run/containerd"), "spec": {**host("/run/containerd")["spec"], "nodeSelector": {"accelerator": "t4"}}},
        denied=["no-gpu-device-hostpath"],
        voided=["app"],
    ),
    # 6. the kubelet's plugin registry (a socket there registers as a DRA driver)
    Case(
        "6: plugins_registry in a GPU pod",
        host("/var/lib/kubelet/plugins_registry", read_only=True, resources=GPU1),
        denied=["no-gpu-device-hostpath"],
    ),
    Case(
        "6: plugins_registry in a CPU pod: node access, reported",
        host("/var/lib/kubelet/plugins_registry"),
        warned=["node-wide-access"],
        voided=["app"],
        says=["plugins_registry"],
    ),
    # 7. the toolkit's own files, writable
    *(
        Case(f"7: {path} writable in a GPU pod", host(path, resources=GPU1), denied=["no-gpu-device-hostpath"])
        for path in ("/usr/local/nvidia", "/etc/nvidia-container-runtime")
    ),
    # 8. an NVIDIA image is no exemption
    Case(
        "8: privileged + hostPID under nvcr.io/nvidia",
        pod(c(image="nvcr.io/nvidia/k8s/dcgm-exporter:4.1.0", securityContext={"privileged": True}), hostPID=True),
        warned=["gpu-node-agent", "node-wide-access"],  # the first: isolation voids an agent image
        voided=["app"],
    ),
    # 10. gated toolkit variables
    *(
        Case(
            f"10: {name}=enabled in a GPU container",
            pod(c(resources=GPU1, env=[{"name": name, "value": "enabled"}])),
            denied=["no-device-grant-env"],
        )
        for name in ("NVIDIA_MOFED", "NVIDIA_GDS", "NVIDIA_GDRCOPY", "NVIDIA_NVSWITCH")
    ),
    # 11. a GKE device name is judged on the count the pod holds (the identity: with the view)
    Case(
        "11: GKE names a GPU the pod does not hold",
        pod(c(), annotations={"devices.gke.io/container.app": "- path: /dev/nvidia3\n"}),
        denied=["gke-device-annotation"],
        voided=["app"],
    ),
]

OWN = [
    # A. NVIDIA's NRI plugin reads the bare key, for every container of the pod.
    Case(
        "A: bare nvidia.cdi.k8s.io",
        pod(c(), annotations={"nvidia.cdi.k8s.io": "nvidia.com/gpu=all"}),
        denied=["no-cdi-annotations"],
        voided=["app"],
    ),
    # B. the NRI injector takes major:minor from the entry; the path is cosmetic.
    Case(
        "B: NRI device by number under another path",
        pod(
            c(),
            annotations={
                "devices.noderesource.dev/container.app": "- {path: /dev/x0, type: c, major: 195, minor: 0}\n"
            },
        ),
        denied=["gke-device-annotation"],
        voided=["app"],
    ),
    # C. CRI-O's default runtime handler allows its device annotation.
    Case(
        "C: devices.crio.io naming a GPU node",
        pod(c(), annotations={"devices.crio.io": "/dev/nvidia0:/dev/nvidia0:rwm"}),
        denied=["gke-device-annotation"],
        voided=["app"],
    ),
    Case(
        "C: devices.crio.io with /dev/fuse only (legitimate)",
        pod(c(image="quay.io/buildah/stable"), annotations={"devices.crio.io": "/dev/fuse"}),
        voided=["app"],
    ),
    # D. HAMi's handshake forged at CREATE picks another tenant's GPU.
    Case(
        "D: forged hami.io handshake",
        pod(
            c(resources=GPU1),
            annotations={
                "hami.io/vgpu-node": "gpu-node-1",
                "hami.io/bind-phase": "allocating",
                "hami.io/vgpu-devices-to-allocate": "GPU-victim,NVIDIA,81920,100:;",
            },
        ),
        denied=["gke-device-annotation"],
    ),
    # E. SYS_ADMIN rewrites the container's own device cgroup: in a GPU pod, denied.
    Case(
        "E: cap_sys_admin (lower case) in a GPU pod",
        pod(c(resources=GPU1, securityContext={"capabilities": {"add": ["cap_sys_admin"]}})),
        denied=["no-privileged-gpu"],
    ),
    # F. ... and in a CPU pod, reported with the agent's exemption.
    Case(
        "F: SYS_ADMIN in a CPU pod",
        pod(c(image="busybox", securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
        warned=["node-wide-access"],
        voided=["app"],
        says=["device cgroup"],
    ),
    # G. the root file system read-only still reaches every socket.
    Case("G: / read-only in a GPU pod", host("/", read_only=True, resources=GPU1), denied=["no-gpu-device-hostpath"]),
    # H. the NRI socket: a plugin there edits every container.
    Case(
        "H: /run/nri in a GPU pod",
        host("/var/run/nri", read_only=True, resources=GPU1),
        denied=["no-gpu-device-hostpath"],
    ),
    # I. a DRA driver's socket folder: the kubelet asks what is there to prepare devices.
    Case(
        "I: /var/lib/kubelet/plugins in a GPU pod",
        host("/var/lib/kubelet/plugins/gpu.nvidia.com", read_only=True, resources=GPU1),
        denied=["no-gpu-device-hostpath"],
    ),
    # J. a device-list mount in an ephemeral (debug) container.
    Case(
        "J: device-list mount in an ephemeral container",
        pod(
            c(),
            ephemeralContainers=[
                c("debug", volumeMounts=[{"name": "e", "mountPath": "/var/run/nvidia-container-devices0"}])
            ],
            volumes=[{"name": "e", "emptyDir": {}}],
        ),
        denied=["no-gpu-device-hostpath"],
        voided=["app"],  # a Pod is never created with ephemeral containers: they come by UPDATE
    ),
    # K. the gated variable through valueFrom.
    Case(
        "K: NVIDIA_NVSWITCH from a ConfigMap",
        pod(
            c(
                resources=GPU1,
                env=[{"name": "NVIDIA_NVSWITCH", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}],
            )
        ),
        denied=["no-device-grant-env"],
    ),
    # L. an envFrom prefix reaching only a gated variable.
    Case(
        "L: envFrom with prefix NVIDIA_G in a GPU container",
        pod(c(resources=GPU1, envFrom=[{"configMapRef": {"name": "x"}, "prefix": "NVIDIA_G"}])),
        denied=["visible-devices-envfrom"],
    ),
]

LEGITIMATE = [
    Case(
        "Kata: the sandbox plugin's default resource name",
        pod(
            c(
                "cuda-vectoradd",
                image="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1-ubuntu20.04",
                resources={"limits": {"nvidia.com/GA102GL_A10": 1}},
            ),
            runtimeClassName="kata-qemu-nvidia-gpu",
        ),
    ),
    Case(
        "CUDA without a GPU request is told why it sees none",
        pod(c("smi", command=["nvidia-smi"])),
        voided=["smi"],
        says=["requests no GPU", 'resources.limits["nvidia.com/gpu"]'],
    ),
    Case(
        "NCCL trainer with /dev/shm and /dev/infiniband (the device cgroup decides)",
        pod(
            c(
                resources={"limits": {"nvidia.com/gpu": 8}},
                volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}, {"name": "ib", "mountPath": "/dev/infiniband"}],
            ),
            volumes=[
                {"name": "shm", "hostPath": {"path": "/dev/shm"}},
                {"name": "ib", "hostPath": {"path": "/dev/infiniband"}},
            ],
        ),
    ),
    Case(
        "GKE TCPX daemon holding the node's eight GPUs",
        pod(
            c("tcpx-daemon", image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.9"),
            c("nccl", resources={"limits": {"nvidia.com/gpu": 8}}),
            annotations={
                "devices.gke.io/container.tcpx-daemon": "".join(f"- path: /dev/nvidia{i}\n" for i in range(8))
            },
        ),
        voided=["tcpx-daemon"],
    ),
    Case(
        "envFrom with the message an ML engineer can act on",
        pod(c("vllm", image="vllm/vllm-openai:latest", resources=GPU1, envFrom=[{"secretRef": {"name": "hf-token"}}])),
        denied=["visible-devices-envfrom"],
        says=["env[].valueFrom.secretKeyRef", "nodeProfile.toolkitReadsEnv"],
    ),
]

CASES = ATTACKS + OWN + LEGITIMATE


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


def test_own_attacks_are_ten_or_more() -> None:
    assert len(OWN) >= 10


def test_envfrom_passes_where_the_node_profile_says_env_is_inert(start_server: Callable[..., Server]) -> None:
    """The vLLM engine's Secret by envFrom: refused where the runtime reads env (its default), let
    through where the platform declares its GPU nodes take devices only from the plugin."""
    inert = start_server({**CONFIG, "nodeProfile": {"toolkitReadsEnv": False}})
    vllm = pod(
        c("vllm", image="vllm/vllm-openai:latest", resources=GPU1, envFrom=[{"secretRef": {"name": "hf-token"}}])
    )
    through_the_server(Case("vllm", vllm), inert)


def test_an_update_that_adds_a_device_annotation_is_judged(server: Server) -> None:
    """Attack 11: annotations are mutable, and a sandbox made anew reads them again. The chart sends
    such an UPDATE (tests/test_match_conditions.py); the server refuses what it adds, and lets a
    running pod's own state (HAMi's handshake, written by its scheduler) be."""
    client = server.client()
    try:
        old = pod(c(resources=GPU1))
        new = pod(
            c(resources=GPU1),
            annotations={"devices.gke.io/container.app": "- path: /dev/nvidia5\n- path: /dev/nvidia6\n"},
        )
        answer = client.validate(new, operation="UPDATE", old=old)
        assert answer["allowed"] is False and "gke-device-annotation" in answer["status"]["message"]
        bound = pod(c(resources=GPU1), annotations={"hami.io/vgpu-devices-to-allocate": "GPU-1,NVIDIA,1000,10:;"})
        relabelled = pod(c(resources=GPU1), annotations={**bound["metadata"]["annotations"], "team": "a"})
        assert client.validate(relabelled, operation="UPDATE", old=bound)["allowed"] is True
    finally:
        client.close()
