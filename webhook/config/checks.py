"""The checks beyond the schema (webhook.config.schema) a config value goes through, each reporting
into a list of problems (all of a file's problems are reported together, each naming its key):
label selectors, resource-name patterns, and custom resources' template paths; and the syntax of
Kubernetes names and label keys, which the schema's patterns are made of.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..policy.templates import Shape, Templates, parse_path
from ..policy.types import PolicyException

VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?")


LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A date; a YAML date Helm passes on as a timestamp at midnight UTC means the same day.
DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T00:00:00Z)?$")


SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def kind_of(value: Any) -> str:
    """What was found, value included: `str 'yes'`, `int 1`, `null`, `list ['a']` (shortened)."""
    if value is None:
        return "null"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 60 else shown[:57] + '...'}"


OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def label_selector(
    problems: list[str], key: str, value: Any
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, tuple[str, ...]], ...]]:
    """A Kubernetes label selector (matchLabels, matchExpressions), or null: (pairs, expressions)."""
    if value is None:
        return (), ()
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be null or a label selector (matchLabels, matchExpressions), got {kind_of(value)}"
        )
        return (), ()
    for extra in sorted(set(value) - {"matchLabels", "matchExpressions"}):
        problems.append(f"{key}.{extra}: unknown key (a label selector has matchLabels and matchExpressions)")
    pairs: list[tuple[str, str]] = []
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        problems.append(f"{key}.matchLabels: must be a mapping of label keys to values, got {kind_of(labels)}")
        labels = {}
    for k, v in labels.items():
        if not isinstance(k, str) or not LABEL_KEY.fullmatch(k) or not isinstance(v, str):
            problems.append(f"{key}.matchLabels: {k!r}: {v!r} is not a label key and a string value")
        else:
            pairs.append((k, v))
    expressions: list[tuple[str, str, tuple[str, ...]]] = []
    found = value.get("matchExpressions") or []
    if not isinstance(found, list):
        problems.append(f"{key}.matchExpressions: must be a list, got {kind_of(found)}")
        found = []
    for i, e in enumerate(found):
        where = f"{key}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or e.get("operator") not in OPERATORS:
            problems.append(f"{where}: must have a key and an operator of {', '.join(OPERATORS)}, got {e!r}")
            continue
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(f"{where}.values: must be a list of strings, got {kind_of(values)}")
            continue
        if (e["operator"] in ("In", "NotIn")) != bool(values):
            problems.append(f"{where}: In and NotIn need values, Exists and DoesNotExist take none")
            continue
        expressions.append((e["key"], e["operator"], tuple(values)))
    # matchLabels sorted by key: the order Helm ranges over a map in, so the chart's native policy
    # names the selector as the webhook does (gpu-namespace-allowed.wanted).
    return tuple(sorted(pairs)), tuple(expressions)


def resource_patterns(problems: list[str], key: str, value: list[Any], ok: Callable[[str], bool]) -> list[str]:
    """Resource names, each with at most one * (fnmatch: nvidia.com/mig-* matches every MIG profile);
    items the schema refused (`ok` is false for them) were reported already."""
    out = []
    for i, name in enumerate(value):
        if not ok(f"{key}[{i}]"):
            continue
        bare = name.replace("*", "x", 1)
        if name.count("*") > 1 or "/" not in bare or not LABEL_KEY.fullmatch(bare):
            problems.append(f"{key}[{i}]: {name!r} is not a domain-qualified resource name (one * allowed)")
        else:
            out.append(name)
    return out


CR_KEYS = ("group", "kind", "templates", "podSpecs", "containers")


def custom_resources(value: list[Any], problems: list[str]) -> dict[tuple[str, str], Templates]:
    """customResources: [{group, kind, templates|podSpecs|containers: [path, ...]}] -> the table.

    Three shapes, as pod specs live in the wild: `templates` ({metadata, spec}: Kubeflow, Ray),
    `podSpecs` (a PodSpec inline: KServe's predictor), `containers` (one container-like object:
    Argo's container, KServe's model). At least one list is required.
    """
    out: dict[tuple[str, str], Templates] = {}
    shapes = tuple(shape.key for shape in Shape)
    for i, item in enumerate(value):
        where = f"customResources[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: must be a mapping with group, kind and templates, podSpecs or containers")
            continue
        for key in item:
            if key not in CR_KEYS:
                hint = difflib.get_close_matches(str(key), CR_KEYS, n=1)
                problems.append(f"{where}.{key}: unknown key" + (f" (did you mean {where}.{hint[0]}?)" if hint else ""))
        group, kind = item.get("group", ""), item.get("kind")
        if not isinstance(group, str):
            problems.append(f'{where}.group: must be a string ("" for the core group)')
        if not isinstance(kind, str) or not kind:
            problems.append(f"{where}.kind: is required")
        found: dict[str, tuple[tuple[str, ...], ...]] = {}
        for key in shapes:
            texts = item.get(key)
            if texts is None:
                continue
            if not isinstance(texts, list) or not texts:
                problems.append(f"{where}.{key}: must be a non-empty list of paths such as spec.tasks[*].template")
                continue
            paths = []
            for j, text in enumerate(texts):
                try:
                    paths.append(parse_path(text if isinstance(text, str) else ""))
                except ValueError as exc:
                    problems.append(f"{where}.{key}[{j}]: {exc}")
            found[key] = tuple(paths)
        if not any(key in item for key in shapes):
            problems.append(f"{where}: needs templates, podSpecs or containers (paths such as spec.tasks[*].template)")
        if (group, kind) == ("", "Pod"):
            problems.append(f"{where}: a Pod is judged as itself (every container of its spec); it takes no paths")
        elif isinstance(group, str) and isinstance(kind, str) and kind:
            out[(group, kind)] = Templates(
                found.get("templates", ()),
                pod_specs=found.get("podSpecs", ()),
                containers=found.get("containers", ()),
            )
    return out


EXCEPTION_KEYS = ("name", "namespace", "rules", "owner", "reason", "expires", "podLabels")


def exceptions(value: list[Any], rule_ids: frozenset[str], problems: list[str]) -> tuple[PolicyException, ...]:
    """`exceptions`, each named by its index and key when wrong: an exception nobody can read the
    owner or the end of is no exception at all."""
    import datetime

    out: list[PolicyException] = []
    names: set[str] = set()
    for i, e in enumerate(value):
        where = f"exceptions[{i}]"
        if not isinstance(e, Mapping):
            problems.append(f"{where}: must be {{name, namespace, rules, owner, reason, expires}}, got {kind_of(e)}")
            continue
        found = len(problems)
        for key in sorted(set(e) - set(EXCEPTION_KEYS)):
            problems.append(f"{where}.{key}: unknown key (keys: {', '.join(EXCEPTION_KEYS)})")
        for key in EXCEPTION_KEYS[:6]:
            if key not in e:
                problems.append(f"{where}.{key}: is required (an exception says what, where, who and until when)")
        for key in ("name", "namespace"):
            if isinstance(e.get(key), str) and not NAMESPACE_NAME.fullmatch(e[key]):
                problems.append(f"{where}.{key}: {e[key]!r} is not a name (lower case letters, digits and -)")
            elif key in e and not isinstance(e.get(key), str):
                problems.append(f"{where}.{key}: must be a string, got {kind_of(e[key])}")
        rules = e.get("rules")
        if "rules" in e and (not isinstance(rules, list) or not rules):
            problems.append(f"{where}.rules: must be a non-empty list of rule ids, got {kind_of(rules)}")
        elif isinstance(rules, list):
            for j, r in enumerate(rules):
                if r not in rule_ids:
                    close = difflib.get_close_matches(str(r), sorted(rule_ids), 1)
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    problems.append(f"{where}.rules[{j}]: {r!r} is not a rule id{hint}")
        for key in ("owner", "reason"):
            if key in e and (not isinstance(e[key], str) or not e[key].strip()):
                problems.append(f"{where}.{key}: must be a non-empty string, got {kind_of(e[key])}")
        expires = e.get("expires")
        if isinstance(expires, datetime.date):  # unquoted in YAML: the same day
            expires = expires.isoformat()[:10]
        if "expires" in e:
            try:
                if not isinstance(expires, str) or not DATE.fullmatch(expires):
                    raise ValueError
                expires = expires[:10]
                datetime.date.fromisoformat(expires)
            except ValueError:
                problems.append(
                    f"{where}.expires: must be a date YYYY-MM-DD (the last day it applies, UTC), got {expires!r}"
                )
        labels = e.get("podLabels", {})
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            problems.append(f"{where}.podLabels: must be a mapping of label keys to values, got {kind_of(labels)}")
            labels = {}
        name = e.get("name")
        if isinstance(name, str) and name in names:
            problems.append(f"{where}.name: {name!r} is used by another exception (names must be unique)")
        if isinstance(name, str):
            names.add(name)
        if len(problems) == found:
            out.append(
                PolicyException(
                    name=e["name"],
                    namespace=e["namespace"],
                    rules=frozenset(e["rules"]),
                    owner=e["owner"].strip(),
                    reason=e["reason"].strip(),
                    expires=str(expires),
                    pod_labels=tuple(sorted(labels.items())),
                )
            )
    return tuple(out)
