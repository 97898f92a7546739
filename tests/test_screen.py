"""The raw-body screen (webhook.screen): escapes, disabled rules and the server's own path.

That the screen lets through every pod the policy acts on is proven over the corpus, the
rules' examples and fuzzed pods in test_match_conditions.py, together with the chart's CEL.
"""

from __future__ import annotations

import json

from tests.apiserver import ApiServer
from tests.helpers import POLICY, container, default_policy, pod
from webhook.policy import Mode
from webhook.screen import Screen


def body(obj: dict) -> bytes:
    return json.dumps(ApiServer.build(obj), separators=(",", ":")).encode()


def test_ordinary_pods_are_screened_out() -> None:
    web = container("web", env=[{"name": "PORT", "value": "80"}], privileged=True, image="nginx:1.27")
    plain = body(pod(web))
    assert not Screen.for_policy(POLICY).may_validate(plain)
    # Tokens that share "nvidia" are scanned once as "nvidia" (fewer scans of every body): a pod
    # from an NVIDIA image takes the full path, where the rules decide exactly.
    cuda = body(pod({**web, "image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}))
    assert Screen.for_policy(POLICY).may_validate(cuda)
    # Isolation applies to every pod, so with it on every pod goes to the mutation walk.
    assert Screen.for_policy(POLICY).may_mutate(plain)
    assert not Screen.for_policy(default_policy(isolate_non_gpu=False)).may_mutate(plain)


def test_any_escape_takes_the_full_path() -> None:
    screen = Screen.for_policy(POLICY)
    escaped = body(pod(container("web"))).replace(b'"web"', b'"w\\u0065b"')
    assert screen.may_validate(escaped) and screen.may_mutate(escaped)


def test_rules_that_are_off_do_not_pull_their_triggers() -> None:
    p = default_policy(modes={**POLICY.modes, "no-visible-devices-env": Mode.OFF})
    assert b"NVIDIA_VISIBLE_DEVICES" not in Screen.for_policy(p).validate_tokens
    mig = default_policy(resource_name="nvidia.com/mig-1g.5gb", isolate_non_gpu=False, cluster_version=(1, 27))
    assert Screen.for_policy(mig).mutate_tokens == (b"nvidia",)  # nvidia.com/mig-1g.5gb, by its anchor
    # Mutations that are switched off pull nothing.
    assert Screen.for_policy(default_policy(isolate_non_gpu=False)).mutate_tokens == ()


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
