from pathlib import Path

import pytest

from webhook.config import DEFAULTS, ConfigError, from_mapping, load, parse_version
from webhook.policy import ALL_RULES, RULE_IDS


def problems(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        from_mapping(data, environ={})
    return info.value.problems


def test_defaults() -> None:
    s = from_mapping({}, environ={})
    # Kubernetes' own, and NVIDIA's node agents: the GPU operator (also as OpenShift installs it),
    # the standalone device plugin, the DRA driver.
    nvidia = {"gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu"}
    others = {"kube-amd-gpu", "inteldeviceplugins-system"}  # the AMD GPU operator's, Intel's operator
    assert s.policy.exempt_namespaces == {"kube-system", "kube-public", "kube-node-lease"} | nvidia | others
    assert all(s.policy.mode(r.id) is r.default_mode for r in ALL_RULES)  # the registry's defaults
    assert s.policy.isolate_non_gpu is True and s.policy.custom_templates == {}
    assert s.cluster_version_auto and s.policy.cluster_version is None
    # 2 x 6 x etcd's 1.5 MiB + 1 MiB (webhook.config.defaults; tests/test_review_size.py)
    assert s.policy.shared_gpu and s.server.max_request_bytes == 19 * 1024 * 1024
    assert s.server.max_connections == 1000 and s.server.max_inflight_bytes == 38 * 1024 * 1024
    assert set(DEFAULTS["rules"]) == set(RULE_IDS)


def test_own_namespace_is_always_exempt() -> None:
    assert "gpu-policy" in from_mapping({}, environ={"POD_NAMESPACE": "gpu-policy"}).policy.exempt_namespaces
    s = from_mapping({"webhookNamespace": "gp", "exemptNamespaces": []}, environ={"POD_NAMESPACE": "x"})
    assert s.policy.exempt_namespaces == frozenset({"gp"})


def test_unknown_keys_are_errors_with_suggestions() -> None:
    assert problems({"sharedGPU": True}) == ["sharedGPU: unknown key (did you mean sharedGpu?)"]
    assert problems({"ldLibraryPath": {"paht": "/x"}}) == [
        "ldLibraryPath.paht: unknown key (did you mean ldLibraryPath.path?)"
    ]
    assert problems({"rules": {"gpu-quantiti": "warn"}}) == [
        "rules.gpu-quantiti: unknown key (did you mean rules.gpu-quantity?)"
    ]
    assert problems({"whatever": 1}) == ["whatever: unknown key"]


def test_every_bad_value_is_reported_at_once() -> None:
    found = problems(
        {
            "rules": {"gpu-quantity": "block"},
            "sharedGpu": "yes",
            "exemptNamespaces": ["Kube_System"],
            "clusterVersion": 1.27,
            "ldLibraryPath": {"whenUnset": "maybe", "path": "relative"},
            "acceleratorNodeSelector": {"labelKey": "bad key!"},
            "server": {"maxRequestBytes": 10, "certReloadSeconds": 0},
        }
    )
    assert found == [
        "rules.gpu-quantity: must be one of deny, warn, audit, off, got 'block'",
        "sharedGpu: must be true or false, got str 'yes'",
        "exemptNamespaces[0]: 'Kube_System' is not a namespace name",
        'clusterVersion: must be "auto", "unknown" or a version such as "1.27", got float 1.27',
        "ldLibraryPath.path: 'relative' must be an absolute path without ':'",
        "ldLibraryPath.whenUnset: must be inject or warn, got 'maybe'",
        "acceleratorNodeSelector.labelKey: 'bad key!' is not a valid label key",
        "server.maxRequestBytes: must be at least 65536 (admission bodies reach several MiB)",
        "server.certReloadSeconds: must be between 0 and 3600",
    ]


def test_wrong_section_types() -> None:
    assert problems({"ldLibraryPath": True}) == ["ldLibraryPath: must be a mapping, got bool True"]
    assert problems(["a"]) == ["must be a mapping of keys, got list"]
    assert problems({"sharedGpu": 1}) == ["sharedGpu: must be true or false, got int 1"]
    assert problems({"server": {"maxConnections": 0, "maxInflightBytes": 65536}}) == [
        "server.maxConnections: must be at least 1",
        "server.maxInflightBytes: must be at least server.maxRequestBytes (19922944)",
    ]
    assert problems({"server": {"maxRequestBytes": True}}) == [
        "server.maxRequestBytes: must be an integer, got bool True"
    ]


def test_unknown_keys_and_bad_values_are_reported_together() -> None:
    assert problems({"sharedGPU": True, "sharedGpu": "yes", "server": {"bodySecond": 5, "idleSeconds": -1}}) == [
        "sharedGPU: unknown key (did you mean sharedGpu?)",
        "server.bodySecond: unknown key (did you mean server.bodySeconds?)",
        "sharedGpu: must be true or false, got str 'yes'",
        "server.idleSeconds: must be between 0.1 and 3600",
    ]


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("1.27", (1, 27)),
        ("v1.28.0", (1, 28)),
        ("v1.19.10-r0-CCE21.11.1.B006", (1, 19)),
        ("v1.17.9-r0-CCE20.7.1.B003-17.36.3", (1, 17)),
        ("v1.28.3-eks-4f4795d", (1, 28)),
        ("v1.30.4-r0", (1, 30)),
        ("17+", None),
        ("latest", None),
        ("", None),
    ],
)
def test_versions_from_git_version(text: str, version: tuple[int, int] | None) -> None:
    assert parse_version(text) == version


def test_cluster_version_values() -> None:
    assert from_mapping({"clusterVersion": "v1.27.3-r0-CCE"}, environ={}).policy.cluster_version == (1, 27)
    unknown = from_mapping({"clusterVersion": "unknown"}, environ={})
    assert unknown.policy.cluster_version is None and not unknown.cluster_version_auto
    assert problems({"clusterVersion": "soon"}) == [
        'clusterVersion: \'soon\' is not "auto", "unknown" or a version such as "1.27"'
    ]


def test_load_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("rules: [\n")
    with pytest.raises(ConfigError) as info:
        load(bad)
    assert str(info.value).startswith(f"{bad}: not valid YAML")
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "missing.yaml")
    assert "cannot read file" in str(info.value)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load(empty, environ={}).policy.shared_gpu is True


def test_device_resources_are_names_or_one_star_patterns() -> None:
    assert from_mapping({"gpuDeviceResources": ["amd.com/gpu", "nvidia.com/mig-*"]}, environ={}).policy.device_resources
    with pytest.raises(ConfigError) as info:
        from_mapping({"gpuDeviceResources": ["nvidia.com/**", 3, "not a name"]}, environ={})
    assert [p.split(":")[0] for p in info.value.problems] == [
        "gpuDeviceResources[0]",
        "gpuDeviceResources[1]",
        "gpuDeviceResources[2]",
    ]


def test_gpu_model_integrations_and_exemptions() -> None:
    s = from_mapping(
        {
            "gpuSharedResources": ["example.com/*.slot"],
            "gpuCompanionResources": [],
            "integrations": {"kai": {"enabled": True, "schedulerNames": ["kai"]}, "xgpu": {"enabled": True}},
            "exemptServiceAccounts": ["monitoring/dcgm-exporter"],
            "exemptUsernames": ["system:serviceaccount:gpu-operator:gpu-operator"],
        },
        environ={},
    )
    p = s.policy
    assert p.shared_resources == ("example.com/*.slot",)
    assert all(name.startswith(("amd.com/", "gpu.intel.com/")) for name in p.companion_resources)  # vendors' own
    assert p.kai and p.kai_schedulers == frozenset({"kai"}) and p.xgpu and not p.hami
    assert p.exempt_service_accounts == frozenset({"monitoring/dcgm-exporter"})
    assert "system:serviceaccount:gpu-operator:gpu-operator" in p.exempt_usernames
    with pytest.raises(ConfigError) as info:
        from_mapping(
            {
                "gpuSharedResources": ["*.shared"],
                "integrations": {"kai": {"enabled": "yes"}},
                "exemptServiceAccounts": ["dcgm-exporter"],
                "exemptUsernames": [""],
                "nodeAgentImages": "nvcr.io/nvidia/",
            },
            environ={},
        )
    assert sorted(p.split(":")[0] for p in info.value.problems) == [
        "exemptServiceAccounts[0]",
        "exemptUsernames[0]",
        "gpuSharedResources[0]",
        "integrations.kai.enabled",
        "nodeAgentImages",
    ]
    with pytest.raises(ConfigError) as info:
        from_mapping({"integrations": {"kai": {"schedulers": []}, "hamI": {}}}, environ={})
    assert info.value.problems == [
        "integrations.kai.schedulers: unknown key (did you mean integrations.kai.schedulerNames?)",
        "integrations.hamI: unknown key (did you mean integrations.hami?)",
    ]


def test_cluster_view_and_device_classes() -> None:
    s = from_mapping({}, environ={})
    assert s.server.cluster_view and s.policy.cluster is None  # on when a cluster is reachable; no view until synced
    assert s.policy.gpu_device_classes == frozenset(
        {"gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "gpu.intel.com", "gpu-vfio.intel.com"}
    )
    assert not from_mapping({"server": {"clusterView": "off"}}, environ={}).server.cluster_view
    assert problems({"server": {"clusterView": True}, "gpuDeviceClasses": ["gpu.nvidia.com", "Bad_Class", ""]}) == [
        "gpuDeviceClasses[1]: 'Bad_Class' is not a DeviceClass name",
        "gpuDeviceClasses[2]: must be a non-empty string, got ''",
        "server.clusterView: must be auto or off, got True",
    ]
