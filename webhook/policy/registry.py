"""The explicit lists of rules and mutations, in the order their messages appear."""

from __future__ import annotations

from .mutations import accelerator_node_selector, ld_library_path
from .rules import gpu_quantity, gpu_requests_equal_limits, no_privileged_gpu, no_visible_devices_env
from .types import Mutation, Rule

RULES: tuple[Rule, ...] = (
    gpu_quantity.RULE,
    gpu_requests_equal_limits.RULE,
    no_visible_devices_env.RULE,
    no_privileged_gpu.RULE,
)

MUTATIONS: tuple[Mutation, ...] = (
    ld_library_path.MUTATION,
    accelerator_node_selector.MUTATION,
)

RULE_IDS: tuple[str, ...] = tuple(rule.id for rule in RULES)
