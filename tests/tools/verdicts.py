"""Every verdict and patch the policy core gives over the corpus, the benchmark's pods and the
fuzzer's objects (fixed seeds), with and without a cluster view, as JSON on stdout.

tests/test_compiled.py runs this once on the compiled core and once with GPU_POLICY_PURE=1 and
requires identical output: the two builds that ship must judge alike to the letter.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from dataclasses import replace as replace_field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers import POLICY, base_objects, junk, node_table, nodes, replace
from webhook import admission, core_build
from webhook.offline.manifests import Document, review_request
from webhook.policy.nodes import view_of_nodes

ROUNDS = 25


def population() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [(f"base {i}", obj) for i, obj in enumerate(base_objects())]
    for seed in range(3):
        rng = random.Random(seed)
        for i, base in enumerate(base_objects()):
            for r in range(ROUNDS):
                obj = copy.deepcopy(base)
                obj = replace(obj, rng.choice(nodes(obj)[1:]), junk(rng))
                out.append((f"fuzz {seed}/{i}/{r}", obj))
    return out


def judged(obj: Any, policy: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        return {"not an object": True}
    req = review_request(Document("x", 1, None, obj), None)
    v = admission.validate(req, policy)
    m = admission.mutate(req, policy)
    return {
        "validate": [v.decision.value, v.message, v.warnings, v.reason, v.audit_annotations()],
        "mutate": [m.decision.value, m.message, m.ops, m.warnings],
    }


def main() -> None:
    with_cluster = replace_field(POLICY, cluster=view_of_nodes(node_table()))
    results = {name: [judged(obj, POLICY), judged(obj, with_cluster)] for name, obj in population()}
    json.dump({"build": core_build(), "results": results}, sys.stdout, sort_keys=True, default=str)


if __name__ == "__main__":
    main()
