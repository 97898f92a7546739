"""The Helm chart, rendered by a real helm over a matrix of values and validated against Kubernetes schemas."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from tests.chart import CHART, PUSHED, find, helm, render
from webhook import certs
from webhook.config import DEFAULTS, from_mapping

KUBE_VERSIONS = ["1.27.0", "1.28.0", "1.30.0", "v1.28.3-eks-4f4795d", "v1.27.9-r0-CCE23.5.1"]
MODES = ["self-signed", "cert-manager", "provided"]
NOT_IN_K8S_SCHEMAS = {"cert-manager.io/v1"}


@pytest.fixture(scope="module")
def provided(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    bundle = certs.generate("gpu-policy", "gpu-policy")
    return {
        "mode": "provided",
        "existingSecret": "my-webhook-tls",
        "caBundle": base64.b64encode(bundle.ca_cert).decode(),
    }


def values_for(mode: str, provided: dict[str, Any]) -> dict[str, Any]:
    # The optional helm-test verify objects ride along, so they are validated in every mode.
    verify = {"tests": {"verify": {"enabled": True}}}
    if mode == "provided":
        return {"certificates": provided, **verify}
    return {"certificates": {"mode": mode}, **verify}


def schema_version(kube_version: str) -> str:
    major_minor = kube_version.lstrip("v").split("-")[0].rsplit(".", 1)[0]
    return f"{major_minor}.0"


def test_helm_lint_is_clean(tmp_path: Path) -> None:
    result = helm("lint", "--strict", str(CHART), "--set", f"image.repository={PUSHED}")
    assert "0 chart(s) failed" in result.stdout
    for ci in sorted((CHART / "ci").glob("*-values.yaml")):
        helm("lint", "--strict", str(CHART), "--values", str(ci))


def test_placeholder_image_fails_with_what_to_do(tmp_path: Path) -> None:
    result = render({"image": {}}, tmp=tmp_path, check=False)
    assert result.returncode != 0
    assert "image.repository is still the placeholder ghcr.io/gpu-policy/gpu-policy" in result.stderr
    assert "make image" in result.stderr
    docs = render({"image": {"allowPlaceholder": True}}, tmp=tmp_path)
    image = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/gpu-policy/gpu-policy:{chart_app_version()}"
    digest = "sha256:" + "a" * 64
    docs = render({"image": {"repository": PUSHED, "tag": "x", "digest": digest}}, tmp=tmp_path)
    assert find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == f"{PUSHED}@{digest}"


def chart_app_version() -> str:
    """The chart's appVersion, which `make generate` takes from pyproject.toml (the package version)."""
    import tomllib

    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert app == tomllib.loads((CHART.parent.parent / "pyproject.toml").read_text())["project"]["version"]
    return str(app)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("mode", MODES)
def test_matrix_renders_valid_objects(mode: str, kube_version: str, provided: dict[str, Any], tmp_path: Path) -> None:
    docs = render(values_for(mode, provided), kube_version=kube_version, tmp=tmp_path)
    assert isinstance(docs, list)
    version = schema_version(kube_version)
    for doc in docs:
        if doc["apiVersion"] in NOT_IN_K8S_SCHEMAS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)

    mutating = find(docs, "MutatingWebhookConfiguration")
    validating = find(docs, "ValidatingWebhookConfiguration")
    hooks = mutating["webhooks"] + validating["webhooks"]
    # matchConditions exactly where the cluster understands them; vendor suffixes must not drop them.
    # With them, the pods webhook has a fail-open twin for what only warn rules look at (issue 48).
    wants_conditions = schema_version(kube_version) >= "1.28.0"
    report = ["pods-report.validate.gpu-policy.io"] if wants_conditions else []
    assert [h["name"] for h in hooks] == [
        "mutate.gpu-policy.io",
        "pods.validate.gpu-policy.io",
        *report,
        "workloads.validate.gpu-policy.io",
    ]
    # The mutating webhook has none while isolate-non-gpu (default on) patches every pod.
    assert [("matchConditions" in h) for h in hooks] == [False, wants_conditions, *[True] * len(report), False]

    for hook in hooks:
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None" and hook["matchPolicy"] == "Equivalent"
        assert hook["timeoutSeconds"] <= 10
        service = hook["clientConfig"]["service"]
        assert service == {
            "name": "gpu-policy",
            "namespace": "gpu-policy",
            "port": 443,
            "path": "/mutate" if hook["name"].startswith("mutate") else "/validate",
        }
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["key"] == "kubernetes.io/metadata.name" and excluded["operator"] == "NotIn"
        assert {"gpu-policy", "kube-system", "kube-public", "kube-node-lease"} <= set(excluded["values"])
    assert mutating["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    assert [r["resources"] for r in mutating["webhooks"][0]["rules"]] == [["pods"], ["pods/ephemeralcontainers"]]
    assert any("limitranges" in r["resources"] for r in validating["webhooks"][-1]["rules"])
    assert [h["failurePolicy"] for h in hooks] == ["Ignore", "Fail", *["Ignore"] * len(report), "Ignore"]

    if mode == "cert-manager":
        for cfg in (mutating, validating):
            assert cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpu-policy/gpu-policy-tls"
            assert all("caBundle" not in h["clientConfig"] for h in cfg["webhooks"])
        cert = find(docs, "Certificate", "gpu-policy-tls")
        assert "gpu-policy.gpu-policy.svc" in cert["spec"]["dnsNames"]
        assert cert["spec"]["secretName"] == "gpu-policy-tls"
    else:
        bundles = {h["clientConfig"]["caBundle"] for h in hooks}
        assert len(bundles) == 1
        ca = x509.load_pem_x509_certificate(base64.b64decode(bundles.pop()))
        assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    if mode == "self-signed":
        secret = find(docs, "Secret", "gpu-policy-tls")
        leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "gpu-policy.gpu-policy.svc" in sans.get_values_for_type(x509.DNSName)
        assert secret["data"]["ca.crt"] == hooks[0]["clientConfig"]["caBundle"]
    secret_name = "my-webhook-tls" if mode == "provided" else "gpu-policy-tls"
    deployment = find(docs, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == secret_name


def test_deployment_is_hardened_and_highly_available(tmp_path: Path) -> None:
    docs = render(tmp=tmp_path)
    deployment = find(docs, "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "memory" in c["resources"]["limits"] and "cpu" in c["resources"]["requests"]
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    quota = find(docs, "ResourceQuota")
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-cluster-critical"]
    # The token is mounted only because clusterVersion is auto (/version) or the cluster view is on.
    assert pod["automountServiceAccountToken"] is True
    pinned = render({"policy": {"clusterVersion": "1.27", "server": {"clusterView": "off"}}}, tmp=tmp_path)
    assert find(pinned, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    single = render({"replicaCount": 1}, tmp=tmp_path)
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]


def test_rbac_is_least_privilege(tmp_path: Path) -> None:
    """tests/test_cluster_view.py checks these rules against what the server really asks."""
    role = find(render(tmp=tmp_path), "ClusterRole")
    assert role["rules"] == [
        {"nonResourceURLs": ["/version", "/version/"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["deviceclasses", "resourceclaims", "resourceclaimtemplates"],
            "verbs": ["list", "watch"],
        },
    ]
    off = {"policy": {"clusterVersion": "1.30", "server": {"clusterView": "off"}}}
    docs = render(off, tmp=tmp_path)
    assert find(docs, "ClusterRole")["rules"] == [{"nonResourceURLs": ["/version", "/version/"], "verbs": ["get"]}]
    assert find(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_release_namespace_cannot_be_removed_from_exclusions(tmp_path: Path) -> None:
    docs = render(
        {
            "webhook": {
                "excludedNamespaces": [],
                "namespaceSelectorExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}],
            }
        },
        namespace="platform",
        tmp=tmp_path,
    )
    for hook in find(docs, "ValidatingWebhookConfiguration")["webhooks"]:
        exprs = hook["namespaceSelector"]["matchExpressions"]
        assert exprs[0]["values"] == ["platform"]
        assert exprs[1] == {"key": "team", "operator": "In", "values": ["ml"]}


def test_rendered_policy_config_is_accepted_by_the_server(tmp_path: Path) -> None:
    docs = render(
        {
            "policy": {
                "rules": {"gpu-quantity": "warn"},
                "exemptNamespaces": ["batch-system"],
                "acceleratorNodeSelector": {"default": "nvidia-t4"},
            }
        },
        namespace="gp",
        tmp=tmp_path,
    )
    config = yaml.safe_load(find(docs, "ConfigMap")["data"]["config.yaml"])
    settings = from_mapping(config, environ={})
    assert settings.policy.mode("gpu-quantity") == "warn"
    assert {"gp", "batch-system", "kube-system", "gpu-operator"} <= settings.policy.exempt_namespaces
    assert settings.policy.accelerator_default == "nvidia-t4"


def test_values_schema_matches_config_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    policy = schema["properties"]["policy"]

    def keys(s: dict[str, Any], defaults: dict[str, Any]) -> None:
        assert set(s["properties"]) == set(defaults) - {"webhookNamespace"}
        for k, v in defaults.items():
            if isinstance(v, dict):
                keys(s["properties"][k], v)

    keys(policy, DEFAULTS)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)
    # Same defaults as the server, but exemptNamespaces: the chart adds webhook.excludedNamespaces to it.
    skip = {"webhookNamespace", "exemptNamespaces"}
    expected = {k: v for k, v in json.loads(json.dumps(DEFAULTS)).items() if k not in skip}
    assert {k: v for k, v in values["policy"].items() if k not in skip} == expected
    # One view of exemptions: `gpu-policy check` skips exactly the namespaces the chart excludes.
    assert DEFAULTS["exemptNamespaces"] == values["webhook"]["excludedNamespaces"]


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"webhook": {"timeoutSecond": 3}}, "timeoutSecond"),
        ({"replicaCount": "two"}, "replicaCount"),
        ({"policy": {"rules": {"gpu-quantity": "block"}}}, "gpu-quantity"),
        ({"policy": {"sharedGPU": True}}, "sharedGPU"),
        ({"certificates": {"mode": "magic"}}, "mode"),
        ({"webhook": {"validatingPods": {"failurePolicy": "fail"}}}, "failurePolicy"),
    ],
)
def test_schema_rejects_typos_and_wrong_types(values: dict[str, Any], fragment: str, tmp_path: Path) -> None:
    result = render(values, tmp=tmp_path, check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower() and fragment in result.stderr


def test_provided_mode_requires_secret_and_ca(tmp_path: Path) -> None:
    result = render({"certificates": {"mode": "provided", "caBundle": "eA=="}}, tmp=tmp_path, check=False)
    assert result.returncode != 0 and "certificates.existingSecret is required" in result.stderr
    result = render({"certificates": {"mode": "provided", "existingSecret": "s"}}, tmp=tmp_path, check=False)
    assert result.returncode != 0 and "certificates.caBundle" in result.stderr


def test_notes_warn_about_fail_open(tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "webhook": {"validatingPods": {"failurePolicy": "Ignore"}},
                "replicaCount": 1,
                "image": {"repository": PUSHED},
            }
        )
    )
    out = helm("install", "gp", str(CHART), "--dry-run=client", "--namespace", "ml", "--values", str(values)).stdout
    assert "WARNING: webhook.validatingPods.failurePolicy is Ignore" in out
    assert "WARNING: replicaCount is 1" in out
    assert "helm test gp -n ml" in out


def test_custom_resource_webhook_rules_are_opt_in(tmp_path: Path) -> None:
    def workload_groups(values: dict[str, Any], kube_version: str = "1.30.0") -> list[str]:
        docs = render(values, tmp=tmp_path, kube_version=kube_version)
        (hook,) = [
            h for h in find(docs, "ValidatingWebhookConfiguration")["webhooks"] if h["name"].startswith("workloads.")
        ]
        return [g for r in hook["rules"] for g in r["apiGroups"]]

    # The object rules' kinds (LimitRanges and quotas in "", DRA claims), unless the API server's
    # own policies judge them (enforcement native).
    assert workload_groups({}) == ["", "apps", "batch", "", "resource.k8s.io"]
    assert workload_groups({"enforcement": "native"}, "1.36.0") == ["", "apps", "batch"]
    groups = workload_groups(
        {
            "webhook": {
                "customResources": {"kubeflow": True, "jobset": True},
                "extraWorkloadRules": [
                    {
                        "apiGroups": ["train.example.com"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["trainers"],
                    }
                ],
            }
        }
    )
    objects = ["", "resource.k8s.io"]
    assert groups == ["", "apps", "batch", *objects, "kubeflow.org", "jobset.x-k8s.io", "train.example.com"]


def test_mutating_match_conditions_only_without_isolation(tmp_path: Path) -> None:
    docs = render({"policy": {"isolateNonGpu": False}}, tmp=tmp_path)
    assert "matchConditions" in find(docs, "MutatingWebhookConfiguration")["webhooks"][0]


@pytest.mark.parametrize("opt_out_label", [True, False])
def test_no_label_lets_a_pod_skip_isolation(opt_out_label: bool, tmp_path: Path) -> None:
    # A label is set by whoever writes the pod: while isolation is on, nothing in the mutating
    # webhook's selectors may depend on a label the pod carries.
    docs = render({"webhook": {"mutating": {"optOutLabel": opt_out_label}}}, tmp=tmp_path)
    (hook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert "objectSelector" not in hook
    assert "matchConditions" not in hook  # isolation applies to every pod
    # Without isolation the label only skips conveniences, so it is honoured when asked for.
    docs = render(
        {"policy": {"isolateNonGpu": False}, "webhook": {"mutating": {"optOutLabel": opt_out_label}}}, tmp=tmp_path
    )
    (hook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert ("objectSelector" in hook) is opt_out_label


def test_pods_roll_only_for_settings_a_running_server_cannot_reload(tmp_path: Path) -> None:
    def checksum(values: dict[str, Any]) -> str:
        docs = render(values, tmp=tmp_path)
        annotations = find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/server-config"])

    shipped = checksum({})
    assert checksum({"policy": {"rules": {"no-privileged-gpu": "warn"}, "isolateNonGpu": False}}) == shipped
    assert checksum({"policy": {"server": {"drainSeconds": 10}}}) != shipped


def test_network_policy_opens_the_webhook_port_and_metrics_only_to_named_namespaces(tmp_path: Path) -> None:
    assert not [d for d in render(tmp=tmp_path) if d["kind"] == "NetworkPolicy"]  # off by default
    values = {"networkPolicy": {"enabled": True, "metricsNamespaces": ["monitoring", "observability"]}}
    docs = render(values, tmp=tmp_path)
    policy = find(docs, "NetworkPolicy")
    kubernetes_validate.validate(policy, schema_version("1.30.0"), strict=True)
    deployment = find(docs, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress: the API server must stay reachable
    webhook, metrics = policy["spec"]["ingress"]
    assert "from" not in webhook and webhook["ports"] == [{"port": "https", "protocol": "TCP"}]
    sources = [peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for peer in metrics["from"]]
    assert sources == ["monitoring", "observability"] and metrics["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    # No namespaces named: no metrics rule at all (an empty `from` would admit every source).
    docs = render({"networkPolicy": {"enabled": True}}, tmp=tmp_path)
    assert [list(rule) for rule in find(docs, "NetworkPolicy")["spec"]["ingress"]] == [["ports"]]


def test_client_ca_mounts_the_ca_passes_it_and_moves_the_probes(tmp_path: Path) -> None:
    """server.clientCA.configMap: the CA is mounted and given to `serve --client-ca`, and the
    probes (the kubelet presents no client certificate) go to the plain metrics port; without a
    metrics port the render fails saying why. Unset: nothing changes."""
    docs = render({"server": {"clientCA": {"configMap": "apiserver-client-ca"}}}, tmp=tmp_path)
    assert isinstance(docs, list)
    deployment = find(docs, "Deployment")
    kubernetes_validate.validate(deployment, schema_version("1.30.0"), strict=True)
    pod_spec = deployment["spec"]["template"]["spec"]
    (webhook,) = pod_spec["containers"]
    assert "--client-ca=/etc/gpu-policy/client-ca/ca.crt" in webhook["args"]
    assert {"name": "client-ca", "mountPath": "/etc/gpu-policy/client-ca", "readOnly": True} in webhook["volumeMounts"]
    assert {"name": "client-ca", "configMap": {"name": "apiserver-client-ca"}} in pod_spec["volumes"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert webhook[probe]["httpGet"]["port"] == "metrics" and webhook[probe]["httpGet"]["scheme"] == "HTTP"
    plain = render({}, tmp=tmp_path)
    assert isinstance(plain, list)
    (default,) = find(plain, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--client-ca") for a in default["args"])
    assert default["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    failed = render(
        {"server": {"clientCA": {"configMap": "apiserver-client-ca"}, "metricsPort": 0}}, tmp=tmp_path, check=False
    )
    assert isinstance(failed, subprocess.CompletedProcess) and failed.returncode != 0
    assert "server.clientCA needs server.metricsPort" in failed.stderr


# What the server refuses at start-up, Helm refuses at install: values.schema.json's `policy` is the
# config's own schema (webhook.config.schema), so the two cannot drift apart.
REFUSED_BY_BOTH = [
    ({"server": {"clusterVersionSeconds": 0.5}}, "server.clusterVersionSeconds: must be 0 or between 1 and 86400"),
    ({"server": {"certReloadSeconds": 0}}, "server.certReloadSeconds: must be between 0 and 3600"),
    ({"exemptNamespaces": ["Kube_System"]}, "exemptNamespaces[0]: 'Kube_System' is not a namespace name"),
    # `$` is the end of the text, as in Helm's Go regexp (Python's own `$` also matches before a final newline)
    ({"exemptNamespaces": ["kube-system\n"]}, "exemptNamespaces[0]: 'kube-system\\n' is not a namespace name"),
    ({"gpuResourceName": "nvidia.com/gpu\n"}, "gpuResourceName: 'nvidia.com/gpu\\n' is not a valid resource name"),
    ({"gpuResourceName": "bad name!"}, "gpuResourceName: 'bad name!' is not a valid resource name"),
    ({"acceleratorNodeSelector": {"labelKey": "bad key!"}}, "acceleratorNodeSelector.labelKey: 'bad key!' is not"),
    ({"optOutAnnotation": "a/b/c"}, "optOutAnnotation: 'a/b/c' is not a valid annotation key"),
    ({"clusterVersion": "soon"}, "clusterVersion: 'soon' is not \"auto\""),
    ({"ldLibraryPath": {"path": "relative"}}, "ldLibraryPath.path: 'relative' must be an absolute path"),
    ({"gpuMaxPerPod": 0}, "gpuMaxPerPod: must be at least 1"),
    ({"gpuDeviceClasses": ["Bad_Class"]}, "gpuDeviceClasses[0]: 'Bad_Class' is not a DeviceClass name"),
    ({"exemptServiceAccounts": ["dcgm"]}, "exemptServiceAccounts[0]: 'dcgm' is not namespace/name"),
    ({"gpuNodeLabels": [""]}, "gpuNodeLabels[0]: must be a non-empty string, got ''"),
    ({"rules": {"gpu-quantity": "block"}}, "rules.gpu-quantity: must be one of deny, warn, audit, off, got 'block'"),
    ({"gpuNamespaceSelector": {"matchExpressions": [{"key": "a"}]}}, "gpuNamespaceSelector.matchExpressions[0]: "),
    ({"customResources": [{"kind": "X"}]}, "customResources[0]: needs templates, podSpecs or containers"),
]


@pytest.mark.parametrize(("policy", "problem"), REFUSED_BY_BOTH, ids=[p for _, p in REFUSED_BY_BOTH])
def test_the_server_and_helm_refuse_the_same_config(policy: dict[str, Any], problem: str, tmp_path: Path) -> None:
    from webhook.config import ConfigError

    with pytest.raises(ConfigError) as info:
        from_mapping(policy, environ={})
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems
    result = render({"policy": policy}, tmp=tmp_path, check=False)
    assert isinstance(result, subprocess.CompletedProcess)
    assert result.returncode != 0 and "schema" in result.stderr.lower(), result.stderr


def test_every_schema_keyword_has_words() -> None:
    """Each constraint the config schema uses is one webhook.config.schema puts into words (no
    message falls back to naming a JSON Schema keyword)."""
    from webhook.config.schema import config_schema

    said = {"type", "enum", "pattern", "minLength", "maxLength", "minimum", "exclusiveMinimum", "maximum", "not"}
    structure = {"properties", "additionalProperties", "items", "required", "anyOf", "minItems", "$schema"}

    def keywords(node: Any, deeper: bool = False) -> set[str]:
        if not isinstance(node, dict):
            return set()
        deeper = deeper or bool(node.get("x-deeper"))
        own = set() if deeper else {k for k in node if not k.startswith("x-")}
        inner = [*node.get("properties", {}).values()]  # not "not": its error is the "not" keyword's
        inner += [node[k] for k in ("items", "additionalProperties") if isinstance(node.get(k), dict)]
        return own.union(*(keywords(n, deeper) for n in inner))

    assert keywords(config_schema()) - said - structure == set()
