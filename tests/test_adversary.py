"""The isolation invariant against a pod author who wants GPUs they were not given (issue 32).

For every pod the default chart admits — the mutating webhook's patch applied (jsonpatch), then the
validating webhook, each behind the chart's own matchConditions evaluated as the API server does
(cel-python; the validating ones on the *mutated* pod) — no container sees a device beyond what
the pod was allocated, as tests/nodemodel.py says the node really behaves (kubelet env order and
`$(VAR)` expansion, removeMissingExtendedResources, CDI, the toolkit's current and legacy parsing).

Hypothesis generates the pods from a grammar over every field that model reads: env names and
values with control characters, whitespace, commas, `$(...)`, valueFrom, envFrom with prefixes,
annotations, resources and claims, nodeName, securityContext, volumes, init, sidecar and ephemeral
containers. EXAMPLES examples run in CI (`-s` prints the count and time). Its twin for legitimate
workloads is the corpus (tests/test_corpus.py) and tests/test_gpu_world.py: every GPU kept.

Left out of the invariant, as docs/policy.md's threat model says: privileged containers and
host namespaces in pods that ask for no GPU (Pod Security Admission's domain; a warning here).
"""

from __future__ import annotations

import copy
import time
from typing import Any, ClassVar

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.celconditions import compile_conditions, sent
from tests.nodemodel import VISIBLE, Node, expand, go_trim_space, toolkit_current, toolkit_legacy, what_it_sees
from webhook.config import from_mapping
from webhook.policy import ShapeError, engine, gpus

EXAMPLES = 400
CONFIG: dict[str, Any] = {"clusterVersion": "1.30"}
POLICY = from_mapping(CONFIG, environ={}).policy
NODE = Node()
NAMES = st.sampled_from(
    [
        VISIBLE,
        VISIBLE,
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "a,void,b",
        "X",
        "NVIDIA_DRIVER_CAPABILITIES",
        "HF_HOME",  # names that grant nothing: so that admitted pods are many, and varied
        "PATH",
        "X",
    ]
)
PIECES = st.sampled_from(
    [
        "all",
        "void",
        "none",
        "0",
        "GPU-1",
        ",",
        " ",
        "\x1c",
        "\x1f",
        "\t",
        "\xa0",
        "$(X)",
        "$(a,void,b)",
        "$$",
        "$(",
        ")",
    ]
)
VALUES = st.one_of(
    st.sampled_from(["void", "none", "", "all", "all,void", "none\x1f,all", "all,void\x1c"]),
    st.lists(PIECES, max_size=5).map("".join),
)
ENTRY = st.one_of(
    st.fixed_dictionaries({"name": NAMES, "value": VALUES}),
    st.fixed_dictionaries({"name": NAMES, "valueFrom": st.just({"configMapKeyRef": {"name": "cm", "key": "k"}})}),
)
RESOURCES = st.sampled_from(
    [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-7g.80gb",
        "nvidia.com/gpu.shared",
        "nvidia.com/gpumem",
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
        "example.com/foo",
        "nvidia.com/hostdev",
        "cpu",
    ]
)
PREFIXES = st.sampled_from(["", "NVIDIA_", "NVIDIA_VISIBLE_", "NVIDIA_IMEX", "APP_", "N"])
# The tame half: what legitimate pods look like, so that many generated pods are admitted and the
# invariant is tested on them (values that grant nothing, other names with any value, prefixes).
TAME_ENTRY = st.one_of(
    st.fixed_dictionaries({"name": NAMES, "value": st.sampled_from(["void", "none", ""])}),
    st.fixed_dictionaries({"name": st.sampled_from(["HF_HOME", "PATH", "X"]), "value": VALUES}),
)
TAME_PREFIXES = st.sampled_from(["", "APP_", "HF_"])


@st.composite
def containers(draw: Any, name: str, tame: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if draw(st.booleans()):
        c["env"] = draw(st.lists(TAME_ENTRY if tame else ENTRY, max_size=4))
    if draw(st.integers(0, 3)) == 0:
        c["envFrom"] = [
            {
                "configMapRef": {"name": "cm"},
                **({"prefix": p} if (p := draw(TAME_PREFIXES if tame else PREFIXES)) else {}),
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
    if draw(st.booleans()):
        c["resources"] = {"limits": {draw(RESOURCES): draw(st.sampled_from([1, "1", 2, "0"]))}}
    if draw(st.integers(0, 4)) == 0:
        c.setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    if tame:
        return c
    if draw(st.integers(0, 6)) == 0:
        c["securityContext"] = {"privileged": True}
    if draw(st.integers(0, 8)) == 0:
        c["volumeMounts"] = [
            {
                "name": "v",
                "mountPath": draw(
                    st.sampled_from(
                        ["/var/run/nvidia-container-devices/all", "/run//nvidia-container-devices/x", "/data"]
                    )
                ),
            }
        ]
    return c


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    tame = draw(st.booleans())
    spec: dict[str, Any] = {"containers": [draw(containers(f"c{i}", tame)) for i in range(draw(st.integers(1, 2)))]}
    if draw(st.booleans()):
        init = draw(containers("init", tame))
        if draw(st.booleans()):
            init["restartPolicy"] = "Always"  # a sidecar
        spec["initContainers"] = [init]
    if draw(st.integers(0, 4)) == 0:
        spec["ephemeralContainers"] = [draw(containers("debug", tame))]
    if any("claims" in (c.get("resources") or {}) for c in spec["containers"]):
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]
    meta: dict[str, Any] = {"name": "attack", "namespace": "ml"}
    if tame:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if draw(st.integers(0, 3)) == 0:
        spec["nodeName"] = NODE.name
    if draw(st.integers(0, 8)) == 0:
        spec["volumes"] = [{"name": "v", "hostPath": {"path": draw(st.sampled_from(["/dev/null", "//dev/", "/data"]))}}]
    annotation = draw(
        st.sampled_from(
            [
                None,
                "devices.gke.io/container.c0",
                "devices.gke.io/pod",
                "devices.noderesource.dev/container.c0",
                "cdi.k8s.io/gpu",
            ]
        )
    )
    if annotation:
        meta["annotations"] = {
            annotation: draw(
                st.sampled_from(
                    ["- path: /dev/nvidia0\n", "- path: /dev//nvidia1\n- path: /dev/nvidia2\n", "nvidia.com/gpu=all"]
                )
            )
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Conditions:
    """The default chart's compiled matchConditions by webhook name (rendered once; kept out of
    Hypothesis' arguments, whose reprs it would flood)."""

    programs: ClassVar[dict[str, list[Any] | None]] = {}


@pytest.fixture(scope="module")
def conditions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any] | None]:
    if not Conditions.programs:
        Conditions.programs = compile_conditions(CONFIG, tmp_path_factory.mktemp("cel"))
    return Conditions.programs


def admitted(
    pod: dict[str, Any], conditions: dict[str, list[Any] | None], policy: Any = POLICY
) -> dict[str, Any] | None:
    """The pod as stored, or None when the default chart's webhooks refuse it."""
    out = copy.deepcopy(pod)
    try:
        if sent(conditions["mutate.gpu-policy.io"], out):
            changes = engine.mutate(engine.pod_view(out, policy, "ml"), policy)
            if changes.ops:
                out = jsonpatch.apply_patch(out, changes.ops)
        if sent(conditions["pods.validate.gpu-policy.io"], out):
            found = engine.find_violations(out, "", "Pod", policy, "ml")
            assert found is not None
            if not engine.judge(found, policy, None).allowed:
                return None
    except ShapeError:
        return None  # 400 from either webhook
    return out


def escapes(stored: dict[str, Any], policy: Any = POLICY) -> list[str]:
    view = engine.pod_view(stored, policy, "ml")
    gpu_pod = gpus.gpu_pod(view, policy)
    out = []
    for seen in what_it_sees(stored, NODE):
        beyond = [b for b in seen.beyond if not (b.startswith("privileged") and not gpu_pod)]
        out += [f"{seen.name}: {b}" for b in beyond]
    return out


RUN: dict[str, float] = {"examples": 0, "admitted": 0, "seconds": 0.0}


def test_no_admitted_container_sees_a_gpu_it_was_not_given(conditions: Any) -> None:
    _property()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(pod=pods())
def _property(pod: dict[str, Any]) -> None:
    started = time.perf_counter()
    stored = admitted(pod, Conditions.programs)
    RUN["examples"] += 1
    if stored is not None:
        RUN["admitted"] += 1
        assert escapes(stored) == [], (pod, stored)
    RUN["seconds"] += time.perf_counter() - started


def test_zz_property_figures() -> None:
    """Prints the property's example count (run after it, by name)."""
    print(
        f"FIGURE adversary property: {RUN['examples']:.0f} examples, {RUN['admitted']:.0f} admitted, "
        f"{RUN['seconds']:.1f} s"
    )


# ---------------------------------------------------------------- the model's own parts, against the sources' tests


@pytest.mark.parametrize(
    ("value", "current", "legacy"),
    [
        ("all", "all", "devices"),
        ("void", "none", "none"),
        ("none", "none", "none"),
        ("", "none", "none"),
        ("all,void", "none", "devices"),  # any void wins now; the legacy CLI got "all,void"
        ("all,void\x1c", "all", "devices"),  # Go's TrimSpace keeps \x1c: "void\x1c" is a device id
        ("none\x1f,all", "all", "devices"),
        (" void ", "none", "devices"),
        ("0,all", "all", "devices"),
        ("all,none", "none", "devices"),  # none beats all (devices.go NewVisibleDevices)
    ],
)
def test_toolkit_readings(value: str, current: str, legacy: str) -> None:
    env = {VISIBLE: value}
    assert (toolkit_current(env), toolkit_legacy(env)) == (current, legacy)


def test_go_trim_space_is_not_python_strip() -> None:
    assert go_trim_space("\x1cvoid\x1f") == "\x1cvoid\x1f"
    assert "\x1cvoid\x1f".strip() == "void"
    assert go_trim_space("\t\xa0void\u3000") == "void"


@pytest.mark.parametrize(
    ("value", "defined", "expanded"),
    [
        ("$(a,void,b)", {"a,void,b": "all"}, "all"),  # relaxed names: any text
        ("$(X)", {}, "$(X)"),  # unknown: kept as written
        ("$$(X)", {"X": "all"}, "$(X)"),  # escaped
        ("$(X", {"X": "all"}, "$(X"),  # never closed
        ("void", {"void": "all"}, "void"),
    ],
)
def test_kubelet_expansion(value: str, defined: dict[str, str], expanded: str) -> None:
    assert expand(value, defined) == expanded


def test_the_model_sees_what_the_issue_saw() -> None:
    """The model is no stand-in for the policy: unpoliced, the attacks of issue 32 reach GPUs."""

    def pod(c: dict[str, Any], **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", **c}], **spec}}

    env = [{"name": "a,void,b", "value": "all"}, {"name": VISIBLE, "value": "$(a,void,b)"}]
    assert what_it_sees(pod({"env": env}))[0].beyond
    assert what_it_sees(pod({"env": [{"name": VISIBLE, "value": "all,void\x1c"}]}))[0].beyond
    gpu_with_envfrom = {"resources": {"limits": {"nvidia.com/gpu": 1}}, "envFrom": [{"configMapRef": {"name": "x"}}]}
    assert what_it_sees(pod(gpu_with_envfrom))[0].beyond
    assert what_it_sees(pod({"resources": {"limits": {"nvidia.com/mig-7g.80gb": 1}}}, nodeName="gpu-node-1"))[0].beyond
    assert not what_it_sees(pod({"resources": {"limits": {"nvidia.com/gpu": 1}}}))[0].beyond
    assert not what_it_sees(pod({"env": [{"name": VISIBLE, "value": "void"}]}))[0].beyond


def test_the_property_runs_on_the_chart_conditions(conditions: Any) -> None:
    """A plain CPU pod isolation voided is not sent to the fail-closed validating webhook (issue 32 #13)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    }
    stored = admitted(pod, conditions)
    assert stored is not None and stored["spec"]["containers"][0]["env"] == [
        {"name": VISIBLE, "value": "void"},
        {"name": "AMD_VISIBLE_DEVICES", "value": "none"},  # nor by AMD's own: "none" grants nothing
    ]
    assert not sent(conditions["pods.validate.gpu-policy.io"], stored)
