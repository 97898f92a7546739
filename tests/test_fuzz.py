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

import jsonpatch
import pytest

from tests.apiserver import ApiServer
from tests.helpers import base_objects, default_policy, junk, nodes, replace
from webhook import admission
from webhook.admission import review

POLICY = default_policy(cluster_version=(1, 27), accelerator_default="t4")
ROUNDS = 60  # per base object; ~3,000 mutated objects in all


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
                outcome = decide(req, POLICY)
                response = admission.respond(req, outcome)["response"]
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
                assert admission.respond(req, decide(req, POLICY))["response"]["uid"] == req.uid
            judged += 1
    assert rejected and judged
