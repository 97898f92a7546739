"""Exceptions with an owner and an end (issue 50, item 3): `exceptions` excuses named rules in one
namespace (for the pods with every podLabels pair) through its `expires` day (UTC). After it the
rule applies again and the message says which exception ended, when, and whose it was; `gpu-policy
audit` lists expired and expiring ones. CEL has no clock: the chart renders the exceptions in force
on the day it renders into the rules' ValidatingAdmissionPolicies (an expired one stays there until
the next render: the webhook, and audit, know the date).

Through the real server over TLS, the chart rendered by a real helm and its policies evaluated by
cel-python as the API server does, and `check --engine cel`."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.celnative import compile_validations, request
from tests.helpers import Server, container, pod
from webhook.config import ConfigError, from_mapping
from webhook.policy.engine import exception_states

FUTURE, PAST = "2099-01-31", "2020-01-31"
TODAY = datetime.datetime.now(datetime.UTC).date()


def exception(name: str, expires: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ml",
        "rules": ["no-privileged-gpu"],
        "owner": "team-ml",
        "reason": "the old trainer runs privileged until the driver upgrade",
        "expires": expires,
        **extra,
    }


CONFIG = {
    "clusterVersion": "1.30",
    "exceptions": [
        exception("legacy-trainer", FUTURE, podLabels={"app": "trainer"}),
        exception("ended", PAST, podLabels={"app": "old"}),
        exception("ends-today", TODAY.isoformat(), podLabels={"app": "today"}),
    ],
}


def privileged(namespace: str = "ml", **labels: str) -> dict[str, Any]:
    p = pod(container("t", gpu=1, privileged=True), namespace=namespace)
    if labels:
        p["metadata"]["labels"] = labels
    return p


def test_the_server_excuses_until_the_day_and_says_when_an_exception_ended(
    start_server: Callable[..., Server],
) -> None:
    server = start_server(CONFIG)
    client = server.client()
    try:
        excused = client.validate(privileged(app="trainer"))
        today = client.validate(privileged(app="today"))  # its last day: still in force
        ended = client.validate(privileged(app="old"))
        elsewhere = client.validate(privileged("research", app="trainer"))
        unlabelled = client.validate(privileged())
    finally:
        client.close()
    assert excused["allowed"] is True and today["allowed"] is True
    message = ended["status"]["message"]
    assert ended["allowed"] is False and "no-privileged-gpu" in message
    assert "the exception 'ended' (owner team-ml) expired on 2020-01-31, so no-privileged-gpu applies again" in message
    for r in (elsewhere, unlabelled):
        assert r["allowed"] is False and "exception" not in r["status"]["message"]


def test_the_rendered_policies_excuse_what_is_in_force_on_the_day_they_are_rendered(tmp_path: Path) -> None:
    """enforcement both on 1.36: the deny policy's no-privileged-gpu validations carry the
    exceptions in force when helm rendered them; the expired one is not there."""
    values = {"policy": {k: v for k, v in CONFIG.items() if k != "clusterVersion"}}
    policies = compile_validations(values, tmp_path)
    policy, actions = policies["no-privileged-gpu"]
    assert actions == ["Deny"]
    assert policy.failures(privileged(app="trainer"), request("ml")) == []
    assert policy.failures(privileged(app="today"), request("ml")) == []
    for p, ns in ((privileged(app="old"), "ml"), (privileged("research", app="trainer"), "research")):
        (message,) = policy.failures(p, request(ns))
        assert message.startswith("violates GPU policy: no-privileged-gpu")
    # Another rule's validations are untouched by an exception that does not name it.
    quantity, _ = policies["gpu-quantity"]
    bad = pod(container("t", resources={"limits": {"nvidia.com/gpu": "1.5"}}, privileged=False))
    bad["metadata"]["labels"] = {"app": "trainer"}
    assert quantity.failures(bad, request("ml"))


def test_check_engine_cel_judges_as_the_webhook(tmp_path: Path) -> None:
    from webhook.admission import validate
    from webhook.offline.manifests import Document, review_request
    from webhook.offline.native import Native

    policy = from_mapping(CONFIG).policy
    native = Native.of(policy)
    for p in (privileged(app="trainer"), privileged(app="old"), privileged("research", app="trainer")):
        req = review_request(Document("x", 1, None, p), None)
        webhook, cel = validate(req, policy), native.validate(req)
        assert webhook.allowed == cel.allowed, p["metadata"]


def test_audit_lists_expired_and_expiring_first() -> None:
    soon = (TODAY + datetime.timedelta(days=3)).isoformat()
    policy = from_mapping(
        {"exceptions": [exception("later", FUTURE), exception("soon", soon), exception("gone", PAST)]}
    ).policy
    states = [(e.name, state, days) for e, state, days in exception_states(policy, TODAY.isoformat())]
    assert states[0][:2] == ("gone", "expired") and states[0][2] == (TODAY - datetime.date(2020, 1, 31)).days
    assert states[1] == ("soon", "expiring", 3) and states[2][:2] == ("later", "active")


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"name": "x", "namespace": "ml", "rules": ["no-privileged-gpu"], "owner": "o", "expires": FUTURE},
         "exceptions[0].reason: is required"),
        ({**exception("x", FUTURE), "rules": ["no-privilegd-gpu"]},
         "exceptions[0].rules[0]: 'no-privilegd-gpu' is not a rule id (did you mean no-privileged-gpu?)"),
        ({**exception("x", "2027-02-30")}, "exceptions[0].expires: must be a date YYYY-MM-DD"),
        ({**exception("x", FUTURE), "team": "a"}, "exceptions[0].team: unknown key"),
        ({**exception("x", FUTURE), "owner": " "}, "exceptions[0].owner: must be a non-empty string"),
    ],
)  # fmt: skip
def test_a_bad_exception_is_named_by_index_and_key(entry: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        from_mapping({"exceptions": [entry]})
    assert f"config: {problem}" in str(raised.value)


def test_names_are_unique_and_a_yaml_date_is_the_same_day() -> None:
    with pytest.raises(ConfigError, match=r"exceptions\[1\].name: 'x' is used by another exception"):
        from_mapping({"exceptions": [exception("x", FUTURE), exception("x", FUTURE)]})
    (e,) = from_mapping({"exceptions": [exception("x", datetime.date(2099, 1, 31))]}).policy.exceptions  # type: ignore[arg-type]
    assert e.expires == FUTURE
