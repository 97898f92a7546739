"""Issue 35: the object rules' CEL twins (gpu-limitrange, gpu-quota-advice, dra-admin-access) as
ValidatingAdmissionPolicies of their own, and their agreement with the webhook.

The chart renders each object rule's twin (rule.ObjectRule.native) as one policy on its kinds,
bound with the rule's mode. cel-python evaluates it as the API server does (tests/celnative.py).
Every LimitRange, ResourceQuota, ResourceClaim and ResourceClaimTemplate below (the corpus's, and
the shapes built from each kind's fields and the GPU model's names), in three configurations and
one of four requesters in turn, gets the same verdict from the twin as from the webhook's /validate, and the
first finding's sentence is the webhook's: the API server serialises a map sorted by key, so the
objects are judged that way (`served`). tests/test_real_apiserver.py runs the same policies in a
real API server.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from tests.apiserver import ApiServer
from tests.celnative import ValidatingPolicy, compile_objects, request
from webhook.admission import validate
from webhook.admission.review import parse
from webhook.config import from_mapping
from webhook.offline.native import Native
from webhook.policy import OBJECT_RULES, Mode
from webhook.policy.engine import DENY_PREFIX, WARN_PREFIX

ROOT = Path(__file__).parent
Compiled = dict[str, tuple[ValidatingPolicy, list[str]]]

CONFIGS: dict[str, dict[str, Any]] = {
    "shipped": {},
    "every rule, MIG patterns, one vendor": {
        "rules": {"gpu-limitrange": "warn", "gpu-quota-advice": "warn", "dra-admin-access": "deny"},
        "gpuDeviceResources": ["nvidia.com/mig-*"],
        "vendors": {"amd": {"enabled": False}, "intel": {"enabled": True}},
        "draAdminAccessNamespaces": ["monitoring"],
        "exemptUsernames": ["ops"],
    },
    "renamed GPU, audit": {
        "gpuResourceName": "example.com/gpu",
        "rules": {"gpu-limitrange": "audit", "gpu-quota-advice": "deny", "dra-admin-access": "warn"},
        "exemptNamespaces": ["kube-system", "team-exempt"],
    },
}
# (namespace, user): a plain team, a listed DRA namespace, an exempt namespace, an exempt user.
REQUESTERS = (("team-a", "alice"), ("monitoring", "alice"), ("team-exempt", "alice"), ("team-a", "ops"))

NAMES = (
    "cpu",
    "memory",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/gpu.shared",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "example.com/gpu",
    "example.com/fpga",
    "hugepages-2Mi",
)


def limitranges() -> list[dict[str, Any]]:
    out = []
    for first, second in itertools.combinations_with_replacement(NAMES, 2):
        item = {"type": "Container", "default": {first: "1", second: "500m"}}
        out.append({"spec": {"limits": [{"type": "Pod", "max": {"cpu": "4"}}, item]}})
    for name in NAMES:
        out.append({"spec": {"limits": [{"type": "Container", "defaultRequest": {name: "0"}, "max": {name: "2"}}]}})
    out.append({"spec": {"limits": [{"type": "Container", "default": {n: "1" for n in NAMES}, "defaultRequest": {}}]}})
    out.append({"spec": {"limits": [{"type": "Container", "defaultRequest": {"nvidia.com/gpu": "1"}}]}})
    out.append({"spec": {"limits": []}})
    return [{"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": f"lr-{i}"}, **o} for i, o in enumerate(out)]


def quotas() -> list[dict[str, Any]]:
    keys = [
        *NAMES,
        *(f"limits.{n}" for n in NAMES),
        *(f"requests.{n}" for n in NAMES),
        "pods",
        "count/pods",
        "limits.",
    ]
    out = [{"spec": {"hard": {key: "4"}}} for key in keys]
    out += [{"spec": {"hard": {a: "2", b: "8"}}} for a, b in itertools.combinations(keys[::4], 2)]
    out.append({"spec": {"hard": {}}})
    out.append({"spec": {"scopes": ["BestEffort"]}})
    meta = [{"name": f"q-{i}"} for i in range(len(out))]
    return [{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": m, **o} for m, o in zip(meta, out, strict=True)]


def claims() -> list[dict[str, Any]]:
    def v1(admin: bool | None) -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
        if admin is not None:
            exactly["adminAccess"] = admin
        return {"exactly": exactly}

    def v1beta1(admin: bool | None) -> dict[str, Any]:
        return {"deviceClassName": "gpu.nvidia.com", **({} if admin is None else {"adminAccess": admin})}

    out = []
    for version, request_of in (("v1", v1), ("v1beta1", v1beta1)):
        for flags in itertools.product((None, False, True), repeat=2):
            requests = [{"name": f"r{i}", **request_of(flag)} for i, flag in enumerate(flags)]
            spec = {"devices": {"requests": requests}}
            out.append((version, "ResourceClaim", spec))
            out.append((version, "ResourceClaimTemplate", {"spec": spec}))
        first = {"name": "pick", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}
        out.append((version, "ResourceClaim", {"devices": {"requests": [first, {"name": "r", **request_of(True)}]}}))
    out.append(("v1", "ResourceClaim", {"devices": {}}))
    out.append(("v1", "ResourceClaimTemplate", {"spec": {}}))
    return [
        {
            "apiVersion": f"resource.k8s.io/{version}",
            "kind": kind,
            "metadata": {"name": f"c-{i}"},
            "spec": spec,
        }
        for i, (version, kind, spec) in enumerate(out)
    ]


def from_corpus() -> list[dict[str, Any]]:
    kinds = {kind for r in OBJECT_RULES for _group, kind, _plural in r.kinds}
    out = []
    for path in sorted([*(ROOT / "corpus").glob("*.yaml"), *(ROOT / "corpus-access").glob("*.yaml")]):
        out += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") in kinds]
    assert len(out) >= 3
    return out


OBJECTS = [*from_corpus(), *limitranges(), *quotas(), *claims()]


def served(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """`obj` as the API server hands it to admission: its namespace the request's, every map's keys
    sorted (how Go serialises a map), every quantity a string."""
    obj = json.loads(json.dumps(obj, sort_keys=True))
    obj.setdefault("metadata", {})["namespace"] = namespace
    return obj


class Cache:
    by_config: ClassVar[dict[str, Compiled]] = {}


def twins(name: str, tmp: Path) -> Compiled:
    if name not in Cache.by_config:
        config = CONFIGS[name]
        Cache.by_config[name] = compile_objects({"policy": config} if config else {}, tmp)
    return Cache.by_config[name]


def test_each_object_rule_on_is_installed_with_its_action(tmp_path: Path) -> None:
    from webhook.policy.cel import ACTIONS

    for name, config in CONFIGS.items():
        policy = from_mapping({"clusterVersion": "1.36", **config}, environ={}).policy
        expected = {
            r.id: [ACTIONS[policy.mode(r.id)]]
            for r in OBJECT_RULES
            if r.native is not None and policy.mode(r.id) is not Mode.OFF
        }
        assert {rule: actions for rule, (_vap, actions) in twins(name, tmp_path).items()} == expected, name
    assert all(r.native is not None for r in OBJECT_RULES)  # every object rule has a twin


@pytest.mark.parametrize("config", list(CONFIGS))
def test_object_twins_agree_with_the_webhook(config: str, tmp_path: Path) -> None:
    compiled = twins(config, tmp_path)
    policy = from_mapping({"clusterVersion": "1.36", **CONFIGS[config]}, environ={}).policy
    fired: dict[str, int] = {}
    compared = 0
    # Each object once, by a requester in turn (the exemptions are conditions before any check).
    for i, obj in enumerate(OBJECTS):
        namespace, user = REQUESTERS[i % len(REQUESTERS)]
        stored = served(obj, namespace)
        group = stored["apiVersion"].rpartition("/")[0]
        review = ApiServer.build(stored, namespace=namespace, user=user)
        outcome = validate(parse(review), policy)
        found = [v for vs in outcome.verdict.by_mode.values() for v in vs] if outcome.verdict else []
        failures = {
            rule: vap.failures(stored, {**request(namespace, user), "kind": {"group": group, "kind": stored["kind"]}})
            for rule, (vap, _actions) in compiled.items()
        }
        compared += 1
        for rule, messages in failures.items():
            mine = [v for v in found if v.rule == rule]
            assert bool(messages) == bool(mine), (config, namespace, user, stored, messages, mine)
            if mine:
                prefix = DENY_PREFIX if policy.mode(rule) is Mode.DENY else WARN_PREFIX
                assert messages == [prefix + mine[0].describe()], (config, stored)
                fired[rule] = fired.get(rule, 0) + 1
    assert compared == len(OBJECTS)
    # Each installed twin fires on some objects and lets others through.
    assert set(fired) == set(compiled), fired


def test_check_engine_cel_judges_objects_by_their_twins() -> None:
    """`gpu-policy check --engine cel` (webhook.offline.native.Native) gives an object the verdict
    the API server's policies give it, with the webhook's sentence."""
    from webhook.admission.review import Request

    policy = from_mapping({"clusterVersion": "1.36", **CONFIGS["every rule, MIG patterns, one vendor"]}).policy
    native = Native.of(policy)
    assert {kind for _group, kind in native.objects} == {
        "LimitRange",
        "ResourceQuota",
        "ResourceClaim",
        "ResourceClaimTemplate",
    }
    for obj in OBJECTS:
        stored = served(obj, "team-a")
        req = parse(ApiServer.build(stored, namespace="team-a", user="alice"))
        assert isinstance(req, Request)
        webhook, cel = validate(req, policy), native.validate(req)
        assert cel.decision == webhook.decision, stored
        if webhook.verdict is None:
            assert cel.verdict is None or not cel.verdict.by_mode, stored
            continue
        assert cel.verdict is not None
        for mode, found in webhook.verdict.by_mode.items():
            # A policy reports its first finding (one validation per rule), the webhook every one.
            first = {v.rule: v.describe() for v in reversed(found)}
            assert {v.rule: v.describe() for v in cel.verdict.of(mode)} == first, stored
