"""The real server process over real TLS, driven the way kube-apiserver drives it."""

from __future__ import annotations

import base64
import json
import warnings

import pytest

from tests.apiserver import ApiServer
from tests.helpers import VOID, Server, container, pod, wrap

LD = {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}


def test_gpu_pod_is_allowed_and_patched(api: ApiServer) -> None:
    obj = pod(container("train", gpu="1", request="1", env=[{"name": "A", "value": "1"}]))
    response, patched = api.mutate(obj)
    assert response["allowed"] is True
    assert patched["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, LD]  # no AMD entry: no AMD runtime
    assert patched["spec"]["nodeSelector"] == {"accelerator": "nvidia-t4"}
    assert any("LD_LIBRARY_PATH" in w for w in response["warnings"])
    # Reinvocation (reinvocationPolicy: IfNeeded) of the patched pod changes nothing.
    again, same = api.mutate(patched)
    assert "patch" not in again and "patchType" not in again and same == patched
    # And the validating webhook, which sees the final object, allows it.
    assert api.validate(patched)["allowed"] is True


def test_pod_without_gpu_is_only_isolated(api: ApiServer) -> None:
    response, out = api.mutate(pod(container("web", image="nginx:1.27")))
    assert "warnings" not in response
    cuda, _ = api.mutate(pod(container("smi")))  # a CUDA image without a GPU request is told why
    assert cuda["warnings"] == [
        'isolate-non-gpu: container "smi" (nvidia/cuda:12.4.0-base-ubuntu22.04) runs a GPU image but requests no GPU, '
        "so it gets NVIDIA_VISIBLE_DEVICES=void and sees none (nvidia-smi: not found); request one with "
        'resources.limits["nvidia.com/gpu"]'
    ]
    assert out["spec"]["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert "nodeSelector" not in out["spec"]


def test_denied_pod(api: ApiServer) -> None:
    obj = pod(container("t", gpu="1", privileged=True, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    response = api.validate(obj)
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert status["message"] == (
        'violates GPU policy: no-visible-devices-env (container "t": spec.containers[0].env[0] sets '
        'NVIDIA_VISIBLE_DEVICES="all", which bypasses the device plugin; fix: remove the variable and request GPUs '
        'with resources.limits["nvidia.com/gpu"]), no-privileged-gpu (container "t": '
        "spec.containers[0].securityContext.privileged is true in a GPU pod: a privileged container sees every GPU "
        "on the node; fix: remove securityContext.privileged (request the GPUs you need instead))"
    )


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Deployment", "spec.template.spec.containers[0]"),
        ("ReplicaSet", "spec.template.spec.containers[0]"),
        ("StatefulSet", "spec.template.spec.containers[0]"),
        ("DaemonSet", "spec.template.spec.containers[0]"),
        ("ReplicationController", "spec.template.spec.containers[0]"),
        ("PodTemplate", "template.spec.containers[0]"),
        ("Job", "spec.template.spec.containers[0]"),
        ("CronJob", "spec.jobTemplate.spec.template.spec.containers[0]"),
    ],
)
def test_workload_templates_are_validated(api: ApiServer, kind: str, path: str) -> None:
    response = api.validate(wrap(pod(container(gpu="1.5")), kind))
    assert response["allowed"] is False
    assert f'{path}.resources.limits["nvidia.com/gpu"] is "1.5"' in response["status"]["message"]
    # ... and never mutated: their pods will be, one by one.
    mutated, _ = api.mutate(wrap(pod(container(gpu="1")), kind))
    assert "patch" not in mutated


def test_v1beta1_is_answered_in_v1beta1(api: ApiServer) -> None:
    review = api.build(pod(container(gpu="abc")), api_version="admission.k8s.io/v1beta1")
    assert api.review("/validate", review)["allowed"] is False  # review() checks the echoed apiVersion


def test_dry_run_is_judged_the_same(api: ApiServer) -> None:
    assert api.validate(pod(container(gpu="1.5")), dry_run=True)["allowed"] is False
    _, patched = api.mutate(pod(container(gpu="1")), dry_run=True)
    assert patched["spec"]["nodeSelector"] == {"accelerator": "nvidia-t4"}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed(api: ApiServer, operation: str) -> None:
    bad = pod(container(gpu="1.5"))
    review = api.build(None if operation == "DELETE" else bad, operation=operation, old=bad)
    assert api.review("/validate", review)["allowed"] is True


def test_update_judges_only_what_the_update_introduces(api: ApiServer) -> None:
    old = pod(container("a", gpu="1.5"))
    relabelled = pod(container("a", gpu="1.5"))
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert api.validate(relabelled, operation="UPDATE", old=old)["allowed"] is True
    worse = pod(container("a", gpu="1.5", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]))
    response = api.validate(worse, operation="UPDATE", old=old)
    assert response["allowed"] is False
    assert "no-visible-devices-env" in response["status"]["message"]
    assert "gpu-quantity" not in response["status"]["message"]
    # Being deleted: finalizers must come off whatever the spec says.
    worse["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert api.validate(worse, operation="UPDATE", old=old)["allowed"] is True
    # UPDATE is never mutated: the fields we touch are immutable.
    assert "patch" not in api.mutate(pod(container(gpu="1")), operation="UPDATE", old=old)[0]


def test_ephemeral_containers_subresource_is_always_judged(api: ApiServer) -> None:
    running = pod(container("train", gpu="1", request="1"))
    debugged = json.loads(json.dumps(running))
    debugged["spec"]["ephemeralContainers"] = [container("debugger", privileged=True)]
    response = api.validate(debugged, operation="UPDATE", old=running, sub_resource="ephemeralcontainers")
    assert response["allowed"] is False
    assert (
        'ephemeral container "debugger": spec.ephemeralContainers[0].securityContext.privileged'
        in (response["status"]["message"])
    )


def test_other_subresources_and_kinds_are_allowed(api: ApiServer) -> None:
    bad = pod(container(gpu="1.5"))
    assert api.validate(bad, operation="UPDATE", old=bad, sub_resource="status")["allowed"] is True
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ml"}, "spec": {}}
    assert api.validate(service)["allowed"] is True
    crd = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": 1}}
    assert api.validate(crd)["allowed"] is True


@pytest.mark.parametrize("namespace", ["kube-system", "gpu-policy"])
def test_exempt_namespaces(api: ApiServer, namespace: str) -> None:
    bad = pod(container(gpu="1", privileged=True), namespace=namespace)
    assert api.validate(bad)["allowed"] is True
    assert "patch" not in api.mutate(bad)[0]


def test_malformed_object_is_denied_with_its_path(api: ApiServer) -> None:
    bad = pod(container(gpu="1"))
    bad["spec"]["containers"][0]["env"] = {"NVIDIA_VISIBLE_DEVICES": "all"}
    for path in ("/validate", "/mutate"):
        response = api.review(path, api.build(bad))
        assert response["allowed"] is False
        assert response["status"]["code"] == 400
        assert response["status"]["message"] == (
            "gpu-policy cannot judge this Pod: spec.containers[0].env must be a list, got object"
        )
    # Without a GPU too: isolation walks every pod.
    no_gpu = pod(container())
    no_gpu["spec"]["containers"][0]["env"] = {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert api.review("/mutate", api.build(no_gpu))["status"]["code"] == 400
    assert api.review("/validate", api.build(no_gpu))["status"]["code"] == 400


@pytest.mark.parametrize(
    ("body", "content_type", "status", "fragment"),
    [
        (b"{not json", "application/json", 400, "not valid JSON"),
        (b"", "application/json", 400, "empty body"),
        (b"[]", "application/json", 400, "must be a JSON object"),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
            "application/json",
            400,
            "request is required",
        ),
        (b'{"apiVersion":"v1","kind":"AdmissionReview","request":{}}', "application/json", 400, "apiVersion must be"),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}',
            "application/json",
            400,
            "request.uid must be a str",
        ),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},'
            b'"operation":"CREATE"}}',
            "application/json",
            400,
            "request.object must be an object",
        ),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},'
            b'"operation":"PATCH","object":{}}}',
            "application/json",
            400,
            "request.operation must be one of",
        ),
        (b"{}", "text/plain", 415, "Content-Type must be application/json"),
    ],
)
def test_malformed_reviews_get_4xx_json(
    api: ApiServer, body: bytes, content_type: str, status: int, fragment: str
) -> None:
    raw = api.post("/validate", body, content_type)
    assert raw.status == status
    assert fragment in raw.json()["error"]
    # and the server is still there
    assert api.validate(pod(container()))["allowed"] is True


def test_oversize_body_is_413(api: ApiServer) -> None:
    review = api.build(pod(container(env=[{"name": "BIG", "value": "x" * (20 * 1024 * 1024)}])))
    raw = api.post("/validate", json.dumps(review).encode())
    assert raw.status == 413
    assert "byte limit" in raw.json()["error"]
    api.close()
    assert api.validate(pod(container()))["allowed"] is True


def test_large_but_legal_body_is_judged(api: ApiServer) -> None:
    # A 3 MiB object (the API server's MaxRequestBodyBytes, what a client may send it): judged,
    # well under the shipped 19 MiB maxRequestBytes (tests/test_review_size.py has the largest).
    big = pod(container(gpu="1.5", env=[{"name": "BIG", "value": "x" * (3 * 1024 * 1024)}]))
    assert api.validate(big)["allowed"] is False


def test_keep_alive_reuses_one_connection(api: ApiServer) -> None:
    api.validate(pod(container()))
    sock = api._connection().sock
    for _ in range(20):
        api.validate(pod(container(gpu="1")))
    assert api._connection().sock is sock


def test_health_and_metrics(server: Server, api: ApiServer) -> None:
    assert api.get("/healthz").status == 200
    assert api.get("/readyz").status == 200
    api.validate(pod(container(gpu="1.5")))
    assert api.get("/metrics").status == 404  # only on the metrics port
    text = server.scrape()
    assert 'gpu_policy_reviews_total{decision="denied",webhook="validate"}' in text
    assert 'gpu_policy_violations_total{mode="deny",rule="gpu-quantity"}' in text
    assert "gpu_policy_review_seconds_bucket" in text


def test_tls_is_verified_for_the_service_name(server: Server) -> None:
    import ssl

    wrong = server.client(service="other")
    with pytest.raises(ssl.SSLCertVerificationError):
        wrong.get("/healthz")
    assert server.client(namespace="gpu-policy").get("/healthz").status == 200


def test_tls_1_1_is_refused(server: Server) -> None:
    import socket
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    except ValueError:
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    with socket.create_connection(("127.0.0.1", server.port)) as sock, pytest.raises(ssl.SSLError):
        ctx.wrap_socket(sock, server_hostname="gpu-policy.gpu-policy.svc")


def test_modes_warn_and_audit(start_server) -> None:
    s = start_server({"rules": {"gpu-quantity": "warn", "no-privileged-gpu": "audit", "no-visible-devices-env": "off"}})
    api = s.client()
    obj = pod(container("t", gpu="1.5", privileged=True, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
    response = api.validate(obj)
    assert response["allowed"] is True
    assert response["warnings"][0].startswith('would violate GPU policy: gpu-quantity (container "t"')
    assert all(len(w) <= 256 for w in response["warnings"])
    assert list(response["auditAnnotations"]) == ["no-privileged-gpu"]
    api.close()


def test_unknown_cluster_version_skips_ld_library_path(start_server) -> None:
    s = start_server(None, "--cluster-version", "unknown")
    api = s.client()
    _response, patched = api.mutate(pod(container(gpu="1")))
    assert "env" not in patched["spec"]["containers"][0]  # no LD_LIBRARY_PATH, and a GPU container is left alone
    api.close()


def test_new_ephemeral_containers_are_isolated(api: ApiServer) -> None:
    running = pod(container("train", gpu="1", request="1"), ephemeralContainers=[container("earlier")])
    debugged = json.loads(json.dumps(running))
    debugged["spec"]["ephemeralContainers"].append(container("debugger", image="busybox"))
    response, patched = api.mutate(debugged, operation="UPDATE", old=running, sub_resource="ephemeralcontainers")
    ops = json.loads(base64.b64decode(response["patch"]))
    assert ops == [
        {
            "op": "add",
            "path": "/spec/ephemeralContainers/1/env",
            "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        },
    ]
    assert "env" not in patched["spec"]["ephemeralContainers"][0]
    assert api.validate(patched, operation="UPDATE", old=running, sub_resource="ephemeralcontainers")["allowed"]


def test_a_malformed_old_object_on_the_subresource_is_no_500(api: ApiServer, server: Server) -> None:
    """Issue 33: oldObject.spec.ephemeralContainers as a number once made a traceback and a 500."""
    debugged = pod(container("train", gpu="1"), ephemeralContainers=[container("debugger", image="busybox")])
    since = len(server.log_problems())
    for junk in (7, "x", {"a": 1}, None):
        old = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"ephemeralContainers": junk}}
        response, patched = api.mutate(debugged, operation="UPDATE", old=old, sub_resource="ephemeralcontainers")
        assert response["allowed"] is True
        assert patched["spec"]["ephemeralContainers"][0]["env"] == [VOID]
    assert server.log_problems()[since:] == []


def test_sigterm_drains_before_closing(start_server) -> None:
    import signal
    import time

    s = start_server({"clusterVersion": "unknown", "server": {"drainSeconds": 1.5}})
    api = s.client()
    assert api.get("/readyz").status == 200
    started = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    # Not ready any more, but still answering reviews on the open connection and on new ones.
    assert api.get("/readyz").status == 503
    assert api.validate(pod(container(gpu="1.5")))["allowed"] is False
    fresh = s.client()
    assert fresh.validate(pod(container()))["allowed"] is True
    assert s.proc.wait(10) == 0
    assert time.monotonic() - started >= 1.4
    api.close()
    fresh.close()


def test_opt_out_label_and_annotation_never_skip_isolation(api: ApiServer) -> None:
    # What a pod author controls (labels, annotations) turns off conveniences at most.
    obj = pod(container("app"), container("trainer", gpu=1))
    obj["metadata"]["labels"] = {"gpu-policy.io/mutate": "false"}
    obj["metadata"]["annotations"] = {"gpu-policy.io/mutate": "false"}
    response, patched = api.mutate(obj)
    assert response["allowed"] is True
    app, trainer = patched["spec"]["containers"]
    assert app["env"] == [VOID]
    assert "env" not in trainer  # the annotation skips ld-library-path here, never isolation
    assert "nodeSelector" not in patched["spec"]  # and the default GPU model


def test_unpoliced_kind_with_gpus_is_allowed_with_a_notice(api: ApiServer) -> None:
    obj = {
        "apiVersion": "workflows.example.com/v1",
        "kind": "Pipeline",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"steps": [{"container": {"image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}}]},
    }
    response = api.validate(obj)
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert "does not police Pipeline (workflows.example.com)" in warning
    assert "containers: ['spec.steps[*].container']" in warning
    obj["spec"]["steps"][0]["container"]["resources"] = {"limits": {"cpu": 1}}
    assert "warnings" not in api.validate(obj)
