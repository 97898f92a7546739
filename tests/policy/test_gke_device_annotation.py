"""gke-device-annotation: GKE's NRI device annotation gives no more GPUs than the pod holds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import container, pod, run, wrap

ID = "gke-device-annotation"
EIGHT = "".join(f"- path: /dev/nvidia{i}\n" for i in range(8)) + "- path: /dev/nvidiactl\n- path: /dev/nvidia-uvm\n"


def annotated(p: dict[str, Any], value: str, name: str = "tcpx-daemon") -> dict[str, Any]:
    p["metadata"]["annotations"] = {f"devices.gke.io/container.{name}": value}
    return p


def test_tcpx_daemon_next_to_eight_gpus_is_allowed() -> None:
    p = pod(container("tcpx-daemon"), container("nccl-test", gpu=8))
    assert run(annotated(p, EIGHT), rule=ID) == []


def test_more_devices_than_gpus_or_none_at_all_is_denied() -> None:
    (v,) = run(annotated(pod(container("tcpx-daemon"), container("app", gpu=1)), EIGHT), rule=ID)
    assert v.path == 'metadata.annotations["devices.gke.io/container.tcpx-daemon"]'
    assert 'gives container "tcpx-daemon" /dev/nvidia0, ' in v.detail and "requests 1 nvidia.com/gpu" in v.detail
    (v,) = run(annotated(pod(container("tcpx-daemon")), "- path: /dev/nvidia3\n"), rule=ID)
    assert v.value == "/dev/nvidia3"


def test_control_nodes_alone_and_other_annotations_are_fine() -> None:
    assert run(annotated(pod(container("x")), "- path: /dev/nvidiactl\n- path: /dev/nvidia-uvm\n"), rule=ID) == []
    p = pod(container("x"))
    p["metadata"]["annotations"] = {"team.example.com/devices": "- path: /dev/nvidia0\n"}
    assert run(p, rule=ID) == []


@pytest.mark.parametrize(
    "key",
    [
        "devices.gke.io/pod",
        "devices.gke.io",
        "devices.gke.io/other",
        "devices.noderesource.dev/container.x",
        "devices.nri.io/pod",
        "devices.noderesource.dev",
    ],
)
def test_every_injector_key_is_read(key: str) -> None:
    """Issue 32 #6: the pod-wide and bare keys, and containerd's NRI device injector, are policed too."""
    p = pod(container("x"))
    p["metadata"]["annotations"] = {key: "- path: /dev/nvidia0\n"}
    (v,) = run(p, rule=ID)
    assert "/dev/nvidia0" in v.detail or "NRI device injector" in v.detail


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # Attack 3: the injector's other domains, in both spellings, bare or per container.
        ("cdi-devices.noderesource.dev/container.x", "- nvidia.com/gpu=all\n"),
        ("cdi-devices.nri.io", "- nvidia.com/gpu=all\n"),
        ("mounts.noderesource.dev/container.x", "- {source: /run/containerd/containerd.sock, destination: /c}\n"),
        ("mounts.nri.io/pod", "- {source: /dev/null, destination: /var/run/nvidia-container-devicesall}\n"),
        # Own attack: the injector takes major:minor from the entry; the path is cosmetic.
        ("devices.noderesource.dev/container.x", "- {path: /dev/x0, type: c, major: 195, minor: 0}\n"),
    ],
)
def test_every_nri_injector_entry_is_denied(key: str, value: str) -> None:
    p = pod(container("x", gpu=1))
    p["metadata"]["annotations"] = {key: value}
    (v,) = run(p, rule=ID)
    assert "NRI device injector" in v.detail and "exempt" in v.fix


def test_empty_nri_device_lists_are_fine() -> None:
    p = pod(container("x"))
    p["metadata"]["annotations"] = {"devices.noderesource.dev/container.x": ""}
    assert run(p, rule=ID) == []


@pytest.mark.parametrize("key", ["devices.crio.io", "io.kubernetes.cri-o.Devices"])
def test_crio_devices_beyond_its_defaults_are_denied(key: str) -> None:
    """Own attack: CRI-O's default runtime handler allows its device annotation."""
    p = pod(container("build"))
    p["metadata"]["annotations"] = {key: "/dev/fuse,/dev/net/tun:/dev/net/tun:rwm"}
    assert run(p, rule=ID) == []  # rootless builds: CRI-O's own defaults
    p["metadata"]["annotations"] = {key: "/dev/fuse,/dev/nvidia0:/dev/nvidia0:rwm"}
    (v,) = run(p, rule=ID)
    assert "/dev/nvidia0" in v.detail


def test_hami_handshake_is_forged_on_a_pod_create() -> None:
    """Own attack: HAMi's device plugin serves the first pending pod whose annotations name GPUs."""
    p = pod(container("x", gpu=1))
    p["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "gpu-node-1",
        "hami.io/bind-phase": "allocating",
        "hami.io/vgpu-devices-to-allocate": "GPU-victim,NVIDIA,81920,100:;",
    }
    assert len(run(p, rule=ID)) == 3
    assert run(wrap(p, "Deployment"), rule=ID) == []  # a template is no pod: its pods are judged


def test_naming_gpus_of_a_larger_node_is_denied_with_the_cluster_view() -> None:
    """Attack 11: two names for the two GPUs held, on an 8-GPU node: which two is decided later."""
    from tests.helpers import default_policy
    from webhook.policy.nodes import view_of_nodes

    node = {
        "metadata": {"name": "n1", "labels": {}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}},
    }
    policy = default_policy(cluster=view_of_nodes([node]))
    two = "- path: /dev/nvidia6\n- path: /dev/nvidia7\n"
    (v,) = run(annotated(pod(container("tcpx-daemon"), container("app", gpu=2)), two), policy, rule=ID)
    assert "holds 2 of the 8 GPUs" in v.detail
    assert run(annotated(pod(container("tcpx-daemon"), container("nccl", gpu=8)), EIGHT), policy, rule=ID) == []


@pytest.mark.parametrize(
    "value",
    [
        "- path: /dev//nvidia0\n",
        "- path: /dev/./nvidia0\n",
        '- {path: "/dev/nvidia0"}\n',
        "- path: /dev/../dev/nvidia0\n",
    ],
)
def test_paths_are_normalised_and_yaml_parsed(value: str) -> None:
    (v,) = run(annotated(pod(container("x")), value), rule=ID)
    assert v.value == "/dev/nvidia0"


def test_unparsable_lists_fail_closed() -> None:
    (v,) = run(annotated(pod(container("x")), "path: [/dev/nvidia0"), rule=ID)
    assert "unknown" in v.detail


def test_nri_injector_never_hands_out_gpus_even_to_gpu_pods() -> None:
    p = pod(container("x", gpu=1))
    p["metadata"]["annotations"] = {"devices.noderesource.dev/container.x": "- path: /dev/nvidia0\n"}
    assert len(run(p, rule=ID)) == 1


def test_templates_are_judged_too() -> None:
    d = wrap(pod(container("tcpx-daemon")), "Deployment")
    d["spec"]["template"]["metadata"]["annotations"] = {"devices.gke.io/container.tcpx-daemon": EIGHT}
    (v,) = run(d, rule=ID)
    assert v.path.startswith("spec.template.metadata.annotations")


def test_more_injection_keys_than_it_reads_are_denied_unread() -> None:
    """Issue 33: 53,000 of them took 5.4 s of YAML. Bound: MAX_KEYS (64) read per pod."""
    from webhook.policy.rules.gke_device_annotation import MAX_KEYS

    p = pod(*[container(f"c{i}") for i in range(MAX_KEYS + 1)])
    control = "- path: /dev/nvidiactl\n"
    p["metadata"]["annotations"] = {f"devices.gke.io/container.c{i}": control for i in range(MAX_KEYS)}
    assert run(p, rule=ID) == []
    p["metadata"]["annotations"]["devices.nri.io/container.c64"] = "[]"
    (v,) = run(p, rule=ID)
    assert v.path == "metadata.annotations" and v.detail.startswith("holds 65 device-injection annotations")
