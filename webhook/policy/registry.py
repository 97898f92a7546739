"""The explicit lists of rules and mutations, in the order their messages appear."""

from __future__ import annotations

from collections.abc import Callable

from .mutations import accelerator_node_selector, ld_library_path
from .objects import PodView
from .patch import Op
from .rules import gpu_quantity, gpu_requests_equal_limits, no_privileged_gpu, no_visible_devices_env
from .types import Policy, Rule

MutateFn = Callable[[PodView, Policy], tuple[list[Op], list[str]]]

RULES: tuple[Rule, ...] = (
    gpu_quantity.RULE,
    gpu_requests_equal_limits.RULE,
    no_visible_devices_env.RULE,
    no_privileged_gpu.RULE,
)

MUTATIONS: tuple[tuple[str, MutateFn], ...] = (
    (ld_library_path.ID, ld_library_path.mutate),
    (accelerator_node_selector.ID, accelerator_node_selector.mutate),
)

RULE_IDS: tuple[str, ...] = tuple(rule.id for rule in RULES)
