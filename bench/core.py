"""Micro-benchmark of the policy core alone: view + every rule + every mutation, per pod.

No network, no JSON parsing: what one review costs inside `webhook.policy`, so a slow rule
shows up. The same calls the server and the CLI make: one walk into the view, every rule that is
not off, every mutation that is on.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from bench.reviews import pods, wide_pod
from webhook.config import default_policy
from webhook.policy import Policy, engine

POLICY = default_policy(cluster_version=(1, 27), accelerator_default="nvidia-t4")


def evaluate_and_mutate(obj: dict[str, Any], p: Policy = POLICY) -> None:
    view = engine.pod_view(obj, p)
    engine.judge(engine.pod_violations(view, p), p)
    engine.mutate(view, p)


def _rounds(obj: dict[str, Any], rounds: int, per_round: int) -> list[float]:
    for _ in range(per_round):
        evaluate_and_mutate(obj)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(per_round):
            evaluate_and_mutate(obj)
        samples.append((time.perf_counter_ns() - start) / per_round / 1000)
    return sorted(samples)


def time_one(obj: dict[str, Any], *, rounds: int = 30, per_round: int = 200) -> dict[str, float]:
    """Median (and the slowest round) of the mean per-call time, in microseconds."""
    samples = _rounds(obj, rounds, per_round)
    return {"median_us": round(statistics.median(samples), 2), "max_us": round(samples[-1], 2)}


def run(quick: bool = False) -> dict[str, dict[str, float]]:
    rounds = 10 if quick else 30
    out = {name: time_one(obj, rounds=rounds) for name, obj in pods().items()}
    out["wide-20-containers"] = time_one(wide_pod(20), rounds=rounds, per_round=50)
    return out


def run_elsewhere(pure: bool, quick: bool = False) -> dict[str, dict[str, float]]:
    """The same measurement in a fresh process, on the pure Python core (GPU_POLICY_PURE=1) or
    the compiled one: the two builds side by side in one bench run."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GPU_POLICY_PURE"}
    if pure:
        env["GPU_POLICY_PURE"] = "1"
    cmd = [sys.executable, "-m", "bench.core", "--json", *(["--quick"] if quick else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=900).stdout
    return dict(json.loads(out))


if __name__ == "__main__":
    import sys

    from webhook import core_build

    results = run(quick="--quick" in sys.argv)
    if "--json" in sys.argv:
        print(json.dumps(results))
    else:
        print(f"policy core: {core_build()}")
        for name, r in results.items():
            print(f"{name:22} {r['median_us']:8.2f} us   (slowest round {r['max_us']:8.2f} us)")
