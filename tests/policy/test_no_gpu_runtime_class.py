"""no-gpu-runtime-class: the GPU operator's management runtime classes are for GPU pods."""

from __future__ import annotations

from tests.helpers import container, pod, run, wrap
from webhook.config import default_policy

ID = "no-gpu-runtime-class"


def test_non_gpu_pod_with_the_management_class_is_denied() -> None:
    for name in ("nvidia", "nvidia-legacy", "nvidia-cdi"):
        (v,) = run(pod(container("app"), runtimeClassName=name), rule=ID)
        assert v.path == "spec.runtimeClassName" and v.value == f'"{name}"'
    (v,) = run(wrap(pod(container("app"), runtimeClassName="nvidia"), "Deployment"), rule=ID)
    assert v.path == "spec.template.spec.runtimeClassName"


def test_gpu_pods_keep_the_class_the_platform_gives_them() -> None:
    assert run(pod(container("train", gpu=1), container("sidecar"), runtimeClassName="nvidia"), rule=ID) == []
    mig = {"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.5gb": 1}}}
    assert run(pod(mig, runtimeClassName="nvidia"), rule=ID) == []
    claim = {"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}
    p = pod(claim, runtimeClassName="nvidia", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}])
    assert run(p, rule=ID) == []


def test_other_classes_and_configured_classes() -> None:
    assert run(pod(container(), runtimeClassName="kata-qemu"), rule=ID) == []
    assert run(pod(container(), runtimeClassName="gvisor")) == []
    policy = default_policy(gpu_runtime_classes=frozenset({"gpu-mgmt"}))
    assert [v.rule for v in run(pod(container(), runtimeClassName="gpu-mgmt"), policy, rule=ID)] == [ID]
    assert run(pod(container(), runtimeClassName="nvidia"), policy, rule=ID) == []
