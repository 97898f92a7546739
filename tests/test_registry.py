"""The registry is the one description of the policy: every rule and mutation is complete everywhere.

Adding a rule is one rule module, its test module and `make generate`; this module fails
until all three are done (and `make lint` fails while a generated file is stale).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.buildtime import generate
from webhook.config import DEFAULTS, default_policy
from webhook.policy import ALL_RULES, MUTATIONS, RULE_IDS, RULES, Mode, Rule, Where
from webhook.policy.engine import example_policy, example_views
from webhook.policy.registry import check_pod
from webhook.policy.switches import RulesOn

ROOT = Path(__file__).resolve().parent.parent
ITEMS = [(r.id, r.check.__module__) for r in ALL_RULES] + [(m.id, m.mutate.__module__) for m in MUTATIONS]


@pytest.mark.parametrize(("item_id", "module"), ITEMS)
def test_every_rule_and_mutation_has_its_own_tests_and_docs(item_id: str, module: str) -> None:
    name = module.rsplit(".", 1)[1]
    assert name.replace("_", "-") == item_id, "a module is named after its id"
    assert (ROOT / "tests" / "policy" / f"test_{name}.py").is_file(), f"tests/policy/test_{name}.py is missing"
    docs = (ROOT / "docs" / "policy.md").read_text()
    assert f"| `{item_id}` |" in docs, "docs/policy.md's generated table lacks it: run make generate"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_every_rule_is_described_and_reaches_the_chart(rule: object) -> None:
    from webhook.policy import ObjectRule, Rule

    assert isinstance(rule, Rule | ObjectRule)
    assert rule.summary.strip() and rule.why.strip() and rule.reads and rule.triggers
    values = yaml.safe_load((ROOT / "charts" / "gpu-policy" / "values.yaml").read_text())
    assert values["policy"]["rules"][rule.id] == rule.default_mode.value
    assert DEFAULTS["rules"][rule.id] == rule.default_mode.value
    assert default_policy().mode(rule.id) is rule.default_mode


def test_ids_are_unique_and_stable_in_shape() -> None:
    ids = [*RULE_IDS, *(m.id for m in MUTATIONS)]
    assert len(ids) == len(set(ids))
    assert all(i == i.lower() and " " not in i for i in ids)


def test_mutations_declare_how_they_are_switched_on() -> None:
    for m in MUTATIONS:
        head, _, rest = m.switch.partition(".")
        assert head in DEFAULTS and (not rest or rest in DEFAULTS[head]), m.switch
        assert m.triggers and m.summary.strip()
    isolation = [m for m in MUTATIONS if any(t.where is Where.EVERY_POD for t in m.triggers)]
    assert all(not m.opt_out for m in isolation), "an every-pod protection must not honour the opt-out annotation"


def test_every_rule_and_mutation_says_whether_the_api_server_can_run_it() -> None:
    """Issue 35: a CEL twin, or `webhook_only` with the reason (docs/policy.md's native table)."""
    from webhook.policy import ALL_RULES

    for m in MUTATIONS:
        assert (m.native is None) == bool(m.webhook_only), m.id
    for r in ALL_RULES:
        assert (getattr(r, "native", None) is None) == bool(r.webhook_only.strip()), r.id
    # Isolation, every pod's protection, must survive the webhook's outage.
    isolation = [m for m in MUTATIONS if any(t.where is Where.EVERY_POD for t in m.triggers)]
    assert isolation and all(m.native is not None for m in isolation)


def test_shipped_policy_is_the_documented_one() -> None:
    # The unit tests' POLICY is this one: what ships, not a hand-made Policy().
    p = default_policy()
    assert p.modes == {r.id: r.default_mode for r in ALL_RULES}
    assert p.isolate_non_gpu and p.shared_gpu and p.resource_name == DEFAULTS["gpuResourceName"]
    # Every rule is on but host-shm (a hygiene rule, not a GPU side door: off until a platform wants
    # it), the access rules (who may use GPUs and how many: a platform's choice to make) and
    # driver-hostpath-non-gpu (the driver gives nothing without a device the cgroup allows: issue
    # 48). amd-runtime-envfrom denies, but only once the platform says its nodes run the AMD
    # runtime (its switch, vendors.amd.runtimeEnv).
    assert sorted(r for r, mode in p.modes.items() if mode is Mode.OFF) == [
        "driver-hostpath-non-gpu",
        "gpu-controller-owned",
        "gpu-job-deadline",
        "gpu-kinds-allowed",
        "gpu-max-per-pod",
        "gpu-namespace-allowed",
        "gpu-quota-advice",
        "host-shm",
    ]


def test_generated_files_are_fresh() -> None:
    assert generate.main(["--check"]) == 0, "run `make generate`"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_each_pod_rule_runs_exactly_when_its_flag_is_set(rule: Rule) -> None:
    """Issue 34: registry.check_pod tests the flag named for the rule's module, no positions to
    line up. With only this rule's flag set, its example is judged by it and by nothing else; with
    no flag set, by nothing."""
    only = RulesOn.of(lambda rule_id: rule_id == rule.id)
    assert [f for f in RulesOn.__dataclass_fields__ if getattr(only, f)] == [rule.check.__module__.rpartition(".")[2]]
    policy = example_policy(rule, default_policy())
    views = example_views(rule, policy)
    found = [v.rule for view in views for v in check_pod(view, policy, only)]
    assert found and set(found) == {rule.id}
    assert not [v for view in views for v in check_pod(view, policy, RulesOn.of(lambda _id: False))]
