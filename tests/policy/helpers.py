from __future__ import annotations

from typing import Any

from webhook import policy
from webhook.policy import Policy, Violation
from webhook.policy.objects import group_of


def run(obj: dict[str, Any], p: Policy | None = None, rule: str | None = None) -> list[Violation]:
    """Violations of `obj` (optionally of one rule only) under policy `p`."""
    p = p or Policy()
    found = policy.check(obj, group_of(obj["apiVersion"]), obj["kind"], p)
    assert found is not None
    return [v for v in found if rule is None or v.rule == rule]
