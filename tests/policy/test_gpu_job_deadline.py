"""gpu-job-deadline: a Job (CronJob, JobSet job) that gets a GPU sets activeDeadlineSeconds."""

from __future__ import annotations

import copy
from typing import Any

from tests.helpers import container, pod, run, wrap
from webhook.config import default_policy
from webhook.policy import Mode

ID = "gpu-job-deadline"
ON = default_policy(modes={ID: Mode.WARN})


def jobset(p: dict[str, Any]) -> dict[str, Any]:
    """JobSet's own example (jobset.x-k8s.io): replicated Jobs, each a JobSpec around a template."""
    template = {"spec": copy.deepcopy(p["spec"]) | {"restartPolicy": "Never"}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pytorch", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 1, "template": {"spec": {"parallelism": 2, "template": template}}}
            ]
        },
    }


def test_off_by_default() -> None:
    assert default_policy().mode(ID) is Mode.OFF
    assert run(wrap(pod(container("t", gpu=1)), "Job")) == []


def test_a_gpu_job_without_a_deadline() -> None:
    (v,) = run(wrap(pod(container("train", gpu=1)), "Job"), ON, rule=ID)
    assert v.path == "spec.activeDeadlineSeconds"
    assert "is not set: a Job whose pod hangs holds its GPUs" in v.detail and "activeDeadlineSeconds" in v.fix
    (v,) = run(wrap(pod(container("train", gpu=1)), "CronJob"), ON, rule=ID)
    assert v.path == "spec.jobTemplate.spec.activeDeadlineSeconds"
    (v,) = run(jobset(pod(container("train", gpu=8))), ON, rule=ID)
    assert v.path == "spec.replicatedJobs[0].template.spec.activeDeadlineSeconds" and "a JobSet" in v.detail


def test_a_deadline_on_the_job_or_on_its_pods_is_enough() -> None:
    job = wrap(pod(container("train", gpu=1)), "Job")
    job["spec"]["activeDeadlineSeconds"] = 86400
    assert run(job, ON, rule=ID) == []
    job = wrap(pod(container("train", gpu=1), activeDeadlineSeconds=3600), "Job")
    assert run(job, ON, rule=ID) == []


def test_only_gpu_jobs_and_only_jobs() -> None:
    assert run(wrap(pod(container("etl")), "Job"), ON, rule=ID) == []
    for kind in ("Deployment", "StatefulSet", "Pod"):  # services and pods end some other way (or not at all)
        assert run(wrap(pod(container("serve", gpu=1)), kind), ON, rule=ID) == []
