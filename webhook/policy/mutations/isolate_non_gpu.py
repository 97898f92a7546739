"""isolate-non-gpu: containers that request no GPU get NVIDIA_VISIBLE_DEVICES=void.

CUDA and NGC images bake NVIDIA_VISIBLE_DEVICES=all into their image config, and the
NVIDIA runtime honours it in unprivileged containers by default: a container that requested
no GPU sees every GPU on the node. A pod-spec env entry overrides the image's, and `void`
makes the runtime inject nothing. It also closes the legacy path where CUDA_VERSION without
NVIDIA_REQUIRE_CUDA defaults to all GPUs.

Left as they are, on purpose:
  - containers that request a GPU (the device plugin sets their devices);
  - containers that set NVIDIA_VISIBLE_DEVICES themselves: to a value granting nothing, it
    already isolates; to a value granting devices, rewriting it would hide the mistake that
    no-visible-devices-env must deny with its message (mutation runs before validation);
  - containers whose GPU request does not parse (validation reports it);
  - containers with DRA resource claims (a DRA driver may hand them devices through CDI).
Runs on Pod CREATE and, for the ephemeral containers a `kubectl debug` adds, on the
pods/ephemeralcontainers subresource. No warning: it applies to nearly every pod, and a
warning on every `kubectl apply` would train people to ignore warnings.
"""

from __future__ import annotations

from collections.abc import Collection

from ..nvidia import VISIBLE_DEVICES
from ..objects import Container, PodView
from ..patch import Op, append_env
from ..types import Mutation, Policy, always

ID = "isolate-non-gpu"
VOID = {"name": VISIBLE_DEVICES, "value": "void"}


def will_isolate(c: Container, policy: Policy) -> bool:
    """Whether this mutation gives (or gave) `c` an explicit NVIDIA_VISIBLE_DEVICES=void."""
    if not policy.isolate_non_gpu or VISIBLE_DEVICES in c.watched:
        return False
    if c.gpu is not None and c.gpu > 0:
        return False
    resource = policy.resource_name
    if c.gpu is None and any(side is not None and resource in side for side in (c.limits, c.requests)):
        return False  # a GPU request that does not parse: leave it to validation
    resources = c.raw.get("resources")
    return not (isinstance(resources, dict) and resources.get("claims"))


def _ops(view: PodView, policy: Policy, skip: Collection[str] = (), only_ephemeral: bool = False) -> list[Op]:
    return [
        append_env(c.pointer, c.env is not None, dict(VOID))
        for c in view.containers
        if (not only_ephemeral or (c.kind == "ephemeralContainers" and c.name not in skip)) and will_isolate(c, policy)
    ]


def mutate(view: PodView, policy: Policy) -> tuple[list[Op], list[str]]:
    return _ops(view, policy), []


def mutate_new_ephemeral(view: PodView, policy: Policy, existing: Collection[str]) -> list[Op]:
    """Only ephemeral containers not in `existing`: everything else in a running pod is immutable."""
    return _ops(view, policy, existing, only_ephemeral=True)


MUTATION = Mutation(id=ID, mutate=mutate, triggers=always)
