"""End to end from the chart's own output: rendered certificate, config and webhook configurations
drive the real server, and the API server is played from exactly what the chart rendered."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from tests.apiserver import ApiServer
from tests.chart import find, render
from tests.helpers import container, pod, wrap


def test_rendered_chart_drives_the_real_server(start_server, tmp_path: Path) -> None:
    docs = render(
        {"policy": {"clusterVersion": "v1.27.9-r0-CCE23.5.1", "acceleratorNodeSelector": {"default": "nvidia-t4"}}},
        namespace="platform",
        release="gp",
        tmp=tmp_path,
    )
    assert isinstance(docs, list)
    secret = find(docs, "Secret")
    cert_dir = tmp_path / "tls"
    cert_dir.mkdir()
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (cert_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
    config = yaml.safe_load(find(docs, "ConfigMap")["data"]["config.yaml"])
    deployment = find(docs, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--config=/etc/gpu-policy/config/config.yaml" in args and "--cert-dir=/etc/gpu-policy/tls" in args

    server = start_server(config, certs_from=cert_dir, service=("gp-gpu-policy", "platform"))

    def client(hook: dict) -> tuple[ApiServer, str]:
        cc = hook["clientConfig"]
        ca = tmp_path / f"{hook['name']}.ca.crt"
        ca.write_bytes(base64.b64decode(cc["caBundle"]))
        svc = cc["service"]
        return ApiServer(server.port, str(ca), service=svc["name"], namespace=svc["namespace"]), svc["path"]

    (mutating,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    pods_hook, report_hook, workloads_hook = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert report_hook["name"] == "pods-report.validate.gpu-policy.io" and report_hook["failurePolicy"] == "Ignore"

    api, path = client(mutating)
    assert api.host == "gp-gpu-policy.platform.svc"
    review = api.build(pod(container("train", gpu="1")))
    response = api.review(path, review)
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    _, patched = api.mutate(pod(container("train", gpu="1")))
    assert patched["spec"]["nodeSelector"] == {"accelerator": "nvidia-t4"}
    assert patched["spec"]["containers"][0]["env"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},  # nothing of AMD's: no AMD runtime
    ]

    api, path = client(pods_hook)
    denied = api.review(path, api.build(pod(container("t", gpu="1", privileged=True))))
    assert denied["allowed"] is False and "no-privileged-gpu" in denied["status"]["message"]
    assert api.review(path, api.build(patched))["allowed"] is True
    # The release namespace is exempt in the server too, not only in the namespaceSelector.
    own = pod(container("t", gpu="1", privileged=True), namespace="platform")
    assert api.review(path, api.build(own))["allowed"] is True

    api, path = client(workloads_hook)
    bad_job = wrap(pod(container(gpu="2", request="1")), "CronJob")
    response = api.review(path, api.build(bad_job))
    assert (
        response["allowed"] is False
        and "spec.jobTemplate.spec.template.spec.containers[0]" in (response["status"]["message"])
    )
