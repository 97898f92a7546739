"""The AdmissionReview wire format: the only module that knows its field names.

Requests are read field by field from the parsed JSON (no client models); responses are
built by the small constructors at the bottom (allowed / denied / errored), the shape of
controller-runtime's response helpers. It knows nothing of decisions: webhook.admission.decide
builds on it (and turns an Outcome into a response with these constructors).
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
SUPPORTED_VERSIONS = (V1, V1BETA1)
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})

try:  # orjson is an optional speed-up; its output is byte-for-byte valid JSON too.
    from orjson import dumps as _fast_dumps
    from orjson import loads as _fast_loads

    FAST_JSON = True
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    FAST_JSON = False


def dumps(value: Any) -> bytes:
    if FAST_JSON:
        return _fast_dumps(value)
    return json.dumps(value, separators=(",", ":")).encode()


def loads(data: bytes | str) -> Any:
    if FAST_JSON:
        return _fast_loads(data)
    return json.loads(data)


class ReviewError(ValueError):
    """The review itself is unusable (not the object in it): answered with HTTP 4xx."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True, init=False)
class Request:
    """What a review asks, read from its envelope. Never changed once built; an explicit __init__
    (not frozen) because mypyc compiles it to C (see webhook.policy.containers.Container)."""

    api_version: str
    uid: str
    group: str
    kind: str
    operation: str
    sub_resource: str
    namespace: str
    name: str
    object: Any
    old_object: Any
    user: str  # request.userInfo.username (exemptUsernames)
    dry_run: bool

    def __init__(
        self,
        api_version: str,
        uid: str,
        group: str,
        kind: str,
        operation: str,
        sub_resource: str,
        namespace: str,
        name: str,
        object: Any,
        old_object: Any,
        user: str = "",
        dry_run: bool = False,
    ) -> None:
        self.api_version = api_version
        self.uid = uid
        self.group = group
        self.kind = kind
        self.operation = operation
        self.sub_resource = sub_resource
        self.namespace = namespace
        self.name = name
        self.object = object
        self.old_object = old_object
        self.user = user
        self.dry_run = dry_run

    def with_object(self, obj: Any) -> Request:
        """The same request for another object (the pod as a mutating stage left it)."""
        return Request(
            self.api_version, self.uid, self.group, self.kind, self.operation, self.sub_resource,
            self.namespace, self.name, obj, self.old_object, self.user, self.dry_run,
        )  # fmt: skip


def _text(request: dict[str, Any], key: str, *, required: bool = False) -> str:
    """A string field of the request ("" when absent or null, unless required)."""
    value = request.get(key)
    if type(value) is str:  # the common case first: one exact type check
        return value
    if value is None:
        if required:
            raise ReviewError(f"request.{key} is required")
        return ""
    raise ReviewError(f"request.{key} must be a str, got {type(value).__name__}")


def parse(body: Any) -> Request:
    """Check the envelope of a decoded AdmissionReview and pull out what we use.

    Decoded JSON is plain dicts, lists and strings: exact type checks, not the Mapping ABC (whose
    isinstance goes through abc's machinery), and no more lookups than fields."""
    if not isinstance(body, dict):
        raise ReviewError(f"body must be a JSON object (an AdmissionReview), got {type(body).__name__}")
    api_version = body.get("apiVersion")
    if api_version not in SUPPORTED_VERSIONS:
        raise ReviewError(f"apiVersion must be one of {', '.join(SUPPORTED_VERSIONS)}, got {api_version!r}")
    if body.get("kind") != "AdmissionReview":
        raise ReviewError(f"kind must be AdmissionReview, got {body.get('kind')!r}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request is required and must be an object")
    uid = _text(request, "uid", required=True)
    if not uid:
        raise ReviewError("request.uid must not be empty")
    kind = request.get("kind")
    if kind is None:
        raise ReviewError("request.kind is required")
    if not isinstance(kind, dict):
        raise ReviewError(f"request.kind must be a dict, got {type(kind).__name__}")
    group, kind_name = kind.get("group", ""), kind.get("kind")
    if not isinstance(group, str) or not isinstance(kind_name, str) or not kind_name:
        raise ReviewError("request.kind must have a string group and a non-empty kind")
    operation = _text(request, "operation", required=True)
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation must be one of {', '.join(sorted(OPERATIONS))}, got {operation!r}")
    obj = request.get("object")
    if operation in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise ReviewError(f"request.object must be an object for {operation}")
    return Request(
        api_version,
        uid,
        group,
        kind_name,
        operation,
        _text(request, "subResource"),
        _text(request, "namespace"),
        _text(request, "name"),
        obj,
        request.get("oldObject"),
        _username(request.get("userInfo")),
        request.get("dryRun") is True,
    )


def _username(info: Any) -> str:
    if info is None:
        return ""
    name = info.get("username", "") if isinstance(info, dict) else None
    if not isinstance(name, str):
        raise ReviewError("request.userInfo must be an object with a string username")
    return name


# The API server may drop warnings past about 4 KiB in all (and cut single ones past 256
# characters, which the policy already respects): keep whole warnings within the budget and
# say how many were left out, rather than let them be cut blindly.
WARNINGS_BUDGET = 4000


def cap_warnings(warnings: Sequence[str]) -> list[str]:
    if sum(map(len, warnings)) <= WARNINGS_BUDGET:
        return list(warnings)  # nearly always: a few warnings of at most 256 characters
    kept: list[str] = []
    used = 0
    for i, w in enumerate(warnings):
        rest = len(warnings) - i
        tail = 80 if rest > 1 else 0  # room for the summary line
        if used + len(w) + tail > WARNINGS_BUDGET:
            kept.append(f"gpu-policy: {rest} more warning(s) not shown; run `gpu-policy check` on the manifest")
            break
        kept.append(w)
        used += len(w)
    return kept


def _review(api_version: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}


def allowed(
    req: Request,
    *,
    warnings: Sequence[str] = (),
    audit: Mapping[str, str] | None = None,
    patch: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": req.uid, "allowed": True}
    if patch:
        # Only a non-empty patch is sent: an empty JSONPatch still makes the API server
        # re-decode and re-default the object for nothing.
        response["patchType"] = "JSONPatch"
        response["patch"] = binascii.b2a_base64(dumps(list(patch)), newline=False).decode("ascii")
    if warnings:
        response["warnings"] = cap_warnings(warnings)
    if audit:
        response["auditAnnotations"] = dict(audit)
    return _review(req.api_version, response)


def denied(
    req: Request,
    message: str,
    *,
    code: int = 403,
    warnings: Sequence[str] = (),
    audit: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    reason = "Forbidden" if code == 403 else "BadRequest" if code == 400 else "InternalError"
    response: dict[str, Any] = {
        "uid": req.uid,
        "allowed": False,
        "status": {"code": code, "reason": reason, "message": message},
    }
    if warnings:
        response["warnings"] = cap_warnings(warnings)
    if audit:
        response["auditAnnotations"] = dict(audit)
    return _review(req.api_version, response)


def errored(api_version: str, uid: str, message: str) -> dict[str, Any]:
    """An internal failure: never an allow, and the uid is still echoed so the API server can match it."""
    return _review(
        api_version,
        {"uid": uid, "allowed": False, "status": {"code": 500, "reason": "InternalError", "message": message}},
    )
