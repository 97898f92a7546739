"""Property-based fuzzing of the admission layer with hypothesis: structured AdmissionReviews and
pod specs, shrunk to a minimal failing example when a property breaks. Alongside the seeded mutation
fuzzer (tests/test_fuzz.py), which damages real manifests.

Properties, for any review:
- review.parse either accepts it or raises ReviewError (a 4xx), never anything else;
- the admission layer never raises: every object gets an Outcome;
- an object any deny-mode rule flags is never allowed (the engine's own findings decide);
- the response built for it is a well-formed AdmissionReview answer for the same uid.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import POLICY
from webhook import admission
from webhook.admission import review
from webhook.admission.review import ReviewError
from webhook.policy import Mode, ShapeError, engine, group_of
from webhook.policy.vendors import AMD

RESOURCE_NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/gpu.shared",
    "cpu",
    "memory",
    "nvidia.com/gpumem",
]
QUANTITIES = st.one_of(
    st.sampled_from(["1", "0", "0.5", "1.5", "500m", "2", "-1", "abc", "1e0", "", "1Ki"]),
    st.integers(min_value=-2, max_value=16),
    st.floats(min_value=-1, max_value=8, allow_nan=False, allow_infinity=False),
    st.none(),
)
ENV_VALUES = st.sampled_from(["void", "none", "", "all", "0", "0,all", "none,all", "GPU-1234", "ALL", " all "])
ENV_NAMES = st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH", "HOME"])


@st.composite
def containers(draw: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": draw(st.sampled_from(["main", "sidecar", "init", ""])), "image": "x"}
    if draw(st.booleans()):
        c["resources"] = {
            side: draw(st.dictionaries(st.sampled_from(RESOURCE_NAMES), QUANTITIES, max_size=3))
            for side in draw(st.lists(st.sampled_from(["limits", "requests"]), unique=True, max_size=2))
        }
    if draw(st.booleans()):
        c["env"] = draw(
            st.lists(
                st.one_of(
                    st.fixed_dictionaries({"name": ENV_NAMES, "value": ENV_VALUES}),
                    st.fixed_dictionaries(
                        {"name": ENV_NAMES, "valueFrom": st.just({"configMapKeyRef": {"name": "c", "key": "k"}})}
                    ),
                ),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        c["securityContext"] = {
            "privileged": draw(st.sampled_from([True, False, None])),
            "capabilities": {"add": draw(st.lists(st.sampled_from(["SYS_ADMIN", "NET_ADMIN", "all"]), max_size=2))},
        }
    return c


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), min_size=1, max_size=3))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers(), max_size=2))
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(st.sampled_from(["accelerator", "disk"]), st.just("x"), max_size=2))
    for flag in ("hostPID", "hostIPC"):
        if draw(st.booleans()):
            spec[flag] = draw(st.sampled_from([True, False, None, "yes"]))
    if draw(st.booleans()):
        spec["volumes"] = [
            {"name": "v", "hostPath": {"path": draw(st.sampled_from(["/dev", "/data", "/run/cdi", "/"]))}}
        ]
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    meta: dict[str, Any] = {"name": "p", "namespace": draw(st.sampled_from(["ml", "kube-system"]))}
    if draw(st.booleans()):
        meta["annotations"] = draw(
            st.dictionaries(st.sampled_from(["nvidia.cdi.k8s.io/c", "gpu-fraction", "x"]), st.just("v"), max_size=2)
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def wrap(p: dict[str, Any], kind: str) -> dict[str, Any]:
    if kind == "Pod":
        return p
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": p["metadata"],
        "spec": {"selector": {}, "template": {"metadata": {}, "spec": p["spec"]}},
    }


@st.composite
def reviews(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Pod", "Deployment", "DaemonSet"]))
    obj = wrap(draw(pods()), kind)
    group = "apps" if kind != "Pod" else ""
    request: dict[str, Any] = {
        "uid": draw(st.sampled_from(["u-1", "", None, 7])),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "PATCH"])),
        "namespace": obj["metadata"]["namespace"],
        "object": draw(st.sampled_from([obj, obj, obj, None, "junk"])),
        "oldObject": draw(st.sampled_from([None, obj])),
        "userInfo": {"username": "u"},
        "dryRun": draw(st.booleans()),
    }
    return {
        "apiVersion": draw(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "v2"])),
        "kind": "AdmissionReview",
        "request": request,
    }


def denied_by_engine(obj: Any, group: str, kind: str) -> bool:
    try:
        found = engine.find_violations(obj, group, kind, POLICY)
    except ShapeError:
        return True  # malformed: must not be allowed either
    return bool(found) and any(POLICY.mode(v.rule) is Mode.DENY for v in found)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reviews())
def test_admission_never_crashes_and_never_allows_a_denied_object(body: dict[str, Any]) -> None:
    try:
        req = review.parse(body)
    except ReviewError as exc:
        assert 400 <= exc.status < 500
        return
    outcome = admission.validate(req, POLICY)
    response = admission.respond(req, outcome)
    assert response["apiVersion"] == body["apiVersion"] and response["kind"] == "AdmissionReview"
    assert response["response"]["uid"] == req.uid and isinstance(response["response"]["allowed"], bool)
    judged = req.operation == "CREATE" and req.namespace not in POLICY.exempt_namespaces
    if judged and denied_by_engine(req.object, req.group, req.kind):
        assert outcome.allowed is False, (outcome, req.object)
    mutated = admission.mutate(req, POLICY)
    assert mutated.decision in set(admission.Decision)


@settings(max_examples=300, deadline=None)
@given(pods())
def test_mutation_is_idempotent_and_only_voids_gpu_less_containers(obj: dict[str, Any]) -> None:
    import copy

    import jsonpatch

    from webhook.policy import gpus

    try:
        view = engine.pod_view(obj, POLICY)
    except ShapeError:
        return
    changes = engine.mutate(view, POLICY)
    out = jsonpatch.apply_patch(copy.deepcopy(obj), changes.ops) if changes.ops else obj
    again = engine.mutate(engine.pod_view(out, POLICY), POLICY)
    assert again.ops == [], "reinvocation must change nothing"
    for c in engine.pod_view(obj, POLICY).containers:
        added = [
            entry
            for op in changes.ops
            if op["path"].startswith(c.pointer + "/env")
            for entry in (op["value"] if isinstance(op["value"], list) else [op["value"]])
        ]
        if gpus.plugin_env_gpu(c, view, POLICY):  # its GPU comes through NVIDIA's variable
            assert not any(e["name"] == "NVIDIA_VISIBLE_DEVICES" for e in added), c.name
        if gpus.vendor_gpu(c, AMD):  # it may get an AMD GPU: AMD's variable is never touched
            assert not any(e["name"] == "AMD_VISIBLE_DEVICES" for e in added), c.name
    assert group_of(obj["apiVersion"]) == ""
