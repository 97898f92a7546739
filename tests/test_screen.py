"""The raw-body screen may skip only what cannot matter; escapes and every rule's triggers are honoured."""

from __future__ import annotations

import json

import pytest

from tests.apiserver import ApiServer
from tests.builders import container, pod, wrap
from tests.test_chart_match_conditions import ACTED_ON
from webhook import policy
from webhook.policy import Mode, Policy, Screen
from webhook.policy.objects import watched_in

POLICY = Policy(cluster_version=(1, 27), accelerator_default="t4")
CORPUS = {
    **ACTED_ON,
    "deployment template": wrap(pod(container(gpu="1.5")), "Deployment"),
    "cronjob template": wrap(pod(container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])), "CronJob"),
}


def body(obj: dict) -> bytes:
    return json.dumps(ApiServer.build(obj), separators=(",", ":")).encode()


@pytest.mark.parametrize("name", list(CORPUS))
def test_everything_the_policy_acts_on_passes_the_screen(name: str) -> None:
    obj = CORPUS[name]
    kind = obj["kind"]
    view = policy.view(obj, policy.group_of(obj["apiVersion"]), kind, POLICY)
    assert view is not None
    screen = Screen.for_policy(POLICY)
    if policy.violations(view, POLICY):
        assert screen.may_validate(body(obj))
    if policy.mutate(view, POLICY).ops:
        assert screen.may_mutate(body(obj))


def test_ordinary_pods_are_screened_out() -> None:
    plain = body(pod(container("web", env=[{"name": "PORT", "value": "80"}], privileged=True)))
    assert not Screen.for_policy(POLICY).may_validate(plain)
    # Isolation applies to every pod, so with it on every pod goes to the mutation walk.
    assert Screen.for_policy(POLICY).may_mutate(plain)
    assert not Screen.for_policy(Policy(isolate_non_gpu=False)).may_mutate(plain)


def test_any_escape_takes_the_full_path() -> None:
    screen = Screen.for_policy(POLICY)
    escaped = body(pod(container("web"))).replace(b'"web"', b'"w\\u0065b"')
    assert screen.may_validate(escaped) and screen.may_mutate(escaped)
    assert watched_in(escaped) == {"NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"}


def test_rules_that_are_off_do_not_pull_their_triggers() -> None:
    p = Policy(modes={"no-visible-devices-env": Mode.OFF})
    assert b"NVIDIA_VISIBLE_DEVICES" not in Screen.for_policy(p).validate_tokens
    mig = Policy(resource_name="nvidia.com/mig-1g.5gb", isolate_non_gpu=False)
    assert Screen.for_policy(mig).mutate_tokens == (b"nvidia.com/mig-1g.5gb",)


def test_escaped_spellings_cannot_sneak_past_the_server(api: ApiServer) -> None:
    # JSON allows "\/" and "\u0041"; the API server never writes them, but a body that does
    # must still be judged on what it means, not on how it is spelled.
    review = ApiServer.build(pod(container("t", gpu="1", privileged=True)))
    raw = json.dumps(review).replace("nvidia.com/gpu", "nvidia.com\\/gpu").encode()
    assert b"nvidia.com/gpu" not in raw
    response = json.loads(api.post("/validate", raw).body)["response"]
    assert response["allowed"] is False and "no-privileged-gpu" in response["status"]["message"]
    env_review = ApiServer.build(pod(container("t", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])))
    raw = json.dumps(env_review).replace("NVIDIA_VISIBLE", "\\u004eVIDIA_VISIBLE").encode()
    response = json.loads(api.post("/validate", raw).body)["response"]
    assert response["allowed"] is False and "no-visible-devices-env" in response["status"]["message"]
