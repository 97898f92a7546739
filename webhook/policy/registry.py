"""The explicit lists of rules and mutations, in the order their messages appear."""

from __future__ import annotations

from .mutations import accelerator_node_selector, isolate_non_gpu, ld_library_path
from .rules import (
    gpu_limitrange,
    gpu_quantity,
    gpu_requests_equal_limits,
    no_cdi_annotations,
    no_gpu_device_hostpath,
    no_host_namespaces_gpu,
    no_privileged_gpu,
    no_visible_devices_env,
    visible_devices_envfrom,
)
from .types import Mode, Mutation, ObjectRule, Rule

# Rules over a pod spec (of a Pod or of any pod template).
RULES: tuple[Rule, ...] = (
    gpu_quantity.RULE,
    gpu_requests_equal_limits.RULE,
    no_visible_devices_env.RULE,
    no_privileged_gpu.RULE,
    no_gpu_device_hostpath.RULE,
    no_cdi_annotations.RULE,
    no_host_namespaces_gpu.RULE,
    visible_devices_envfrom.RULE,
)

# Rules over whole objects of other kinds.
OBJECT_RULES: tuple[ObjectRule, ...] = (gpu_limitrange.RULE,)

MUTATIONS: tuple[Mutation, ...] = (
    ld_library_path.MUTATION,
    accelerator_node_selector.MUTATION,
    isolate_non_gpu.MUTATION,
)

OBJECT_RULES_BY_KIND: dict[tuple[str, str], tuple[ObjectRule, ...]] = {
    kind: tuple(r for r in OBJECT_RULES if kind in r.kinds) for rule in OBJECT_RULES for kind in rule.kinds
}

ALL_RULES: tuple[Rule | ObjectRule, ...] = (*RULES, *OBJECT_RULES)
RULE_IDS: tuple[str, ...] = tuple(r.id for r in ALL_RULES)
DEFAULT_MODES: dict[str, Mode] = {r.id: r.default_mode for r in ALL_RULES}
