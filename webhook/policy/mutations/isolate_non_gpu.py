"""isolate-non-gpu: containers that request no GPU get NVIDIA_VISIBLE_DEVICES=void.

CUDA and NGC images bake NVIDIA_VISIBLE_DEVICES=all into their image config, and the
NVIDIA runtime honours it in unprivileged containers by default: a container that requested
no GPU sees every GPU on the node. A pod-spec env entry overrides the image's, and `void`
makes the runtime inject nothing. It also closes the legacy path where CUDA_VERSION without
NVIDIA_REQUIRE_CUDA defaults to all GPUs. Which containers it leaves alone, and why, is
`gpus.isolated`. Runs on Pod CREATE and, for the ephemeral containers a `kubectl debug`
adds, on the pods/ephemeralcontainers subresource. No warning: it applies to nearly every
pod, and a warning on every `kubectl apply` would train people to ignore warnings.
"""

from __future__ import annotations

from collections.abc import Collection

from ..gpus import isolated
from ..nvidia import VISIBLE_DEVICES
from ..objects import PodView
from ..patch import Op, append_env
from ..rule import EVERY_POD, Mutation
from ..types import NO_CHANGES, Changes, ContainerKind, Policy

ID = "isolate-non-gpu"
VOID = {"name": VISIBLE_DEVICES, "value": "void"}


def enabled(policy: Policy) -> bool:
    return policy.isolate_non_gpu


def _ops(view: PodView, policy: Policy, skip: Collection[str] = (), only_ephemeral: bool = False) -> list[Op]:
    return [
        append_env(c.pointer, c.has_env, dict(VOID))
        for c in view.containers
        if (not only_ephemeral or (c.kind is ContainerKind.EPHEMERAL and c.name not in skip))
        and isolated(c, view, policy)
    ]


def mutate(view: PodView, policy: Policy) -> Changes:
    ops = _ops(view, policy)
    return Changes(ops, []) if ops else NO_CHANGES


def mutate_new_ephemeral(view: PodView, policy: Policy, existing: Collection[str]) -> Changes:
    """Only ephemeral containers not in `existing`: everything else in a running pod is immutable."""
    return Changes(_ops(view, policy, existing, only_ephemeral=True), [])


MUTATION: Mutation = Mutation(
    id=ID,
    mutate=mutate,
    summary="Every container (init, regular, ephemeral) that gets no GPU by any path of the GPU model and does not set "
    "`NVIDIA_VISIBLE_DEVICES` itself gets `NVIDIA_VISIBLE_DEVICES=void` appended (`env` created when absent). "
    "CUDA and NGC images bake `NVIDIA_VISIBLE_DEVICES=all` into the image and the NVIDIA runtime honours it in "
    "unprivileged containers, so without this a pod without a GPU request sees every GPU; it also closes the "
    "legacy `CUDA_VERSION` path and `nvidia.com/gpu: 0`. Left alone: containers with a device resource (MIG "
    "and shared slots included), a companion resource, a DRA claim or a KAI fraction (the kubelet puts pod env "
    "after the device plugin's, so a void would hide their GPU); containers that set the variable (a value "
    "granting devices is *not* rewritten, so `no-visible-devices-env` can deny it with its message); requests "
    "that do not parse; pods of exempt service accounts. On "
    "`pods/ephemeralcontainers` only newly added ephemeral containers are patched. No warning (it applies to "
    "nearly every pod). The opt-out annotation never turns it off.",
    reads=("containers[*].env", "containers[*].resources", "schedulerName", "metadata.annotations"),
    triggers=EVERY_POD,
    switch="isolateNonGpu",
    enabled=enabled,
    opt_out=False,
)
