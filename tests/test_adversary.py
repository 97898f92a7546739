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

The invariant is stated for node-isolated pods (docs/policy.md, "The boundary"): a pod that asks
for no GPU and is outside that ground (privileged, SYS_ADMIN, host namespaces, a hostPath reaching a
device channel: nodemodel.outside) is Pod Security Admission's, and must be reported (node-wide-access)
instead; a GPU pod outside it must be refused. The grammar generates every mechanism the model knows:
the gated variables, device-list mounts by the toolkit's text prefix, every injector annotation, the
device cgroup's ways around (privilege, SYS_ADMIN) and the channel host paths.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Any, ClassVar

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.celconditions import compile_conditions, sent
from tests.nodemodel import (
    VISIBLE,
    Node,
    expand,
    go_trim_space,
    outside,
    toolkit_current,
    toolkit_legacy,
    what_it_sees,
)
from webhook.config import from_mapping
from webhook.policy import ShapeError, engine, gpus
from webhook.policy.nodes import view_of_nodes

EXAMPLES = 400
CONFIG: dict[str, Any] = {"clusterVersion": "1.30"}
NODE = Node()
# With the cluster view of that node (the server's default): GKE device names are judged against it.
POLICY = replace(
    from_mapping(CONFIG, environ={}).policy,
    cluster=view_of_nodes(
        [
            {
                "metadata": {"name": NODE.name, "labels": {}},
                "status": {
                    "allocatable": {"nvidia.com/gpu": str(NODE.gpus), "nvidia.com/mig-1g.5gb": "7"},
                    "capacity": {"nvidia.com/gpu": str(NODE.gpus), "nvidia.com/mig-1g.5gb": "7"},
                },
            }
        ]
    ),
)
NAMES = st.sampled_from(
    [
        VISIBLE,
        VISIBLE,
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "a,void,b",
        "X",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_MOFED",
        "NVIDIA_NVSWITCH",
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
    st.sampled_from(["void", "none", "", "all", "all,void", "none\x1f,all", "all,void\x1c", "enabled"]),
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
        c["securityContext"] = draw(
            st.sampled_from(
                [
                    {"privileged": True},
                    {"capabilities": {"add": ["SYS_ADMIN"]}},
                    {"capabilities": {"add": ["cap_sys_admin"]}},
                ]
            )
        )
    if draw(st.integers(0, 5)) == 0:
        c["volumeMounts"] = [
            {
                "name": "v",
                "mountPath": draw(
                    st.sampled_from(
                        [
                            "/var/run/nvidia-container-devices/all",
                            "/var/run/nvidia-container-devicesall",  # the toolkit's prefix has no slash
                            "/run//nvidia-container-devices/x",
                            "/data",
                            "/host",
                        ]
                    )
                ),
                **({"readOnly": True} if draw(st.booleans()) else {}),
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
    if draw(st.integers(0, 4)) == 0:
        host = draw(
            st.sampled_from(
                [
                    "/dev/null",
                    "//dev/",
                    "/dev/nvidia0",
                    "/data",
                    "/var/lib/kubelet/plugins_registry",
                    "/var/run/containerd/containerd.sock",
                    "/usr/local/nvidia",
                    "/etc/nvidia-container-runtime",
                    "/",
                ]
            )
        )
        spec["volumes"] = [{"name": "v", "hostPath": {"path": host}}]
    if draw(st.integers(0, 10)) == 0:
        spec[draw(st.sampled_from(["hostPID", "hostIPC"]))] = True
        if draw(st.booleans()):
            spec["containers"][0].setdefault("securityContext", {})["capabilities"] = {"add": ["SYS_PTRACE"]}
    annotation = draw(
        st.sampled_from(
            [
                None,
                "devices.gke.io/container.c0",
                "devices.gke.io/pod",
                "devices.noderesource.dev/container.c0",
                "cdi-devices.nri.io/container.c0",
                "mounts.noderesource.dev",
                "nvidia.cdi.k8s.io",
                "cdi.k8s.io/gpu",
                "devices.crio.io",
                "hami.io/vgpu-devices-to-allocate",
            ]
        )
    )
    if annotation:
        meta["annotations"] = {
            annotation: draw(
                st.sampled_from(
                    [
                        "- path: /dev/nvidia0\n",
                        "- path: /dev//nvidia1\n- path: /dev/nvidia2\n",
                        "nvidia.com/gpu=all",
                        "- {path: /dev/x0, type: c, major: 195, minor: 0}\n",
                        "- {source: /dev/null, destination: /var/run/nvidia-container-devicesall}\n",
                        "/dev/nvidia0:/dev/nvidia0:rwm",
                        "GPU-1,NVIDIA,81920,100:;",
                    ]
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
) -> tuple[dict[str, Any], list[str]] | None:
    """The pod as stored and the rules that warned, or None when the chart's webhooks refuse it
    (every webhook answers: the fail-closed and the fail-open pods webhooks judge alike)."""
    out = copy.deepcopy(pod)
    warned: list[str] = []
    try:
        if sent(conditions["mutate.gpu-policy.io"], out):
            changes = engine.mutate(engine.pod_view(out, policy, "ml"), policy)
            if changes.ops:
                out = jsonpatch.apply_patch(out, changes.ops)
        report = conditions.get("pods-report.validate.gpu-policy.io", [])
        if sent(conditions["pods.validate.gpu-policy.io"], out) or (report != [] and sent(report, out)):
            found = engine.find_violations(out, "", "Pod", policy, "ml")
            assert found is not None
            verdict = engine.judge(found, policy, None)
            if not verdict.allowed:
                return None
            warned = [v.rule for v in found]
    except ShapeError:
        return None  # 400 from either webhook
    return out, warned


def escapes(stored: dict[str, Any], warned: list[str], policy: Any = POLICY) -> list[str]:
    view = engine.pod_view(stored, policy, "ml")
    if not gpus.gpu_pod(view, policy) and outside(stored):
        # Outside the boundary: Pod Security Admission's ground, reported to whoever deploys it.
        return [] if "node-wide-access" in warned else [f"unreported: {outside(stored)}"]
    out = []
    for seen in what_it_sees(stored, NODE):
        out += [f"{seen.name}: {b}" for b in seen.beyond]
    return out


RUN: dict[str, float] = {"examples": 0, "admitted": 0, "seconds": 0.0}


def test_no_admitted_container_sees_a_gpu_it_was_not_given(conditions: Any) -> None:
    _property()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(pod=pods())
def _property(pod: dict[str, Any]) -> None:
    started = time.perf_counter()
    result = admitted(pod, Conditions.programs)
    RUN["examples"] += 1
    if result is not None:
        RUN["admitted"] += 1
        stored, warned = result
        assert escapes(stored, warned) == [], (pod, stored)
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
    result = admitted(pod, conditions)
    assert result is not None
    stored, _warned = result
    assert stored["spec"]["containers"][0]["env"] == [{"name": VISIBLE, "value": "void"}]
    assert not sent(conditions["pods.validate.gpu-policy.io"], stored)


def test_the_model_sees_the_doors_of_issue_48() -> None:
    """Unpoliced, each mechanism issue 48 names (and the ones found reading the sources) reaches a
    device in the model: the property is no tautology. Node access is outside the boundary."""

    def pod(c: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
        meta = {"name": "p", **({"annotations": annotations} if annotations else {})}
        return {"metadata": meta, "spec": {"containers": [{"name": "c", **c}], **spec}}

    gpu = {"resources": {"limits": {"nvidia.com/gpu": 1}}}
    void = [{"name": VISIBLE, "value": "void"}]

    def sees(p: dict[str, Any]) -> bool:
        return any(s.beyond for s in what_it_sees(p, NODE))

    assert sees(
        pod({"env": void, "volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devicesall"}]})
    )
    assert sees(pod({**gpu, "env": [{"name": "NVIDIA_MOFED", "value": "enabled"}]}))
    assert not sees(pod({"env": [*void, {"name": "NVIDIA_MOFED", "value": "enabled"}]}))  # no GPU: nothing gated
    for key, value in (
        ("cdi-devices.noderesource.dev/container.c", "- nvidia.com/gpu=all"),
        ("mounts.nri.io", "- {source: /dev/null, destination: /var/run/nvidia-container-devicesall}"),
        ("nvidia.cdi.k8s.io", "nvidia.com/gpu=all"),
        ("devices.crio.io", "/dev/nvidia0"),
        ("hami.io/vgpu-devices-to-allocate", "GPU-victim,NVIDIA,81920,100:;"),
    ):
        assert sees(pod({"env": void}, {key: value})), key
    two = {"devices.gke.io/container.c": "- path: /dev/nvidia6\n- path: /dev/nvidia7\n"}
    assert sees(pod({"resources": {"limits": {"nvidia.com/gpu": 2}}}, two))
    assert not sees(pod({"resources": {"limits": {"nvidia.com/gpu": 8}}}, two))
    assert sees(pod({"env": void, "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}))
    assert not sees(
        pod(
            {"env": void, "volumeMounts": [{"name": "d", "mountPath": "/d"}]},
            volumes=[{"name": "d", "hostPath": {"path": "/dev/nvidia0"}}],
        )
    )  # the device cgroup refuses it
    sock = [{"name": "s", "hostPath": {"path": "/var/lib/kubelet/plugins_registry"}}]
    assert outside(pod({"volumeMounts": [{"name": "s", "mountPath": "/r", "readOnly": True}]}, volumes=sock))
    ro_proc = [{"name": "s", "hostPath": {"path": "/proc"}}]
    assert not outside(pod({"volumeMounts": [{"name": "s", "mountPath": "/p", "readOnly": True}]}, volumes=ro_proc))
