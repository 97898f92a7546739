"""One review in, one answer out: what /validate and /mutate run between the transport and the policy.

Content type, JSON, the envelope (webhook.admission.review), the decision (webhook.admission.decide), the answer's
bytes, the metrics and the review log line. Everything that can go wrong maps to a clear answer: a
broken envelope is an HTTP 4xx with a JSON error; a failure inside the policy is `allowed: false`,
code 500, with the uid echoed; nothing escapes to kill the process.

Compiled with mypyc like the transport and the protocol layer (webhook/_build.py): it runs once per
review, and interpreted it cost about as much as the policy's cheapest ten rules together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from ..admission import decide, review
from ..admission.review import ReviewError
from ..policy import Policy
from . import logs

if TYPE_CHECKING:
    from .metrics import Metrics
    from .reload import Active

log = logging.getLogger("gpu-policy.server")
# One line per review that changed something or said something (denied, patched, warned) at info,
# every other review at debug; never the object itself (it may hold secrets in env values).
_NOTEWORTHY: Final = frozenset({decide.Decision.DENIED, decide.Decision.PATCHED, decide.Decision.MALFORMED})

Decide = Callable[[review.Request, Policy], decide.Outcome]

# An answer: status, Content-Type, body, and whether to close the connection after it.
Answer = tuple[int, str, bytes, bool]
# A route's handler (what webhook.serve.transport calls): (Content-Type media type, lowercased without
# parameters, "application/octet-stream" when absent; body) -> Answer.
Handler = Callable[[str, bytes], Answer]
JSON: Final = "application/json"
TEXT: Final = "text/plain; charset=utf-8"


class Cell:
    """The active policy: one attribute, replaced whole by a reload, read once per request."""

    def __init__(self, active: Active) -> None:
        self.active = active


class Readiness(Protocol):
    """Whether the server is ready; when not (draining), every answer closes its connection."""

    ready: bool


def error(status: int, message: str) -> Answer:
    return status, JSON, review.dumps({"error": message}), False


class ReviewHandler:
    """The handler of one review route (a Handler): `name` is the webhook
    ("validate", "mutate") as metrics and logs name it, `decide` its admission function."""

    def __init__(self, name: str, decide: Decide, cell: Cell, metrics: Metrics, server: Readiness) -> None:
        self.name = name
        self.decide = decide
        self.cell = cell
        self.metrics = metrics
        self.server = server

    def __call__(self, content_type: str, body: bytes) -> Answer:
        if content_type != "application/json":
            return error(415, f"Content-Type must be application/json, got {content_type!r}")
        started = time.perf_counter()
        if not body:
            return error(400, "empty body: expected an AdmissionReview")
        try:
            data = review.loads(body)
        except ValueError as exc:
            return error(400, f"body is not valid JSON: {exc}")
        try:
            req = review.parse(data)
        except ReviewError as exc:
            return error(exc.status, str(exc))
        name = self.name
        policy = self.cell.active.policy  # read once: a reload swaps it between requests, never within one
        try:
            outcome = self.decide(req, policy)
            payload = review.dumps(decide.respond(req, outcome))
        except Exception as exc:  # a bug must cost one request, never the server or an accidental allow
            log.exception("internal error on %s uid=%s", name, req.uid)
            payload = review.dumps(review.errored(req.api_version, req.uid, f"gpu-policy internal error: {exc}"))
            self.metrics.observe(name, "error", time.perf_counter() - started, [])
        else:
            seconds = time.perf_counter() - started
            found = outcome.counted()
            self.metrics.observe(name, outcome.decision, seconds, found, req.namespace)
            # The fields are built only for a line that is written (the level is checked first).
            level = logging.INFO if outcome.decision in _NOTEWORTHY or outcome.warnings else logging.DEBUG
            if logs.REVIEW.isEnabledFor(level):
                _log_review(level, name, req, outcome, found, seconds)
        # Draining: answer, but close the connection, so the API server's next review opens
        # a new one (to a replica that is staying) instead of reusing ours as we stop.
        return 200, JSON, payload, not self.server.ready


# A value from the request in a log line: at most this many characters (a Kubernetes name is at most
# 253), the rest counted, never the 7 MiB a client may send as its uid.
LOG_VALUE_CHARS = 256


def loggable(value: str) -> str:
    """A request's value as a log line may carry it: cut to LOG_VALUE_CHARS and with every
    unprintable character escaped, so a newline in `request.name` cannot forge a text-format line."""
    cut = value if len(value) <= LOG_VALUE_CHARS else value[:LOG_VALUE_CHARS]
    if not cut.isprintable():
        cut = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in cut)
    if len(value) > LOG_VALUE_CHARS:
        cut += f"…(+{len(value) - LOG_VALUE_CHARS} chars)"
    return cut


def _log_review(
    level: int,
    webhook: str,
    req: review.Request,
    outcome: decide.Outcome,
    found: list[tuple[str, str]],
    seconds: float,
) -> None:
    kind, namespace, name = loggable(req.kind), loggable(req.namespace), loggable(req.name)
    operation = loggable(req.operation)
    logs.review(
        level,
        f"{webhook} {operation} {kind} {namespace}/{loggable(display_name(req))}: {outcome.decision.value}",
        {
            "uid": loggable(req.uid),
            "webhook": webhook,
            "decision": outcome.decision.value,
            "kind": kind,
            "namespace": namespace,
            "objectName": name,
            "operation": operation,
            "user": loggable(req.user),
            "dryRun": req.dry_run,
            "rules": sorted({rule for rule, _mode in found}),
            "modes": sorted({mode for _rule, mode in found}),
            "patched": len(outcome.ops),
            "latencyMs": round(seconds * 1000, 3),
        },
    )


def display_name(req: review.Request) -> str:
    """The object's name, or `generateName…` for one not named yet: every pod a controller
    creates arrives with an empty name and a generateName such as "train-7d9f8b6c4-"."""
    if req.name:
        return req.name
    obj = req.object
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    prefix = meta.get("generateName") if isinstance(meta, dict) else None
    return f"{prefix}…" if isinstance(prefix, str) and prefix else ""
