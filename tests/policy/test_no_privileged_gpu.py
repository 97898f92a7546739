import pytest

from tests.helpers import SPEC_PATH, container, pod, run, wrap

ID = "no-privileged-gpu"


def test_privileged_gpu_container() -> None:
    (v,) = run(pod(container("t", gpu="1", privileged=True)), rule=ID)
    assert v.path == "spec.containers[0].securityContext.privileged"
    assert v.describe() == (
        'no-privileged-gpu (container "t": spec.containers[0].securityContext.privileged is true in a GPU pod: '
        "a privileged container sees every GPU on the node; "
        "fix: remove securityContext.privileged (request the GPUs you need instead))"
    )


def test_privileged_sidecar_in_gpu_pod() -> None:
    p = pod(container("gpu", gpu="1"), container("side", privileged=True))
    assert [v.container for v in run(p, rule=ID)] == ["side"]


@pytest.mark.parametrize(
    "cap", ["SYS_ADMIN", "CAP_SYS_ADMIN", "sys_admin", "Cap_Sys_Admin", "ALL", "all", " SYS_ADMIN "]
)
def test_sys_admin_spellings(cap: str) -> None:
    (v,) = run(pod(container(gpu=1, caps=["NET_ADMIN", cap])), rule=ID)
    assert v.path == "spec.containers[0].securityContext.capabilities.add[1]"


@pytest.mark.parametrize("cap", ["NET_ADMIN", "SYS_PTRACE", "SYS_NICE", "CAP_NET_RAW"])
def test_other_capabilities_are_fine(cap: str) -> None:
    assert run(pod(container(gpu=1, caps=[cap])), rule=ID) == []


def test_non_gpu_pod_is_not_this_rules_business() -> None:
    assert run(pod(container(privileged=True)), rule=ID) == []
    assert run(pod(container(gpu="0", privileged=True)), rule=ID) == []


def test_privileged_false_and_escalation_are_fine() -> None:
    c = container(gpu=1, privileged=False)
    c["securityContext"]["allowPrivilegeEscalation"] = True
    assert run(pod(c), rule=ID) == []


def test_pinned_by_node_selector() -> None:
    p = pod(container(privileged=True), nodeSelector={"accelerator": "nvidia-t4"})
    assert len(run(p, rule=ID)) == 1


def affinity(operator: str, key: str = "accelerator") -> dict:
    expr = {"key": key, "operator": operator}
    if operator in ("In", "NotIn"):
        expr["values"] = ["nvidia-t4"]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                    {"matchExpressions": [expr]},
                ]
            }
        }
    }


@pytest.mark.parametrize(
    ("operator", "denied"), [("In", True), ("Exists", True), ("NotIn", False), ("DoesNotExist", False)]
)
def test_pinned_by_required_affinity(operator: str, denied: bool) -> None:
    p = pod(container(privileged=True), affinity=affinity(operator))
    assert bool(run(p, rule=ID)) is denied


def test_preferred_affinity_does_not_pin() -> None:
    aff = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "accelerator", "operator": "Exists"}]}}
            ]
        }
    }
    assert run(pod(container(privileged=True), affinity=aff), rule=ID) == []


def test_privileged_init_and_ephemeral_containers() -> None:
    p = pod(
        container("app", gpu=1),
        initContainers=[container("init", privileged=True)],
        ephemeralContainers=[container("debugger", caps=["SYS_ADMIN"])],
    )
    assert [(v.container_kind, v.container) for v in run(p, rule=ID)] == [
        ("init container", "init"),
        ("ephemeral container", "debugger"),
    ]


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet", "Job", "CronJob", "ReplicationController"])
def test_templates(kind: str) -> None:
    (v,) = run(wrap(pod(container(gpu=1, privileged=True)), kind), rule=ID)
    assert v.path == f"{SPEC_PATH[kind]}.containers[0].securityContext.privileged"


def test_pods_pinned_by_vendor_gpu_node_labels_are_gpu_pods() -> None:
    from tests.helpers import container, pod, run

    for selector in (
        {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        {"nvidia.com/gpu.present": "true"},
        {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        {"k8s.amazonaws.com/accelerator": "nvidia-tesla-v100"},
    ):
        p = pod(container("debug", privileged=True), nodeSelector=selector)
        assert [v.rule for v in run(p, rule="no-privileged-gpu")] == ["no-privileged-gpu"], selector
    assert (
        run(pod(container("debug", privileged=True), nodeSelector={"disktype": "ssd"}), rule="no-privileged-gpu") == []
    )


def test_pods_pinned_to_gpu_instance_types_are_gpu_pods() -> None:
    from tests.helpers import container, pod, run

    for machine in ("p4d.24xlarge", "g5.xlarge", "a2-highgpu-1g", "Standard_NC24ads_A100_v4"):
        p = pod(container("debug", privileged=True), nodeSelector={"node.kubernetes.io/instance-type": machine})
        assert [v.rule for v in run(p, rule="no-privileged-gpu")] == ["no-privileged-gpu"], machine
    p = pod(container("debug", privileged=True), nodeSelector={"node.kubernetes.io/instance-type": "m5.xlarge"})
    assert run(p, rule="no-privileged-gpu") == []
