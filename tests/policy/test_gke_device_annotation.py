"""gke-device-annotation: GKE's NRI device annotation gives no more GPUs than the pod holds."""

from __future__ import annotations

from typing import Any

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
    p["metadata"]["annotations"] = {"devices.gke.io/other": "- path: /dev/nvidia0\n"}
    assert run(p, rule=ID) == []


def test_templates_are_judged_too() -> None:
    d = wrap(pod(container("tcpx-daemon")), "Deployment")
    d["spec"]["template"]["metadata"]["annotations"] = {"devices.gke.io/container.tcpx-daemon": EIGHT}
    (v,) = run(d, rule=ID)
    assert v.path.startswith("spec.template.metadata.annotations")
