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

from typing import Final

from .. import cel
from ..cel import Check, lit
from ..gpus import gets_gpu
from ..objects import PodView
from ..rule import GPU_POD, NativeRule, Rule
from ..types import Mode, Policy, Violation

ID = "gpu-job-deadline"


# The sentence's pieces, shared by the rule and its twin.
DETAIL: Final = ("is not set: a ", " whose pod hangs holds its GPUs until someone deletes it")
FIX: Final = (
    "set activeDeadlineSeconds to the longest the job may run (e.g. 86400 for a day); the Job is then failed and "
    "its GPUs freed"
)


def check(view: PodView, policy: Policy) -> list[Violation]:
    if not view.job_path or view.job_deadline or not gets_gpu(view, policy):
        return []
    return [
        Violation(
            rule=ID,
            path=f"{view.job_path}.activeDeadlineSeconds",
            detail=view.kind.join(DETAIL),
            fix=FIX,
            scope="job",
        )
    ]


# ---- The CEL twin (a ValidatingAdmissionPolicy on the templates that sit in a JobSpec: Jobs in
# the spec.template policy, CronJobs in theirs; JobSet's replicated Jobs are a custom resource the
# workloads webhook keeps): PodView.job_deadline as build_view reads it (the JobSpec's or the pod
# spec's activeDeadlineSeconds), gpus.gets_gpu without the cluster view (any DRA claim may be a
# GPU: stricter, never looser). The Job's kind is the object's own (a CronJob's message says CronJob).
NATIVE: Final = NativeRule(
    (("getsGpu", cel.GETS_GPU), ("nodeAgent", cel.NODE_AGENT)),
    (
        Check(
            "!(@inJob@) || has(@jobSpec@.activeDeadlineSeconds) || has(object.spec.activeDeadlineSeconds) "
            "|| !variables.getsGpu",
            f"@prefix@ + {lit(ID + ' (job: ')} + '@jobPath@.activeDeadlineSeconds ' + {lit(DETAIL[0])} + "
            f"object.kind + {lit(DETAIL[1])} + '; fix: ' + {cel.agent_lead()} + {lit(FIX)} + ')'",
        ),
    ),
    roots=tuple(root.name for root in cel.ROOTS if root.job_cel),
)


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
    native=NATIVE,
    webhook_only="",
)
