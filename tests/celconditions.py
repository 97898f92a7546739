"""The chart's matchConditions as the API server evaluates them: rendered by a real helm, compiled by
cel-python, evaluated over the object as the API server's CEL sees it (typed, then unstructured).
Shared by tests/test_match_conditions.py and the adversary property (tests/test_adversary.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy

from tests.chart import find, render
from webhook.offline.native import MAPS, typed  # the API server's typed view, shared with `mutate --engine cel`

__all__ = ["MAPS", "compile_conditions", "sent", "typed"]


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


def sent(programs: list[Any] | None, obj: dict[str, Any]) -> bool:
    if programs is None:
        return True  # a webhook without matchConditions sees every pod
    activation = {"object": celpy.json_to_cel(typed(obj))}
    results = [p.evaluate(activation) for p in programs]
    for r in results:
        assert not isinstance(r, celpy.CELEvalError), f"CEL failed on a schema-valid pod: {r}"
    return all(bool(r) for r in results)
