"""The benchmark's reviews are what the bench says they are (sizes, verdicts, patches)."""

from __future__ import annotations

import json

from bench import core
from bench.reviews import bodies, wide_pod
from webhook import admission, policy, review
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


def test_cel_comparison_decides_like_the_core() -> None:
    # The CEL program must make the same allow/deny decision as the four core rules, or the
    # bench would compare engines doing different work.
    from cel_expr_python import cel
    from cel_expr_python.ext.ext_strings import ExtStrings

    from bench.cel_compare import PROGRAM
    from bench.reviews import pods
    from tests.builders import container, pod
    from webhook.policy import Mode

    env = cel.NewEnv(variables={"object": cel.Type.DYN}, extensions=[ExtStrings()])
    expr = env.compile("(" + PROGRAM.strip())
    four = from_mapping(
        {
            "rules": {
                r: "off"
                for r in (
                    "no-gpu-device-hostpath",
                    "no-cdi-annotations",
                    "no-host-namespaces-gpu",
                    "visible-devices-envfrom",
                    "gpu-limitrange",
                )
            }
        },
        environ={},
    ).policy
    cases = {
        **pods(),
        "bad quantity": pod(container(gpu="1.5")),
        "mismatch": pod(container(gpu="2", request="1")),
        "cap": pod(container(gpu=1, caps=["cap_sys_admin"])),
        "env": pod(container(gpu=1, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
    }
    for name, obj in cases.items():
        found = policy.check(obj, "", "Pod", four)
        assert found is not None
        denied = any(four.mode(v.rule) is Mode.DENY for v in found)
        assert expr.eval(data={"object": obj}).value() is not denied, name
