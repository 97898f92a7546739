"""dra-admin-access: DRA claims asking for devices in use by other pods (issue 32 #10)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import default_policy
from webhook.config import from_mapping
from webhook.policy import Mode, ShapeError, engine

ID = "dra-admin-access"


def claim(
    admin: bool = True, shape: str = "v1", kind: str = "ResourceClaim", namespace: str = "team-a"
) -> dict[str, Any]:
    """The Intel and NVIDIA DRA drivers' monitoring examples: one request with adminAccess."""
    request: dict[str, Any] = {"name": "gpu"}
    if shape == "v1":
        request["exactly"] = {"deviceClassName": "gpu.nvidia.com", "adminAccess": admin}
    else:
        request.update({"deviceClassName": "gpu.intel.com", "adminAccess": admin})
    spec: dict[str, Any] = {"devices": {"requests": [request]}}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    api = "resource.k8s.io/v1" if shape == "v1" else "resource.k8s.io/v1beta1"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "monitor", "namespace": namespace}, "spec": spec}


def found(obj: dict[str, Any], policy: Any = None) -> list[Any]:
    out = engine.find_violations(obj, "resource.k8s.io", obj["kind"], policy or default_policy(), "team-a")
    assert out is not None
    return [v for v in out if v.rule == ID]


@pytest.mark.parametrize("shape", ["v1", "v1beta1"])
@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_admin_access_is_flagged_in_both_shapes_and_kinds(shape: str, kind: str) -> None:
    (v,) = found(claim(shape=shape, kind=kind))
    base = "spec.spec" if kind == "ResourceClaimTemplate" else "spec"
    where = "exactly.adminAccess" if shape == "v1" else "adminAccess"
    assert v.path == f"{base}.devices.requests[0].{where}" and "in use by other pods" in v.detail


def test_plain_claims_and_listed_namespaces_are_fine() -> None:
    assert found(claim(admin=False)) == []
    listed = from_mapping({"draAdminAccessNamespaces": ["monitoring"]}, environ={}).policy
    assert found(claim(namespace="monitoring"), listed) == []
    assert len(found(claim(namespace="team-a"), listed)) == 1


def test_warn_by_default_and_malformed_claims() -> None:
    assert from_mapping({}, environ={}).policy.mode(ID) is Mode.WARN
    bad = claim()
    bad["spec"]["devices"]["requests"] = {"name": "gpu"}
    with pytest.raises(ShapeError):
        found(bad)
