"""The admission protocol: the AdmissionReview wire format and the decisions made on it.

`review` reads requests and builds responses (the only module that knows the wire format's field
names); `decide` judges a parsed request with the policy core into a structured Outcome and turns
it into a response. Both are compiled with the core (webhook._build). This package re-exports the
decisions, so callers say `admission.validate(req, policy)`.
"""

from __future__ import annotations

from .decide import (
    EPHEMERAL,
    SKIP_DELETING,
    SKIP_KIND,
    SKIP_NAMESPACE,
    SKIP_NOT_MUTATED,
    SKIP_OPERATION,
    SKIP_SUBRESOURCE,
    SKIP_USER,
    UNPOLICED_GPU,
    Decision,
    Outcome,
    mutate,
    respond,
    validate,
)

__all__ = [
    "EPHEMERAL",
    "SKIP_DELETING",
    "SKIP_KIND",
    "SKIP_NAMESPACE",
    "SKIP_NOT_MUTATED",
    "SKIP_OPERATION",
    "SKIP_SUBRESOURCE",
    "SKIP_USER",
    "UNPOLICED_GPU",
    "Decision",
    "Outcome",
    "mutate",
    "respond",
    "validate",
]
