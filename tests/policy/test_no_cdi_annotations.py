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
