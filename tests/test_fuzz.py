"""Malformed objects never crash the policy, and every patch we send applies.

Seeded, bounded random mutation: take each corpus and bench pod, replace a random node
(any depth) with a random JSON value, and run the admission layer as the server does.
The only acceptable results are a verdict or a "malformed" denial (code 400); any
exception is a bug, and a patch that `jsonpatch` cannot apply would make the API server
reject the pod with an error nobody can read.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from bench.reviews import pods
from tests.apiserver import ApiServer
from webhook import admission, review
from webhook.config import from_mapping

CORPUS = Path(__file__).resolve().parent / "corpus"
POLICY = from_mapping({"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "t4"}}, environ={}).policy
ROUNDS = 60  # per base object; ~3,000 mutated objects in all


def base_objects() -> list[dict[str, Any]]:
    objs = [yaml.safe_load(p.read_text()) for p in sorted(CORPUS.glob("*.yaml"))]
    return objs + list(pods().values())


def junk(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 2 else 7)
    if choice == 7:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(3))]
    if choice == 8:
        return {rng.choice(["name", "value", "env", "limits", "nvidia.com/gpu", "x"]): junk(rng, depth + 1)}
    return [None, True, rng.randint(-5, 5), rng.random() * 3, "", "all", "nvidia.com/gpu"][choice]


def nodes(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += nodes(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += nodes(v, (*path, i))
    return out


def replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


@pytest.mark.parametrize("seed", range(4))
def test_mutated_objects_get_a_verdict_and_applicable_patches(seed: int) -> None:
    rng = random.Random(seed)
    seen = {"malformed": 0, "judged": 0, "patched": 0}
    for base in base_objects():
        for _ in range(ROUNDS // 4):
            obj = copy.deepcopy(base)
            path = rng.choice(nodes(obj)[1:])  # never the whole object: the envelope checks that
            obj = replace(obj, path, junk(rng))
            envelope = ApiServer.build(base)  # kind, namespace and name from the intact object
            envelope["request"]["object"] = obj
            body = json.dumps(envelope).encode()
            req = review.parse(json.loads(body))
            for decide in (admission.validate, admission.mutate):
                outcome = decide(req, POLICY, body)
                response = outcome.response["response"]
                assert response["uid"] == req.uid
                if outcome.decision == "malformed":
                    seen["malformed"] += 1
                    assert response["allowed"] is False and response["status"]["code"] == 400
                    continue
                seen["judged"] += 1
                if "patch" in response:
                    seen["patched"] += 1
                    ops = json.loads(base64.b64decode(response["patch"]))
                    jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    # The fuzzer must actually reach all three outcomes, or it tests nothing.
    assert all(seen.values()), seen


@pytest.mark.parametrize("seed", range(2))
def test_mutated_envelopes_are_rejected_or_judged(seed: int) -> None:
    rng = random.Random(1000 + seed)
    rejected = judged = 0
    for base in base_objects()[:20]:
        for _ in range(25):
            envelope = ApiServer.build(copy.deepcopy(base))
            path = rng.choice([p for p in nodes(envelope)[1:] if p[:2] != ("request", "object")])
            envelope = replace(envelope, path, junk(rng))
            try:
                req = review.parse(envelope)
            except review.ReviewError:
                rejected += 1
                continue
            for decide in (admission.validate, admission.mutate):
                assert decide(req, POLICY).response["response"]["uid"] == req.uid
            judged += 1
    assert rejected and judged
