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
    assert "/dev/nvidia0" in v.detail


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
