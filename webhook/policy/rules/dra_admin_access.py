"""dra-admin-access (warn by default): a DRA claim that asks for admin access to devices.

Restricted fields (ResourceClaim: spec.devices.requests[*]; ResourceClaimTemplate: the same under
spec.spec): `adminAccess: true`, in either API shape (resource.k8s.io/v1 puts it under `exactly`,
v1beta1 on the request itself), in namespaces not listed in draAdminAccessNamespaces.

Why: a claim with admin access is given devices *already in use by other pods* (KEP-5018; GA in
1.36), for monitoring and debugging. The API server asks only that the namespace carry the label
`resource.kubernetes.io/admin-access: "true"`, which whoever may label the namespace can set
(kubernetes#141293). gpu-policy judges the claim where it is made, so no pod can use one unseen:
flagged by default; with `rules: {dra-admin-access: deny}` only the listed namespaces may.
"""

from __future__ import annotations

from typing import Any, Final

from ..cel import Check, lit
from ..rule import NativeRule, ObjectRule, Trigger, Where
from ..shapes import ShapeError, type_name
from ..types import Mode, Policy, Violation

ID = "dra-admin-access"
TEMPLATE: Final = "ResourceClaimTemplate"  # its claim's spec sits under spec.spec
# Where a request asks for admin access: resource.k8s.io/v1 (and v1beta2) under `exactly`, v1beta1 on
# the request itself; looked at in this order.
WHERE: Final = ("exactly.adminAccess", "adminAccess")
DETAIL: Final = (
    "is true: the claim is given devices in use by other pods, GPUs of other jobs included, which the namespace "
    "label alone permits"
)
FIX: Final = (
    "remove adminAccess, or ask the platform to list the namespace in draAdminAccessNamespaces for its monitoring "
    "agents"
)


def _requests(obj: dict[str, Any]) -> tuple[str, Any]:
    spec = obj.get("spec")
    base = "spec"
    if obj.get("kind") == TEMPLATE:
        spec = spec.get("spec") if isinstance(spec, dict) else None
        base = "spec.spec"
    if spec is None:
        return base, []
    if not isinstance(spec, dict):
        raise ShapeError(base, f"must be an object, got {type_name(spec)}")
    devices = spec.get("devices") or {}
    if not isinstance(devices, dict):
        raise ShapeError(f"{base}.devices", f"must be an object, got {type_name(devices)}")
    requests = devices.get("requests") or []
    if not isinstance(requests, list):
        raise ShapeError(f"{base}.devices.requests", f"must be a list, got {type_name(requests)}")
    return f"{base}.devices.requests", requests


def check(obj: dict[str, Any], policy: Policy) -> list[Violation]:
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    if isinstance(namespace, str) and namespace in policy.dra_admin_namespaces:
        return []
    base, requests = _requests(obj)
    out: list[Violation] = []
    for i, request in enumerate(requests):
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly")
        for where, holder in zip(WHERE, (exactly, request), strict=True):
            if isinstance(holder, dict) and holder.get("adminAccess") is True:
                out.append(
                    Violation(
                        rule=ID,
                        path=f"{base}[{i}].{where}",
                        detail="is true: the claim is given devices in use by other pods, GPUs of other jobs "
                        "included, which the namespace label alone permits",
                        fix="remove adminAccess, or ask the platform to list the namespace in "
                        "draAdminAccessNamespaces for its monitoring agents",
                        value="true",
                        scope=str(obj.get("kind") or "ResourceClaim"),
                    )
                )
    return out


# ---- The CEL twin (a ValidatingAdmissionPolicy on ResourceClaims and ResourceClaimTemplates). The
# two kinds and API versions place the requests and the flag differently, so the twin reads them
# through dyn(): a field one of them lacks is then not a type-check warning, and has() of it is
# false at run time. The message names the first request that asks, as the webhook does.
_SPEC: Final = "dyn(object.spec)"
_TEMPLATE: Final = f"object.kind == {lit(TEMPLATE)}"


def _requests_of(spec: str) -> str:
    return f"(has({spec}.devices) && has({spec}.devices.requests) ? {spec}.devices.requests : [])"


def _exactly(r: str) -> str:
    return f"(has({r}.exactly) && has({r}.exactly.adminAccess) && {r}.exactly.adminAccess == true)"


def _asks(r: str) -> str:
    return f"({_exactly(r)} || (has({r}.adminAccess) && {r}.adminAccess == true))"


_FIRST: Final = "variables.found[0]"
NATIVE: Final = NativeRule(
    (
        (
            "requests",
            f"{_TEMPLATE} ? (has({_SPEC}.spec) ? {_requests_of(f'{_SPEC}.spec')} : []) : {_requests_of(_SPEC)}",
        ),
        ("found", f"lists.range(size(variables.requests)).filter(i, {_asks('variables.requests[i]')})"),
    ),
    (
        Check(
            "(has(object.metadata.namespace) && object.metadata.namespace in @draAdminNamespaces@) || "
            "size(variables.found) == 0",
            f"@prefix@ + {lit(ID + ' (')} + object.kind + ': ' + "
            f"({_TEMPLATE} ? 'spec.spec.devices.requests[' : 'spec.devices.requests[') + string({_FIRST}) + '].' + "
            f"({_exactly(f'variables.requests[{_FIRST}]')} ? {lit(WHERE[0])} : {lit(WHERE[1])}) + "
            f"{lit(' ' + DETAIL + '; fix: ' + FIX + ')')}",
        ),
    ),
)


RULE: ObjectRule = ObjectRule(
    id=ID,
    kinds=(
        ("resource.k8s.io", "ResourceClaim", "resourceclaims"),
        ("resource.k8s.io", "ResourceClaimTemplate", "resourceclaimtemplates"),
    ),
    check=check,
    summary="A DRA ResourceClaim or ResourceClaimTemplate asks for `adminAccess` only in a namespace listed in "
    "`draAdminAccessNamespaces` (warn by default; deny by choice).",
    why="Admin access hands out devices already in use by other pods; the API server asks only for a namespace "
    "label that a namespace owner may be able to set.",
    reads=("spec.devices.requests[*].exactly.adminAccess", "spec.devices.requests[*].adminAccess"),
    triggers=(Trigger(Where.ANNOTATION, "adminAccess"),),
    example={
        "kind": "ResourceClaim",
        "metadata": {"name": "monitor", "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}}]
            }
        },
    },
    default_mode=Mode.WARN,
    native=NATIVE,
    webhook_only="",
)
