"""The benchmark's reviews are what the bench says they are (sizes, verdicts, patches)."""

from __future__ import annotations

import json

from bench import core
from bench.reviews import bodies, wide_pod
from tests.helpers import container, default_policy, pod
from webhook import admission
from webhook.admission import review
from webhook.policy import RULE_IDS, Mode, engine

POLICY = default_policy(cluster_version=(1, 27), accelerator_default="nvidia-t4")


def test_bodies_cover_the_mix() -> None:
    found = {}
    for name, body in bodies().items():
        assert 3_000 <= len(body) <= 20_000, (name, len(body))
        req = review.parse(json.loads(body))
        valid = admission.validate(req, POLICY).decision.value
        mutated = admission.mutate(req, POLICY).decision.value
        found[name] = (valid, mutated)
    assert found == {
        "gpu-mutated": ("allowed", "patched"),
        "gpu-denied": ("denied", "patched"),
        "gpu-shared": ("allowed", "patched"),
        "cpu-web": ("allowed", "patched"),  # isolate-non-gpu
        "cpu-small": ("allowed", "patched"),
        "gpu-big": ("allowed", "patched"),
        "gpu-3c": ("allowed", "patched"),
    }
    # issue 34's /mutate case: the trainer (LD_LIBRARY_PATH, AMD isolation), the sidecar and the init
    # container (isolation) are patched, and the pod gets the default GPU model
    three = review.parse(json.loads(bodies()["gpu-3c"]))
    touched = {"/".join(op["path"].split("/")[:4]) for op in admission.mutate(three, POLICY).ops}
    assert touched == {"/spec/containers/0", "/spec/containers/1", "/spec/initContainers/0", "/spec/nodeSelector"}


def test_core_micro_benchmark_runs() -> None:
    core.evaluate_and_mutate(wide_pod(20))
    assert set(core.time_one(wide_pod(2), rounds=1, per_round=1)) == {"median_us", "max_us"}


def test_cel_comparison_decides_like_the_core() -> None:
    # The CEL program must make the same allow/deny decision as the four core rules, or the
    # bench would compare engines doing different work.
    from cel_expr_python import cel
    from cel_expr_python.ext.ext_strings import ExtStrings

    from bench.cel_compare import PROGRAM
    from bench.reviews import pods

    env = cel.NewEnv(variables={"object": cel.Type.DYN}, extensions=[ExtStrings()])
    expr = env.compile("(" + PROGRAM.strip())
    core_four = ("gpu-quantity", "gpu-requests-equal-limits", "no-visible-devices-env", "no-privileged-gpu")
    four = default_policy(modes={r: Mode.DENY if r in core_four else Mode.OFF for r in RULE_IDS})
    cases = {
        **pods(),
        "bad quantity": pod(container(gpu="1.5")),
        "mismatch": pod(container(gpu="2", request="1")),
        "cap": pod(container(gpu=1, caps=["cap_sys_admin"])),
        "env": pod(container(gpu=1, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
    }
    for name, obj in cases.items():
        found = engine.find_violations(obj, "", "Pod", four)
        assert found is not None
        denied = any(four.mode(v.rule) is Mode.DENY for v in found)
        assert expr.eval(data={"object": obj}).value() is not denied, name
