"""The chart's matchConditions as the API server evaluates them: rendered by a real helm, compiled by
cel-python, evaluated over the object as the API server's CEL sees it (typed, then unstructured).
Shared by tests/test_match_conditions.py and the adversary property (tests/test_adversary.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy

from tests.chart import find, render
from webhook.offline.native import MAPS, typed  # the API server's typed view, shared with `mutate --engine cel`

__all__ = ["MAPS", "compile_conditions", "compile_webhooks", "sent", "typed"]


def compile_conditions(config: dict[str, Any], tmp: Path) -> dict[str, list[Any] | None]:
    docs = render({"policy": config}, kube_version="1.30.0", tmp=tmp)
    assert isinstance(docs, list)
    env = celpy.Environment()
    hooks = (
        find(docs, "MutatingWebhookConfiguration")["webhooks"]
        + find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    )
    return {
        h["name"]: [env.program(env.compile(c["expression"])) for c in h["matchConditions"]]
        if "matchConditions" in h
        else None
        for h in hooks
    }


def compile_webhooks(values: dict[str, Any], tmp: Path, kube_version: str) -> dict[str, tuple[str, list[Any] | None]]:
    """Every webhook of the chart rendered with `values` for `kube_version`: its failurePolicy and
    compiled matchConditions (None: it has none, and sees every object its rules select)."""
    docs = render(values, kube_version=kube_version, tmp=tmp)
    assert isinstance(docs, list)
    env = celpy.Environment()
    out: dict[str, tuple[str, list[Any] | None]] = {}
    for d in docs:
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for h in d["webhooks"]:
                programs = [env.program(env.compile(c["expression"])) for c in h.get("matchConditions", [])]
                out[h["name"]] = (h["failurePolicy"], programs if "matchConditions" in h else None)
    return out


def sent(
    programs: list[Any] | None,
    obj: dict[str, Any],
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    sub_resource: str | None = None,
) -> bool:
    """Whether the API server sends `obj` (with `old` on an UPDATE: by default the ephemeral-containers
    subresource's) to a webhook with these compiled matchConditions."""
    if programs is None:
        return True  # a webhook without matchConditions sees every pod
    if sub_resource is None:
        sub_resource = "ephemeralcontainers" if old is not None else ""
    request = {"operation": operation, "subResource": sub_resource}
    activation = {"object": celpy.json_to_cel(typed(obj)), "request": celpy.json_to_cel(request)}
    if old is not None:
        activation["oldObject"] = celpy.json_to_cel(typed(old))
    results = [p.evaluate(activation) for p in programs]
    for r in results:
        assert not isinstance(r, celpy.CELEvalError), f"CEL failed on a schema-valid pod: {r}"
    return all(bool(r) for r in results)
