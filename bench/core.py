"""Micro-benchmark of the policy core alone: view + every rule + every mutation, per pod.

No network, no JSON: what one review costs inside `webhook.policy`, so a slow rule shows up.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from webhook import policy
from webhook.config import from_mapping
from webhook.policy import Policy

from .reviews import pods, wide_pod

POLICY = from_mapping(
    {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "nvidia-t4"}}, environ={}
).policy


def evaluate_and_mutate(obj: dict[str, Any], p: Policy = POLICY) -> None:
    found = policy.check(obj, "", "Pod", p)
    assert found is not None
    policy.judge(found, p)
    view = policy.view(obj, "", "Pod", p)
    assert view is not None
    policy.mutate(view, p)


def time_one(obj: dict[str, Any], *, rounds: int = 30, per_round: int = 200) -> dict[str, float]:
    """Median and p99 over rounds of the mean per-call time, in microseconds."""
    for _ in range(per_round):
        evaluate_and_mutate(obj)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(per_round):
            evaluate_and_mutate(obj)
        samples.append((time.perf_counter_ns() - start) / per_round / 1000)
    samples.sort()
    return {"median_us": round(statistics.median(samples), 2), "max_us": round(samples[-1], 2)}


def run(quick: bool = False) -> dict[str, dict[str, float]]:
    rounds = 10 if quick else 30
    out = {name: time_one(obj, rounds=rounds) for name, obj in pods().items()}
    out["wide-20-containers"] = time_one(wide_pod(20), rounds=rounds, per_round=50)
    return out


if __name__ == "__main__":
    for name, r in run().items():
        print(f"{name:22} {r['median_us']:8.2f} us (max of rounds {r['max_us']:.2f})")
