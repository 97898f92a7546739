"""Malformed objects fail with the field path named, never with a crash or a silent allow."""

import pytest

from tests.helpers import POLICY, container, pod, run, wrap
from webhook.policy import ShapeError, engine


def build(obj: dict, kind: str = "Pod", group: str = "") -> None:
    """The walk and every rule: some fields are shape-checked when a rule first reads them."""
    engine.find_violations(obj, group, kind, POLICY)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda p: p["spec"].update(containers={"a": 1}), "spec.containers"),
        (lambda p: p["spec"].update(containers=["x"]), "spec.containers[0]"),
        (lambda p: p["spec"]["containers"][0].update(env="A=1"), "spec.containers[0].env"),
        (lambda p: p["spec"]["containers"][0].update(env=[{"value": "x"}]), "spec.containers[0].env[0].name"),
        (
            lambda p: p["spec"]["containers"][0].update(
                env=[{"name": "A"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": 0}]
            ),
            "spec.containers[0].env[1].value",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(env=[{"name": "LD_LIBRARY_PATH", "value": ["/x"]}]),
            "spec.containers[0].env[0].value",
        ),
        (lambda p: p["spec"]["containers"][0].update(resources=[]), "spec.containers[0].resources"),
        (lambda p: p["spec"]["containers"][0].update(resources={"limits": "1"}), "spec.containers[0].resources.limits"),
        (
            lambda p: p["spec"]["containers"][0].update(securityContext={"privileged": "true"}),
            "spec.containers[0].securityContext.privileged",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(securityContext={"capabilities": {"add": "SYS_ADMIN"}}),
            "spec.containers[0].securityContext.capabilities.add",
        ),
        (lambda p: p["spec"].update(nodeSelector=["accelerator"]), "spec.nodeSelector"),
        (lambda p: p["spec"].update(initContainers="x"), "spec.initContainers"),
        # envFrom is read by visible-devices-envfrom: a non-list is an error, never a silent allow.
        (
            lambda p: p["spec"]["containers"][0].update(envFrom={"configMapRef": {"name": "x"}}),
            "spec.containers[0].envFrom",
        ),
        (lambda p: p["spec"]["containers"][0].update(envFrom=["x"]), "spec.containers[0].envFrom[0]"),
        (
            lambda p: p["spec"]["containers"][0].update(envFrom=[{"configMapRef": "x"}]),
            "spec.containers[0].envFrom[0].configMapRef",
        ),
        (lambda p: p["spec"]["containers"][0]["resources"].update(claims="gpu"), "spec.containers[0].resources.claims"),
        (lambda p: p["spec"].update(volumes=[{"name": "h", "hostPath": "/dev"}]), "spec.volumes[0].hostPath"),
        (lambda p: p["spec"].update(volumes=[{"name": "h", "hostPath": {"path": 1}}]), "spec.volumes[0].hostPath.path"),
        (lambda p: p["spec"].update(hostPID="true"), "spec.hostPID"),
        (lambda p: p["metadata"].update(annotations={"a": 1}), 'metadata.annotations["a"]'),
        (
            lambda p: p["spec"]["containers"][0].update(securityContext={"privileged": "yes"}),
            "spec.containers[0].securityContext.privileged",
        ),
        (lambda p: p.pop("spec"), "spec"),
        (
            lambda p: p["spec"].update(
                affinity={
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}
                }
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
        ),
    ],
)
def test_shape_errors_name_the_field(mutate, path: str) -> None:
    p = pod(container(gpu=1))
    mutate(p)
    with pytest.raises(ShapeError) as info:
        build(p)
    assert info.value.path == path


def test_mounts_and_env_from_are_checked_when_read() -> None:
    p = pod(container(volumeMounts=[{"name": "x", "mountPath": 5}]))
    view = engine.pod_view(p, POLICY)  # the walk does not read mounts...
    with pytest.raises(ShapeError) as info:
        _ = view.containers[0].mount_paths  # ...the rule that does gets the error, with its path
    assert info.value.path == "spec.containers[0].volumeMounts[0].mountPath"


def test_template_paths_in_shape_errors() -> None:
    d = wrap(pod(container()), "CronJob")
    d["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"] = "oops"
    with pytest.raises(ShapeError) as info:
        build(d, "CronJob", "batch")
    assert info.value.path == "spec.jobTemplate.spec.template.spec.containers"
    d = wrap(pod(container()), "Deployment")
    del d["spec"]["template"]
    with pytest.raises(ShapeError) as info:
        build(d, "Deployment", "apps")
    assert str(info.value) == "spec.template: is required"


def test_unknown_kinds_are_not_policed() -> None:
    assert engine.pod_views({"spec": {}}, "", "Service", POLICY) is None
    assert engine.pod_views({"spec": {}}, "example.com", "Deployment", POLICY) is None


def test_json_nulls_the_api_accepts_are_not_malformed() -> None:
    # Go decodes null into "" for strings and map values; the API server accepts these.
    p = pod(container(gpu=1, envFrom=[{"configMapRef": {"name": None}}]))
    p["metadata"]["annotations"] = {"note": None, "gpu-policy.io/mutate": "false"}
    found = run(p)
    assert [v.rule for v in found] == ["visible-devices-envfrom"]
    assert engine.pod_view(p, POLICY).annotations == {"note": "", "gpu-policy.io/mutate": "false"}
