"""Issue 48 against a REAL kube-apiserver v1.36 (tests/realapi.py; skipped where it is absent): the
outage, for the workloads that have nothing to do with GPUs. The default chart's webhook
configurations are registered in each enforcement mode, pointed at a port where no replica answers,
with the native policies the mode installs; every pod of tests/corpus-harm, as its controller makes
it (DaemonSet pods with their node affinity) and moved out of every exempt namespace, is created
with dryRun: none may be refused ("failed calling webhook" or a policy). The stand-in
(tests/test_corpus_harm.py) evaluates the same conditions with cel-python; this is the API server's
own CEL, its own defaulting and validation before the webhooks, and its own failurePolicy.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chart import render
from tests.realapi import SKIP, RealApi, available, free_port, running, webhook_configs
from tests.test_corpus_harm import pods

pytestmark = pytest.mark.skipif(not available(), reason=SKIP)
NATIVE = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
SAID: dict[str, str] = {}


@pytest.fixture(scope="module")
def real_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApi]:
    with running(tmp_path_factory.mktemp("kube136")) as client:
        yield client


@pytest.mark.parametrize("enforcement", ["webhook", "both", "native"])
def test_an_outage_refuses_no_non_gpu_workload(
    enforcement: str, real_api: RealApi, tmp_path: Path, cert_dir: Path
) -> None:
    docs = render({"enforcement": enforcement}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(docs, list)
    nobody = free_port()  # no replica answers here
    configs = webhook_configs(docs, nobody, (cert_dir / "ca.crt").read_bytes())
    created = real_api.create_all(configs, ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"))
    created += real_api.create_all(docs, NATIVE)
    try:
        # A GPU pod is refused while no replica answers (it asks for what a deny rule without a twin
        # judges): the outage is real, and the configurations took effect.
        gpu = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "gpu-", "namespace": "ml"},
            "spec": {
                "nodeName": "gpu-node-9",
                "containers": [{"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            },
        }
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            code, body, _ = real_api.create_pod(gpu)
            if code >= 400 and "failed calling webhook" in body.get("message", ""):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the webhooks never took effect: {code} {body.get('message')}")
        refused, other = [], []
        count = 0
        for name, made in pods():
            p = copy.deepcopy(made)
            p["metadata"] = {**p["metadata"], "generateName": "harm-", "namespace": "ml"}
            p["metadata"].pop("name", None)
            p["metadata"].pop("ownerReferences", None)  # an owner that does not exist is refused by GC admission
            code, body, _warnings = real_api.create_pod(p)
            count += 1
            message = body.get("message", "")
            if code >= 400 and ("webhook" in message or "ValidatingAdmissionPolicy" in message):
                refused.append(f"{name}: {message[:200]}")
            elif code >= 400:
                other.append(f"{name}: {code} {message[:160]}")  # the API server's own validation
        SAID[enforcement] = f"{count} pods created, {len(refused)} refused by gpu-policy, {len(other)} by validation"
        print(f"FIGURE real API server outage, {enforcement}: {SAID[enforcement]}; {other[:3]}")
        assert refused == []
        assert count >= 100 and len(other) <= count // 10, other
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)


def privileged_gpu_pod(prefix: str, **labels: str) -> dict[str, Any]:
    """What no-privileged-gpu and its twin refuse, named by the API server (`prefix`), in `ml`."""
    meta: dict[str, Any] = {"generateName": prefix, "namespace": "ml", **({"labels": labels} if labels else {})}
    container = {"name": "t", "image": "x", "securityContext": {"privileged": True},
                 "resources": {"limits": {"nvidia.com/gpu": 1}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}


def test_audit_rollout_refuses_nothing_during_an_outage_and_enforce_does(
    real_api: RealApi, tmp_path: Path, cert_dir: Path
) -> None:
    """Issue 50, item 1, in the real API server: the chart in enforcement both with policy.rollout
    audit, its webhooks pointed where no replica answers. A privileged GPU pod (what no-privileged-gpu
    and its twin deny) is created, with the twin's warning "would violate GPU policy" (its binding's
    validationActions [Warn, Audit]). The same chart with rollout enforce refuses it."""
    nobody = free_port()
    for rollout in ("audit", "enforce"):
        docs = render({"enforcement": "both", "policy": {"rollout": rollout}}, kube_version="1.36.0", tmp=tmp_path)
        assert isinstance(docs, list)
        configs = webhook_configs(docs, nobody, (cert_dir / "ca.crt").read_bytes())
        created = real_api.create_all(configs, ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"))
        created += real_api.create_all(docs, NATIVE)
        try:
            deadline = time.monotonic() + 30
            while True:  # policies and bindings take effect within a second or two
                code, body, warnings = real_api.create_pod(privileged_gpu_pod("rollout-"))
                said = [w for w in warnings if "would violate GPU policy: no-privileged-gpu" in w]
                if rollout == "audit" and code == 201 and said:
                    break
                if rollout == "enforce" and code == 403 and "no-privileged-gpu" in body.get("message", ""):
                    break
                assert time.monotonic() < deadline, (rollout, code, body.get("message"), warnings)
                time.sleep(0.5)
            SAID[f"rollout {rollout}"] = f"{code} {(said or [body.get('message', '')])[0][:160]}"
            print(f"FIGURE real API server, rollout {rollout}, no replica: {SAID[f'rollout {rollout}']}")
        finally:
            for path in reversed(created):
                real_api.call("DELETE", path)


def test_an_exception_in_force_is_honoured_by_the_policies_and_one_expired_is_not(
    real_api: RealApi, tmp_path: Path
) -> None:
    """Issue 50, item 3, in the real API server, with no webhook at all: the rules' policies as the
    chart renders them with two exceptions for no-privileged-gpu in `ml`, one in force (pods
    labelled app=trainer) and one expired (app=old). The trainer is created; the old one and an
    unlabelled one are refused by the deny policy."""
    exceptions = [
        {"name": n, "namespace": "ml", "rules": ["no-privileged-gpu"], "owner": "team-ml", "reason": "r",
         "expires": d, "podLabels": {"app": app}}
        for n, d, app in (("trainer", "2099-01-31", "trainer"), ("old", "2020-01-31", "old"))
    ]  # fmt: skip
    docs = render({"enforcement": "both", "policy": {"exceptions": exceptions}}, kube_version="1.36.0", tmp=tmp_path)
    assert isinstance(docs, list)
    created = real_api.create_all(docs, ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))

    try:
        deadline = time.monotonic() + 30
        while True:  # the policies take effect within a second or two
            code, body, _ = real_api.create_pod(privileged_gpu_pod("exc-"))
            if code == 403:
                break
            assert time.monotonic() < deadline, (code, body.get("message"))
            time.sleep(0.5)
        said = {app: real_api.create_pod(privileged_gpu_pod("exc-", app=app))[:2] for app in ("trainer", "old")}
        assert said["trainer"][0] == 201, said["trainer"][1].get("message")
        assert said["old"][0] == 403 and "no-privileged-gpu" in said["old"][1]["message"]
        SAID["exceptions"] = f"in force 201, expired {said['old'][0]}, unlabelled {code}"
        print(f"FIGURE real API server, exceptions: {SAID['exceptions']}")
    finally:
        for path in reversed(created):
            real_api.call("DELETE", path)
