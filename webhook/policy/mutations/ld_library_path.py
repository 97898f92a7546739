"""ld-library-path: on clusters below v1.28, GPU containers find the driver on LD_LIBRARY_PATH.

Before v1.28 the managed cloud's GPU add-on mounts the driver at /usr/local/nvidia/lib64
and relies on the container's LD_LIBRARY_PATH to find it. For every container that
requests a GPU:
  - no LD_LIBRARY_PATH in the spec: add LD_LIBRARY_PATH=<dir> (or only warn, with
    ldLibraryPath.whenUnset=warn), and warn that a pod-spec value replaces the image's;
  - a literal value without <dir>: append ":<dir>" to the entry the runtime uses (the last);
  - a valueFrom value: left alone (we cannot see it), with a warning.
Idempotent: a value that already lists <dir> is never touched again.
"""

from __future__ import annotations

from ..gpus import requests_gpu
from ..objects import PodView
from ..patch import Op, append_env, replace
from ..rule import GPU_REQUEST, Mutation
from ..types import NO_CHANGES, Changes, ContainerKind, Policy

ID = "ld-library-path"
NAME = "LD_LIBRARY_PATH"
CUTOFF = (1, 28)


def applies(policy: Policy) -> bool:
    return policy.ld_library_path_enabled and policy.cluster_version is not None and policy.cluster_version < CUTOFF


def mutate(view: PodView, policy: Policy) -> Changes:
    if not applies(policy):
        return NO_CHANGES
    ops: list[Op] = []
    warnings: list[str] = []
    directory = version = ""
    for c in view.containers:
        if c.kind is ContainerKind.EPHEMERAL or not requests_gpu(c):
            continue
        if not version:  # a GPU container: only now are the texts worth building
            directory = policy.ld_library_path.rstrip("/") or "/"
            major, minor = policy.cluster_version or (0, 0)
            version = f"v{major}.{minor}"
        entries = c.env(NAME)
        where = f'container "{c.name}"'
        if not entries:
            if policy.ld_library_path_when_unset != "inject":
                warnings.append(
                    f"{ID}: {where} requests a GPU on {version} but does not set {NAME}; "
                    f"make sure the image's {NAME} includes {directory}"
                )
                continue
            ops.append(append_env(c.pointer, c.has_env, {"name": NAME, "value": directory}))
            warnings.append(
                f"{ID}: injected {NAME}={directory} into {where} ({version} mounts the GPU driver there); "
                f"a pod-spec {NAME} replaces any value baked into the image"
            )
            continue
        entry = entries[-1]  # the last duplicate is the one the runtime uses
        if entry.value_from:
            warnings.append(f"{ID}: {where} sets {NAME} through valueFrom; make sure it includes {directory}")
            continue
        value = entry.value
        if directory in (part.rstrip("/") or "/" for part in value.split(":")):
            continue
        new_value = f"{value}:{directory}" if value else directory
        ops.append(replace(f"{c.pointer}/env/{entry.index}/value", new_value))
        warnings.append(f"{ID}: appended {directory} to {NAME} of {where} ({version} mounts the GPU driver there)")
    return Changes(ops, warnings) if ops or warnings else NO_CHANGES


MUTATION: Mutation = Mutation(
    id=ID,
    mutate=mutate,
    summary="On clusters below v1.28 (config `clusterVersion`), each container requesting a GPU finds the driver "
    "at `/usr/local/nvidia/lib64`: no `LD_LIBRARY_PATH` -> one is added (`ldLibraryPath.whenUnset: warn` only "
    "warns instead, because a pod-spec value replaces whatever the image set); a literal value without the "
    "directory -> `:/usr/local/nvidia/lib64` is appended to the entry the runtime uses (the last); a "
    "`valueFrom` value -> left alone, with a warning. Unknown cluster version -> skipped.",
    reads=("containers[*].env", "containers[*].resources"),
    triggers=GPU_REQUEST,
    switch="ldLibraryPath.enabled",
    enabled=applies,
    webhook_only="it acts only below Kubernetes 1.28, and MutatingAdmissionPolicy exists from 1.32 (GA in 1.36)",
)
