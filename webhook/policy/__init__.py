"""The pure policy core: plain dicts in, verdicts and JSONPatch operations out.

Layers: `types` (plain data), `objects` (the one checked walk into a typed `PodView`),
`rules/` and `mutations/` (one module each, pure functions plus their description),
`registry` (the ordered lists, generated), `engine` (find, judge, mutate). Nothing here
imports anything outside this package (see the import-linter contract in pyproject.toml).

The core may run compiled by mypyc (setup.py): webhook._build decides, once, when the `webhook`
package is imported (always before this one), whether the extension modules next to these sources
are the build of exactly these sources; if not (an edited rule, GPU_POLICY_PURE=1) every module is
imported from source.
"""

from __future__ import annotations

from .engine import (
    ALL_RULES,
    DEFAULT_MODES,
    RULE_IDS,
    Verdict,
    find_violations,
    judge,
    mutate,
    mutate_new_ephemeral,
    pod_view,
    pod_views,
    pod_violations,
    watches_namespaces,
)
from .objects import PodView
from .registry import MUTATIONS, OBJECT_RULES, RULES
from .rule import Mutation, ObjectRule, Rule, Trigger, Where
from .shapes import ShapeError, group_of
from .types import Changes, Mode, Policy, Violation

__all__ = [
    "ALL_RULES",
    "DEFAULT_MODES",
    "MUTATIONS",
    "OBJECT_RULES",
    "RULES",
    "RULE_IDS",
    "Changes",
    "Mode",
    "Mutation",
    "ObjectRule",
    "PodView",
    "Policy",
    "Rule",
    "ShapeError",
    "Trigger",
    "Verdict",
    "Violation",
    "Where",
    "find_violations",
    "group_of",
    "judge",
    "mutate",
    "mutate_new_ephemeral",
    "pod_view",
    "pod_views",
    "pod_violations",
    "watches_namespaces",
]
