"""gpu-job-deadline (off by default; warn is the mode to turn it on in): a Job that gets a GPU
sets activeDeadlineSeconds.

Looked at: the pod templates of Jobs, CronJobs' job templates and JobSets' replicated Jobs (the
templates that sit in a JobSpec) with any GPU source the model knows. Satisfied by
activeDeadlineSeconds on the JobSpec (the whole Job, retries included) or on the pod template's
spec (each pod).

Why: gpu-controller-owned makes GPU pods belong to a Job, but a Job whose pod hangs (a deadlocked
collective, a notebook kernel left running in a batch pod) holds its GPUs as long as a bare pod
would. A deadline is what makes "a Job ends" true; kyverno#13879 asks for both. A warning by
default when on: a missing deadline is a habit to change, not an error in the manifest.
"""

from __future__ import annotations

from ..gpus import gets_gpu
from ..objects import PodView
from ..rule import GPU_POD, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-job-deadline"


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not view.job_path or view.job_deadline or not gets_gpu(view, policy):
        return []
    return [
        Violation(
            rule=ID,
            path=f"{view.job_path}.activeDeadlineSeconds",
            detail=f"is not set: a {view.kind} whose pod hangs holds its GPUs until someone deletes it",
            fix="set activeDeadlineSeconds to the longest the job may run (e.g. 86400 for a day); the Job is "
            "then failed and its GPUs freed",
            scope="job",
        )
    ]


RULE: Rule = Rule(
    id=ID,
    check=check,
    summary="A Job, CronJob or JobSet job whose pods get a GPU sets `activeDeadlineSeconds` (on the job or its pod "
    "template), so a hung job frees its GPUs (off by default; turn it on as warn).",
    why="A Job only ends if its pods do: one hung collective holds its GPUs as long as a bare pod would.",
    reads=("activeDeadlineSeconds", "containers[*].resources", "resourceClaims"),
    triggers=GPU_POD,
    example={
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "finetune"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                }
            }
        },
    },
    default_mode=Mode.OFF,
)
