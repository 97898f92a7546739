"""Which containers get a GPU, and which ones isolation gives NVIDIA_VISIBLE_DEVICES=void.

One place for the question every rule and mutation asks, so a rule never reaches into a
mutation's internals to learn what the mutation will do.
"""

from __future__ import annotations

from .nvidia import VISIBLE_DEVICES
from .objects import Container
from .types import Policy


def requests_gpu(c: Container) -> bool:
    """A parsed GPU count above 0."""
    return c.gpu is not None and c.gpu > 0


def isolated(c: Container, policy: Policy) -> bool:
    """Whether isolate-non-gpu gives (or gave) `c` an explicit NVIDIA_VISIBLE_DEVICES=void.

    Not: containers that request a GPU; containers that set the variable themselves (a
    value granting nothing already isolates; one granting devices is left for validation
    to deny with its message); containers whose GPU request does not parse (validation
    reports it); containers with DRA claims (a DRA driver may hand them devices through CDI).
    """
    if not policy.isolate_non_gpu or VISIBLE_DEVICES in c.watched or requests_gpu(c):
        return False
    if c.gpu is None and c.names_resource(policy.resource_name):
        return False  # a GPU request that does not parse: leave it to validation
    return not c.claims
