"""no-cdi-annotations: CDI device injection through annotations."""

from __future__ import annotations

from tests.helpers import container, pod, run, wrap

CDI = "no-cdi-annotations"


def test_cdi_annotations_on_pods_and_templates() -> None:
    p = pod(container())
    p["metadata"]["annotations"] = {
        "nvidia.cdi.k8s.io/container.main": "nvidia.com/gpu=all",
        "cdi.k8s.io/vendor": "x",
        "prometheus.io/scrape": "true",
    }
    assert [v.path for v in run(p, rule=CDI)] == [
        'metadata.annotations["nvidia.cdi.k8s.io/container.main"]',
        'metadata.annotations["cdi.k8s.io/vendor"]',
    ]
    d = wrap(pod(container()), "Deployment")
    d["spec"]["template"]["metadata"]["annotations"] = {"nvidia.cdi.k8s.io/container.c": "nvidia.com/gpu=0"}
    (v,) = run(d, rule=CDI)
    assert v.path == 'spec.template.metadata.annotations["nvidia.cdi.k8s.io/container.c"]'
    assert v.describe().startswith("no-cdi-annotations (pod: spec.template.metadata.annotations")


def test_nvidias_kata_passthrough_pod_is_allowed() -> None:
    """Issue 32 #12: NVIDIA's GPU operator docs, Kata GPU pass-through."""
    kata = pod(
        container("cuda-vectoradd", resources={"limits": {"nvidia.com/pgpu": 1}}),
        runtimeClassName="kata-qemu-nvidia-gpu",
    )
    kata["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/pgpu=0"}
    assert run(kata, rule="no-cdi-annotations") == []
    kata["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/pgpu=0,nvidia.com/pgpu=1"}
    assert len(run(kata, rule="no-cdi-annotations")) == 1  # more than it holds
    kata["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}
    assert len(run(kata, rule="no-cdi-annotations")) == 1
    kata["metadata"]["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/pgpu=0"}
    kata["spec"]["runtimeClassName"] = "runc"
    assert len(run(kata, rule="no-cdi-annotations")) == 1
