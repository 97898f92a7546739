"""The benchmark's reviews are what the bench says they are (sizes, verdicts, patches)."""

from __future__ import annotations

import json

from bench import core
from bench.reviews import bodies, wide_pod
from webhook import admission, review
from webhook.config import from_mapping

POLICY = from_mapping(
    {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "nvidia-t4"}}, environ={}
).policy


def test_bodies_cover_the_mix() -> None:
    found = {}
    for name, body in bodies().items():
        assert 3_000 <= len(body) <= 20_000, (name, len(body))
        req = review.parse(json.loads(body))
        valid = admission.validate(req, POLICY).decision
        mutated = admission.mutate(req, POLICY).decision
        found[name] = (valid, mutated)
    assert found == {
        "gpu-mutated": ("allowed", "patched"),
        "gpu-denied": ("denied", "patched"),
        "gpu-shared": ("allowed", "patched"),
        "cpu-web": ("allowed", "patched"),  # isolate-non-gpu
        "cpu-small": ("allowed", "patched"),
        "gpu-big": ("allowed", "patched"),
    }


def test_core_micro_benchmark_runs() -> None:
    core.evaluate_and_mutate(wide_pod(20))
    assert set(core.time_one(wide_pod(2), rounds=1, per_round=1)) == {"median_us", "max_us", "cold_median_us"}
