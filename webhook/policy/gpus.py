"""Which containers get a GPU, and which ones isolation gives NVIDIA_VISIBLE_DEVICES=void.

One place for the question every rule and mutation asks, so a rule never reaches into a
mutation's internals to learn what the mutation will do.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import lru_cache

from .nvidia import VISIBLE_DEVICES
from .objects import Container
from .quantity import QuantityError, parse_quantity
from .types import Policy


def requests_gpu(c: Container) -> bool:
    """A parsed GPU count above 0."""
    return c.gpu is not None and c.gpu > 0


@lru_cache(maxsize=256)
def _is_device_resource(name: str, patterns: tuple[str, ...]) -> bool:
    # Cached: a cluster has a handful of resource names, and fnmatch is not free.
    return any(fnmatchcase(name, p) for p in patterns)


def requests_devices(c: Container, policy: Policy) -> bool:
    """Whether limits or requests ask for any device resource of the GPU model (gpuDeviceResources)
    with a value that is not a clear 0: MIG slices and shared GPUs hand out devices under their own
    names, and the kubelet puts the device plugin's env *before* the pod's, so a void would win."""
    for side in (c.limits, c.requests):
        if not side:
            continue
        for name, value in side.items():
            if isinstance(name, str) and "/" in name and _is_device_resource(name, policy.device_resources):
                try:
                    if parse_quantity(value) == 0:
                        continue
                except QuantityError:
                    pass  # unparsable: validation reports it; never void what may be a GPU
                return True
    return False


def isolated(c: Container, policy: Policy) -> bool:
    """Whether isolate-non-gpu gives (or gave) `c` an explicit NVIDIA_VISIBLE_DEVICES=void.

    Not: containers that request a GPU, or any device resource of the GPU model (MIG, shared);
    containers that set the variable themselves (a
    value granting nothing already isolates; one granting devices is left for validation
    to deny with its message); containers whose GPU request does not parse (validation
    reports it); containers with DRA claims (a DRA driver may hand them devices through CDI).
    """
    if not policy.isolate_non_gpu or VISIBLE_DEVICES in c.watched or requests_gpu(c):
        return False
    if c.gpu is None and c.names_resource(policy.resource_name):
        return False  # a GPU request that does not parse: leave it to validation
    return not c.claims and not requests_devices(c, policy)
