"""The configuration's one schema: every key's shape (type, allowed values, range, syntax) as JSON
Schema (draft-07, Helm's dialect), with the words its error messages use.

Two readers, one description: `webhook.config.settings` validates a config file with it
(jsonschema, every problem at once, each named by its key path), and `make generate` writes it into
the chart's values.schema.json as `policy`, so Helm refuses at install what the server would refuse
at start-up. What no schema can say (a selector's In needs values, a template path parses, the
in-flight budget holds a whole request) is checked by settings after the schema, key by key.

The words are annotations (`x-` keywords, which JSON Schema ignores and the chart's copy drops):
  x-expect   what a value of the wrong type should have been: "must be {x-expect}, got int 5"
  x-pattern  what a string that fails `pattern` is: "'Kube_System' {x-pattern}"
  x-range    what a number out of range must be, when "at least/between" does not say it
  x-why      why the range is what it is, appended to the message
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from ..policy import RULE_IDS, Mode
from . import checks
from .checks import CR_KEYS, LABEL_KEY, NAMESPACE_NAME, OPERATORS, SUBDOMAIN, kind_of

Schema = dict[str, Any]

# The ECMA-262 spelling of checks' patterns (Helm's Go validator and Python's re read both alike).
_SERVICE_ACCOUNT = NAMESPACE_NAME.pattern[:-1] + "/" + SUBDOMAIN.pattern[1:]
CR_SHAPES: Final = CR_KEYS[2:]  # templates, podSpecs, containers
_VERSION = r"^(auto|unknown|v?[0-9]+\.[0-9]+.*)$"


def _boolean() -> Schema:
    return {"type": "boolean"}


def _strings(
    what: str = "a list of strings", pattern: re.Pattern[str] | str | None = None, noun: str = "", longest: int = 0
) -> Schema:
    """A list of non-empty strings; with `pattern`, each must match it (`noun` says what it is)."""
    item: Schema = {"type": "string", "minLength": 1, "x-expect": "a non-empty string"}
    if pattern is not None:
        item["pattern"] = pattern if isinstance(pattern, str) else pattern.pattern
        item["x-pattern"] = f"is not {noun}"
    if longest:
        item["maxLength"] = longest
    return {"type": "array", "items": item, "x-expect": what}


def _resources() -> Schema:
    """Resource names or one-star patterns (settings checks the name: a domain, one * at most)."""
    item = {"type": "string", "x-expect": "a resource name"}
    return {"type": "array", "items": item, "x-expect": "a list of resource names"}


def _paths() -> Schema:
    return {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}


def _seconds(low: float, high: float, *, exclusive: bool = False, range_: str = "") -> Schema:
    s: Schema = {"type": "number", "maximum": high, "x-expect": "a number of seconds"}
    s["exclusiveMinimum" if exclusive else "minimum"] = low
    if range_:
        s["x-range"] = range_
    return s


def _object(properties: Mapping[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "additionalProperties": False, "properties": dict(properties), **extra}


@cache
def config_schema() -> Schema:
    """The schema of a config file (the chart's `policy` values), keys in DEFAULTS' order."""
    modes = [m.value for m in Mode]
    # An enum names the values it takes, so none has a type beside it ("must be a string" would
    # be a poorer message than "must be one of ...").
    return _object(
        {
            "rollout": {"enum": ["enforce", "audit"]},
            "rules": _object({rule: {"enum": modes} for rule in RULE_IDS}),
            "sharedGpu": _boolean(),
            "gpuResourceName": {
                "type": "string",
                "pattern": LABEL_KEY.pattern,
                "x-pattern": "is not a valid resource name",
            },
            "gpuDeviceResources": _resources(),
            "gpuSharedResources": _resources(),
            "gpuCompanionResources": _resources(),
            "vendors": _object(
                {
                    "amd": _object({"enabled": _boolean(), "runtimeEnv": _boolean()}),
                    "intel": _object({"enabled": _boolean()}),
                }
            ),
            "integrations": _object(
                {
                    "kai": _object({"enabled": _boolean(), "schedulerNames": _strings()}),
                    "hami": _object({"enabled": _boolean()}),
                    "xgpu": _object({"enabled": _boolean()}),
                }
            ),
            "exemptNamespaces": _strings("a list of namespace names", NAMESPACE_NAME, "a namespace name", 63),
            "exemptServiceAccounts": _strings("a list of namespace/name", _SERVICE_ACCOUNT, "namespace/name"),
            "exemptUsernames": _strings(),
            "exceptions": {
                "type": "array",
                "x-expect": "a list of {name, namespace, rules, owner, reason, expires, podLabels}",
                "x-deeper": "settings",
                "items": _object(
                    {
                        "name": {"type": "string", "pattern": NAMESPACE_NAME.pattern},
                        "namespace": {"type": "string", "pattern": NAMESPACE_NAME.pattern},
                        "rules": {"type": "array", "minItems": 1, "items": {"enum": sorted(RULE_IDS)}},
                        "owner": {"type": "string", "minLength": 1},
                        "reason": {"type": "string", "minLength": 1},
                        "expires": {"type": "string", "pattern": checks.DATE.pattern},
                        "podLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                    required=["name", "namespace", "rules", "owner", "reason", "expires"],
                ),
            },
            "nodeAgentImages": _strings(),
            "gpuNodeLabels": _strings("a list of label keys", LABEL_KEY, "a valid label key"),
            "gpuRuntimeClasses": _strings(),
            "gpuDeviceClasses": _strings("a list of DeviceClass names", SUBDOMAIN, "a DeviceClass name"),
            "gpuNamespaces": _strings("a list of namespace names", NAMESPACE_NAME, "a namespace name"),
            "draAdminAccessNamespaces": _strings("a list of namespace names", NAMESPACE_NAME, "a namespace name"),
            "gpuNamespaceSelector": {
                "type": ["object", "null"],
                "x-expect": "null or a label selector (matchLabels, matchExpressions)",
                "x-deeper": "settings",
                "additionalProperties": False,
                "properties": {
                    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "matchExpressions": {
                        "type": "array",
                        "items": _object(
                            {
                                "key": {"type": "string"},
                                "operator": {"enum": list(OPERATORS)},
                                "values": {"type": "array", "items": {"type": "string"}},
                            },
                            required=["key", "operator"],
                        ),
                    },
                },
            },
            "gpuMaxPerPod": {"type": "integer", "minimum": 1, "x-expect": "a whole number of GPUs"},
            "gpuKindsAllowed": {"type": "array", "items": {"type": "string"}, "x-expect": "a list of GPU kinds"},
            "gpuControllerKinds": _strings(),
            "gpuInstanceTypes": _strings(),
            "webhookNamespace": {
                "type": ["string", "null"],
                "pattern": NAMESPACE_NAME.pattern,
                "x-expect": "a namespace name",
                "x-pattern": "is not a namespace name",
            },
            "clusterVersion": {
                "type": "string",
                "pattern": _VERSION,
                "x-expect": '"auto", "unknown" or a version such as "1.27"',
                "x-pattern": 'is not "auto", "unknown" or a version such as "1.27"',
            },
            "ldLibraryPath": _object(
                {
                    "enabled": _boolean(),
                    "path": {
                        "type": "string",
                        "pattern": "^/[^:]*$",
                        "x-expect": "an absolute path",
                        "x-pattern": "must be an absolute path without ':'",
                    },
                    "whenUnset": {"enum": ["inject", "warn"]},
                }
            ),
            "acceleratorNodeSelector": _object(
                {
                    "labelKey": {
                        "type": "string",
                        "pattern": LABEL_KEY.pattern,
                        "x-expect": "a label key",
                        "x-pattern": "is not a valid label key",
                    },
                    "default": {
                        "type": ["string", "null"],
                        "maxLength": 63,
                        "x-expect": "null or a label value such as nvidia-t4",
                        "x-range": "null or a label value such as nvidia-t4",
                    },
                }
            ),
            "optOutAnnotation": {
                "type": "string",
                "pattern": LABEL_KEY.pattern,
                "x-expect": "an annotation key",
                "x-pattern": "is not a valid annotation key",
            },
            "isolateNonGpu": _boolean(),
            "nodeProfile": _object({"toolkitReadsEnv": _boolean()}),
            "customResources": {
                "type": "array",
                "x-expect": "a list of {group, kind, templates}",
                "x-deeper": "settings",
                "items": _object(
                    {
                        "group": {"type": "string"},
                        "kind": {"type": "string", "minLength": 1},
                        **{shape: _paths() for shape in CR_SHAPES},
                    },
                    required=["kind"],
                    anyOf=[{"required": [shape]} for shape in CR_SHAPES],
                ),
            },
            "server": _object(
                {
                    "maxRequestBytes": {
                        "type": "integer",
                        "minimum": 65536,
                        "x-why": "admission bodies reach several MiB",
                    },
                    "maxConnections": {"type": "integer", "minimum": 1},
                    "maxInflightBytes": {"type": "integer", "minimum": 65536},
                    "certReloadSeconds": _seconds(0, 3600, exclusive=True),
                    "configReloadSeconds": _seconds(0, 3600),
                    "drainSeconds": _seconds(0, 300),
                    "idleSeconds": _seconds(0.1, 3600),
                    "headerSeconds": _seconds(0.1, 60),
                    "bodySeconds": _seconds(0.1, 60),
                    "writeSeconds": _seconds(0.1, 300),
                    # 0 (read once) or a period of at least a second
                    "clusterVersionSeconds": _seconds(0, 86400, range_="0 or between 1 and 86400")
                    | {"not": {"exclusiveMinimum": 0, "exclusiveMaximum": 1}},
                    "clusterView": {"enum": ["auto", "off"]},
                }
            ),
        }
    )


def chart_schema() -> Schema:
    """The copy values.schema.json carries as `policy`: plain JSON Schema (no `x-` words), without
    webhookNamespace (the chart sets it to the release's namespace)."""

    def plain(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items() if not (isinstance(k, str) and k.startswith("x-"))}
        if isinstance(node, list):
            return [plain(v) for v in node]
        return node

    schema: Schema = plain(config_schema())
    del schema["properties"]["webhookNamespace"]
    return schema


# Of several problems with one value, the one worth saying (a missing string before its syntax).
_FIRST: Final = ("type", "enum", "minLength", "maxLength", "pattern", "minimum", "exclusiveMinimum", "maximum")


def problems(config: Mapping[str, Any]) -> list[tuple[tuple[int, ...], str, str]]:
    """Every value of `config` (merged over DEFAULTS: no unknown keys left) that the schema refuses,
    once per key: (position in the schema's key order, key path, message)."""
    found: dict[str, tuple[tuple[int, ...], int, str]] = {}
    for error in _validator()(config_schema()).iter_errors(config):
        path = list(error.absolute_path)
        if _deeper(path):
            continue  # settings checks inside with more precise messages
        where = _key(path)
        rank = _FIRST.index(error.validator) if error.validator in _FIRST else len(_FIRST)
        if where not in found or rank < found[where][1]:
            said = _message(str(error.validator), error.validator_value, error.schema, error.instance)
            found[where] = (_position(path), rank, said)
    return sorted((position, where, message) for where, (position, _, message) in found.items())


@cache
def _validator() -> Any:
    """Draft 7 with `pattern` read as JSON Schema reads it (ECMA-262; Helm's Go regexp alike): a
    final `$` is the end of the text, where Python's also matches before a trailing newline, so
    "kube-system\n" would pass here and fail in Helm."""
    from jsonschema import Draft7Validator, ValidationError, validators

    def pattern(_validator: Any, expected: str, instance: Any, _schema: Any) -> Any:
        if isinstance(instance, str) and not _ecma(expected).search(instance):
            yield ValidationError(f"{instance!r} does not match {expected!r}")

    return validators.extend(Draft7Validator, {"pattern": pattern})  # type: ignore[no-untyped-call]


@cache
def _ecma(expected: str) -> re.Pattern[str]:
    return re.compile(expected[:-1] + r"\Z" if expected.endswith("$") and not expected.endswith("\\$") else expected)


def position(key: str) -> tuple[int, ...]:
    """Where a dotted key (`server.idleSeconds`, `exemptNamespaces[2]`) is in the schema's order."""
    path: list[str | int] = []
    for part in key.split("."):
        name, _, rest = part.partition("[")
        path.append(name)
        path.extend(int(i) for i in re.findall(r"(\d+)\]", "[" + rest) if rest)
    return _position(path)


def _nodes(path: list[Any]) -> list[tuple[int, Any]]:
    """The schema's nodes along `path`, each with its position among its siblings (an item's index;
    a key's place in its properties, past the end when the schema does not name it)."""
    out: list[tuple[int, Any]] = []
    node: Any = config_schema()
    for part in path:
        node = node if isinstance(node, dict) else {}
        if isinstance(part, int):
            out.append((part, node := node.get("items", {})))
        else:
            props = node.get("properties", {})
            out.append((list(props).index(part) if part in props else len(props), node := props.get(part, {})))
    return out


def _position(path: list[Any]) -> tuple[int, ...]:
    return tuple(at for at, _ in _nodes(path))


def _deeper(path: list[Any]) -> bool:
    """Whether `path` lies inside a key whose insides settings checks (x-deeper)."""
    return any(isinstance(node, dict) and node.get("x-deeper") for _, node in _nodes(path)[:-1])


def _key(path: list[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_TYPE_WORDS: Final = {
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "array": "a list",
    "object": "a mapping",
}


def _message(keyword: str, expected: Any, schema: Mapping[str, Any], value: Any) -> str:
    kind = schema.get("type")
    what = schema.get("x-expect") or _TYPE_WORDS.get(kind if isinstance(kind, str) else "", "")
    if keyword == "type":
        return f"must be {what}, got {kind_of(value)}"
    if keyword == "enum":
        words = [str(v) for v in expected]
        alternatives = f"{words[0]} or {words[1]}" if len(words) == 2 else "one of " + ", ".join(words)
        return f"must be {alternatives}, got {value!r}"
    if keyword in ("pattern", "minLength", "maxLength"):
        if "x-pattern" in schema and keyword != "minLength":
            return f"{value!r} {schema['x-pattern']}"
        return f"must be {what}, got {value!r}"
    if keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "not"):
        why = f" ({schema['x-why']})" if "x-why" in schema else ""
        return f"must be {schema.get('x-range') or _range(schema)}{why}"
    return f"must be {what} ({keyword}: {expected!r})"


def _range(schema: Mapping[str, Any]) -> str:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum")
    if low is not None and high is not None:
        return f"between {low:g} and {high:g}"
    return f"at least {low:g}" if low is not None else f"at most {high:g}"
