"""Real GPU clusters: every way a GPU reaches a container, through the server and the CLI.

Each case is a manifest shaped after the project's own published example (NVIDIA's MIG and
time-slicing docs, the NVIDIA DRA driver's gpu-test1, KAI Scheduler's gpu-sharing example as
its webhook leaves it, HAMi's and CCE xGPU's examples, the dcgm-exporter DaemonSet), a config,
and what must happen. Every case runs three ways, and all three must agree:

- the server, as the API server drives it: /mutate, the patch applied with jsonpatch, then
  /validate of the patched pod (validating webhooks see the mutated object);
- `gpu-policy mutate` then `gpu-policy check` on the file, as CI would.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, Server

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}

CONFIGS: dict[str, dict[str, Any]] = {
    "default": {"clusterVersion": "1.30"},
    "kai": {"clusterVersion": "1.30", "integrations": {"kai": {"enabled": True}}},
    "exempt-agent": {"clusterVersion": "1.30", "exemptServiceAccounts": ["monitoring/dcgm-exporter"]},
    "hami-xgpu": {"clusterVersion": "1.30", "integrations": {"hami": {"enabled": True}, "xgpu": {"enabled": True}}},
}

# NVIDIA's MIG "mixed strategy" example, with a CPU-only log shipper next to it.
MIG = """
apiVersion: v1
kind: Pod
metadata: {name: mig-mixed-example, namespace: ml}
spec:
  restartPolicy: Never
  containers:
  - name: vectoradd
    image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
    resources:
      limits: {nvidia.com/mig-1g.5gb: 1}
  - name: log-shipper
    image: fluent/fluent-bit:3.1
"""

# The device plugin's time-slicing example with renameByDefault: true.
SHARED = """
apiVersion: v1
kind: Pod
metadata: {name: time-slicing-verification, namespace: ml}
spec:
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  hostPID: false
  containers:
  - name: cuda-sample-vector-add
    image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1-ubuntu20.04
    command: ["/bin/bash", "-c", "--"]
    args: ["while true; do /cuda-samples/vectorAdd; done"]
    resources:
      limits: {nvidia.com/gpu.shared: 1}
"""

# The NVIDIA DRA driver's gpu-test1 (resource.k8s.io/v1, Kubernetes 1.34), plus a sidecar.
DRA = """
apiVersion: v1
kind: Pod
metadata: {name: pod1, namespace: gpu-test1}
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims:
      - name: gpu
  - name: metrics
    image: prom/node-exporter:v1.8.2
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: single-gpu
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""

# KAI Scheduler's gpu-sharing example as submitted...
KAI_SUBMITTED = """
apiVersion: v1
kind: Pod
metadata:
  name: gpu-sharing
  namespace: team-a
  labels: {runai/queue: test}
  annotations: {gpu-fraction: "0.5"}
spec:
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  schedulerName: kai-scheduler
  containers:
  - name: sleep
    image: busybox
    args: ["sh", "-c", "sleep infinity"]
"""

HAMI = """
apiVersion: v1
kind: Pod
metadata: {name: gpu-pod, namespace: ml}
spec:
  containers:
  - name: ubuntu-container
    image: ubuntu:18.04
    command: ["bash", "-c", "sleep 86400"]
    resources:
      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 3000, nvidia.com/gpucores: 30}
"""

# HAMi's memory-only request: its webhook adds nvidia.com/gpu: 1 later.
HAMI_MEM_ONLY = """
apiVersion: v1
kind: Pod
metadata: {name: gpu-pod-mem, namespace: ml}
spec:
  containers:
  - name: ubuntu-container
    image: ubuntu:18.04
    command: ["bash", "-c", "sleep 86400"]
    resources:
      limits: {nvidia.com/gpumem: 3000}
"""

XGPU = """
apiVersion: v1
kind: Pod
metadata: {name: gpu-app, namespace: default}
spec:
  schedulerName: volcano
  containers:
  - name: container-0
    image: nginx:latest
    resources:
      limits: {cpu: 250m, memory: 512Mi, volcano.sh/gpu-mem.128Mi: 5, volcano.sh/gpu-core.percentage: 25}
  imagePullSecrets:
  - name: default-secret
"""

# A pod of the dcgm-exporter DaemonSet (its Helm chart's defaults), outside the exempt namespaces.
DCGM = """
apiVersion: v1
kind: Pod
metadata:
  name: dcgm-exporter-x2k9f
  namespace: monitoring
  labels: {app.kubernetes.io/name: dcgm-exporter}
  ownerReferences:
  - {apiVersion: apps/v1, kind: DaemonSet, name: dcgm-exporter, uid: 6c1f1c1e-4bbd-4a71-9a38-0a5d3b5d8e11,
     controller: true, blockOwnerDeletion: true}
spec:
  serviceAccountName: dcgm-exporter
  containers:
  - name: exporter
    image: nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04
    env:
    - {name: DCGM_EXPORTER_LISTEN, value: ":9400"}
    - {name: DCGM_EXPORTER_KUBERNETES, value: "true"}
    ports:
    - {name: metrics, containerPort: 9400}
    securityContext:
      runAsNonRoot: false
      runAsUser: 0
      capabilities: {add: [SYS_ADMIN]}
    volumeMounts:
    - {name: pod-gpu-resources, readOnly: true, mountPath: /var/lib/kubelet/pod-resources}
  volumes:
  - name: pod-gpu-resources
    hostPath: {path: /var/lib/kubelet/pod-resources}
"""


def load(text: str, edit: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(text)
    if edit is not None:
        edit(obj)
    return obj


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"]["containers"])


def set_limit(i: int, name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        obj["spec"]["containers"][i]["resources"]["limits"][name] = value

    return edit


def privileged(i: int) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        obj["spec"]["containers"][i]["securityContext"] = {"privileged": True}

    return edit


def old_claim_shape(obj: dict[str, Any]) -> None:
    """Kubernetes 1.26-1.30 wrapped the claim's source."""
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "source": {"resourceClaimTemplateName": "single-gpu"}}]


KAI_PREFIX = "gpu-sharing-x7k2p9q-shared-gpu"


def kai_webhook(obj: dict[str, Any]) -> dict[str, Any]:
    """What KAI Scheduler's mutating webhook does to a fraction pod (pkg/admission/webhook/v1alpha2/
    gpusharing and pkg/binder/common/gpu_access.go): names its ConfigMap in an annotation and gives
    the fraction container NVIDIA_VISIBLE_DEVICES (and two more) from it, replacing any existing
    entry of the same name, plus an envFrom and a volume of its own."""
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})["runai/shared-gpu-configmap"] = KAI_PREFIX
    c = out["spec"]["containers"][0]
    cm = f"{KAI_PREFIX}-0"
    env = [
        e for e in c.get("env", []) if e["name"] not in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
    ]
    for name in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"):
        env.append({"name": name, "valueFrom": {"configMapKeyRef": {"name": cm, "key": name}}})
    c["env"] = env
    c["envFrom"] = [{"configMapRef": {"name": f"{cm}-evar", "optional": True}}]
    out["spec"]["volumes"] = [{"name": f"{cm}-vol", "configMap": {"name": cm}}]
    return out


def kai_copycat(obj: dict[str, Any]) -> None:
    """A pod that is not KAI's copying the pattern: its ConfigMap could say `all`."""
    obj["spec"]["containers"][0]["env"] = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "my-gpus", "key": "NVIDIA_VISIBLE_DEVICES"}},
        }
    ]


@dataclass
class Case:
    name: str
    obj: dict[str, Any]
    config: str = "default"
    denied: list[str] = field(default_factory=list)  # deny rule ids
    warned: list[str] = field(default_factory=list)  # warn rule ids
    voided: list[str] = field(default_factory=list)  # containers isolation gives void
    says: list[str] = field(default_factory=list)  # texts the message or a warning contains


KAI_AFTER = kai_webhook(load(KAI_SUBMITTED))

CASES = [
    Case("mig", load(MIG), voided=["log-shipper"]),
    Case(
        "mig privileged",
        load(MIG, privileged(0)),
        denied=["no-privileged-gpu"],
        voided=["log-shipper"],
        says=["request the nvidia.com/mig-1g.5gb you need instead"],
    ),
    Case(
        "mig decimal",
        load(MIG, set_limit(0, "nvidia.com/mig-1g.5gb", "0.5")),
        denied=["gpu-quantity"],
        voided=["log-shipper"],
        says=["hands out whole devices"],
    ),
    Case("shared slot", load(SHARED)),
    Case(
        "two shared slots",
        load(SHARED, set_limit(0, "nvidia.com/gpu.shared", 2)),
        warned=["gpu-shared-slots"],
        says=["maximum request size for shared resources is 1"],
    ),
    # The claim holder is voided too: its GPU comes through CDI, whose edits replace the variable
    # (NVIDIA's DRA driver writes NVIDIA_VISIBLE_DEVICES=void into its CDI specs itself).
    Case("dra", load(DRA), voided=["ctr", "metrics"]),
    Case("dra, 1.26-1.30 claim shape", load(DRA, old_claim_shape), voided=["ctr", "metrics"]),
    Case(
        "dra privileged claim holder",
        load(DRA, privileged(0)),
        denied=["no-privileged-gpu"],
        voided=["ctr", "metrics"],
    ),
    # The sidecar holds no claim, but the pod may hold a GPU: privilege there reaches it.
    Case("dra privileged sidecar", load(DRA, privileged(1)), denied=["no-privileged-gpu"], voided=["ctr", "metrics"]),
    Case(
        "kai fraction pod after KAI's webhook, no integration",
        KAI_AFTER,
        denied=["no-visible-devices-env"],
        voided=["sleep"],
        says=["integrations.kai.enabled"],
    ),
    Case("kai fraction pod after KAI's webhook, integration on", KAI_AFTER, config="kai"),
    Case(
        "a non-KAI pod copying KAI's configMapKeyRef",
        load(SHARED, kai_copycat),
        config="kai",
        denied=["no-visible-devices-env"],
        says=["through valueFrom"],
    ),
    Case("hami", load(HAMI)),
    Case("hami memory only", load(HAMI_MEM_ONLY)),
    Case(
        "hami cores above 100",
        load(HAMI, set_limit(0, "nvidia.com/gpucores", 150)),
        config="hami-xgpu",
        denied=["gpu-quantity"],
        says=["percent of the GPU's cores"],
    ),
    Case("xgpu", load(XGPU)),
    Case(
        "xgpu compute not a multiple of 5",
        load(XGPU, set_limit(0, "volcano.sh/gpu-core.percentage", 23)),
        config="hami-xgpu",
        denied=["gpu-quantity"],
        says=["in steps of 5"],
    ),
    Case(
        "dcgm-exporter in monitoring, not exempt",
        load(DCGM),
        warned=["gpu-node-agent", "node-wide-access"],  # the second: it adds SYS_ADMIN, node access
        voided=["exporter"],
        says=['exemptServiceAccounts lists "monitoring/dcgm-exporter"'],
    ),
    Case("dcgm-exporter in monitoring, exempt service account", load(DCGM), config="exempt-agent"),
]


def rule_ids(texts: list[str], prefix: str) -> list[str]:
    return sorted({t[len(prefix) :].split(" ", 1)[0] for t in texts if t.startswith(prefix)})


def voided(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for old, new in zip(containers(before), containers(after), strict=True):
        if VOID in new.get("env", []) and VOID not in old.get("env", []):
            out.append(new["name"])
    return out


@pytest.fixture(scope="module")
def servers(start_server: Callable[..., Server]) -> dict[str, Server]:
    return {name: start_server(config) for name, config in CONFIGS.items()}


def through_the_server(case: Case, server: Server) -> None:
    """`case` as the API server drives the two webhooks: /mutate (applied, and reinvoked: it must
    change nothing), then /validate of the patched pod; texts in `says` may be in either answer."""
    client = server.client()
    try:
        response, after = client.mutate(case.obj)
        assert response["allowed"] is True
        assert voided(case.obj, after) == case.voided
        assert client.mutate(after)[1] == after, "reinvocation must change nothing"
        verdict = client.validate(after)
    finally:
        client.close()
    message = verdict.get("status", {}).get("message", "")
    warnings = verdict.get("warnings", [])
    assert verdict["allowed"] is not case.denied, message
    assert rule_ids([message.removeprefix("violates GPU policy: ")], "") == case.denied or not case.denied
    for rule in case.denied:
        assert f"{rule} (" in message
    assert rule_ids(warnings, "would violate GPU policy: ") == sorted(case.warned), warnings
    shown = [message, *warnings, *response.get("warnings", [])]
    for text in case.says:
        assert any(text in t for t in shown), (text, shown)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_through_the_server(case: Case, servers: dict[str, Server]) -> None:
    through_the_server(case, servers[case.config])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def through_the_cli(cases: list[Case], config_values: dict[str, Any], tmp_path: Path, says: bool = True) -> None:
    """`gpu-policy mutate` then `gpu-policy check` over `cases` in one file, as CI would: the same
    voided containers, denials and warnings as through the server (`says`: the validation texts)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(config_values))
    manifests = tmp_path / "in.yaml"
    manifests.write_text(yaml.safe_dump_all([c.obj for c in cases]))
    r = cli("mutate", "-f", str(manifests), "--config", str(config), "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    patched = out if isinstance(out, list) else [out]
    for case, after in zip(cases, patched, strict=True):
        assert voided(case.obj, after) == case.voided, case.name
    mutated = tmp_path / "mutated.yaml"
    mutated.write_text(yaml.safe_dump_all(patched))
    r = cli("check", "-f", str(mutated), "--config", str(config), "-o", "json")
    report = json.loads(r.stdout)
    assert r.returncode == (1 if any(c.denied for c in cases) else 0), r.stdout + r.stderr
    for case, result in zip(cases, report["results"], strict=True):
        assert sorted({v["rule"] for v in result["violations"]}) == sorted(case.denied), case.name
        assert rule_ids(result["warnings"], "would violate GPU policy: ") == sorted(case.warned), case.name
        shown = (result["message"] or "") + " ".join(result["warnings"])
        for text in case.says if says else ():
            assert text in shown, (case.name, text)


@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_through_the_cli(config_name: str, tmp_path: Path) -> None:
    """`gpu-policy mutate` then `gpu-policy check` over the cases of one config, in one file each."""
    through_the_cli([c for c in CASES if c.config == config_name], CONFIGS[config_name], tmp_path)


def kai_flows() -> Iterator[tuple[str, list[str]]]:
    yield "ours first, then KAI's, then ours again (reinvocationPolicy: IfNeeded)", ["ours", "kai", "ours"]
    yield "KAI's first, then ours", ["kai", "ours"]


@pytest.mark.parametrize(("order", "config"), [(o, c) for o, _ in kai_flows() for c in ("default", "kai")])
def test_webhook_order_with_kai(order: str, config: str, servers: dict[str, Server]) -> None:
    """Whatever order the API server runs the two mutating webhooks in, with the integration the
    fraction container ends with KAI's variable (never our void) and is let in; without it our void
    comes last (the entry the kubelet keeps) and validation says what to configure."""
    steps = dict(kai_flows())[order]
    client = servers[config].client()
    try:
        obj = load(KAI_SUBMITTED)
        for step in steps:
            obj = kai_webhook(obj) if step == "kai" else client.mutate(obj)[1]
        env = obj["spec"]["containers"][0]["env"]
        if config == "kai":
            assert VOID not in env
            assert [e["name"] for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"] == ["NVIDIA_VISIBLE_DEVICES"]
        else:
            assert [e for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"][-1] == VOID  # ours wins (last)
            assert {"name": "AMD_VISIBLE_DEVICES", "value": "none"} not in env  # no AMD runtime declared
        verdict = client.validate(obj)
    finally:
        client.close()
    assert verdict["allowed"] is (config == "kai"), verdict


def test_kai_fraction_container_is_not_voided_with_the_integration(servers: dict[str, Server]) -> None:
    """With the integration on, the submitted fraction pod is left for KAI; without it, isolation
    voids it (KAI's webhook then replaces the entry, and validation says what to configure)."""
    for config, expected in (("kai", []), ("default", ["sleep"])):
        client = servers[config].client()
        try:
            obj = load(KAI_SUBMITTED)
            assert voided(obj, client.mutate(obj)[1]) == expected, config
        finally:
            client.close()


def test_kai_pattern_on_another_container_is_denied(servers: dict[str, Server]) -> None:
    """Only the fraction container may carry KAI's variable: a second container pointing at the
    same ConfigMap is a copy of the pattern."""
    obj = copy.deepcopy(KAI_AFTER)
    second = copy.deepcopy(obj["spec"]["containers"][0])
    second["name"] = "helper"
    obj["spec"]["containers"].append(second)
    client = servers["kai"].client()
    try:
        verdict = client.validate(obj)
    finally:
        client.close()
    assert verdict["allowed"] is False
    assert 'no-visible-devices-env (container "helper"' in verdict["status"]["message"]


def test_isolation_ignores_the_opt_out_label_and_annotation(servers: dict[str, Server]) -> None:
    """A pod author cannot turn isolation off: the label and the annotation change nothing."""
    obj = load(MIG)
    obj["metadata"]["labels"] = {"gpu-policy.io/mutate": "false"}
    obj["metadata"]["annotations"] = {"gpu-policy.io/mutate": "false"}
    client = servers["default"].client()
    try:
        assert voided(obj, client.mutate(obj)[1]) == ["log-shipper"]
    finally:
        client.close()


def test_exempt_username(start_server: Callable[..., Server]) -> None:
    """exemptUsernames: PSA's request-level exemption, by request.userInfo.username."""
    server = start_server({"exemptUsernames": ["system:serviceaccount:gpu-operator:gpu-operator"]})
    client = server.client()
    try:
        obj = load(MIG, privileged(0))
        assert client.validate(obj, user="system:serviceaccount:gpu-operator:gpu-operator")["allowed"] is True
        assert client.validate(obj, user="alice")["allowed"] is False
        response, _ = client.mutate(obj, user="system:serviceaccount:gpu-operator:gpu-operator")
        assert "patch" not in response
    finally:
        client.close()
