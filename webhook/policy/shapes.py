"""The shape checks every field read goes through: a value that is not what the Kubernetes API
allows raises ShapeError naming its field path, so "malformed" is always a clear error, never a
silent allow. Paths are passed in two parts and joined only when there is an error to report.
"""

from __future__ import annotations

from typing import Any


class ShapeError(ValueError):
    """The object does not have the shape the Kubernetes API gives it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def group_of(api_version: object) -> str:
    """ "apps/v1" -> "apps"; "v1" -> "" (the core group)."""
    if not isinstance(api_version, str):
        return ""
    return api_version.rpartition("/")[0] if "/" in api_version else ""


# JSON and YAML decode to plain dicts and lists; `isinstance(x, dict)` is a fast C check where
# `isinstance(x, Mapping)` goes through the ABC machinery on every field.
# Paths are passed in two parts and joined only when there is an error to report: building
# every field's path string up front cost more than the checks themselves.
def join_path(base: str, suffix: str) -> str:
    return f"{base}.{suffix}" if base and suffix else base or suffix


def as_mapping(value: Any, base: str, suffix: str = "", *, optional: bool = True) -> dict[str, Any] | None:
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise ShapeError(join_path(base, suffix), f"must be an object, got {type_name(value)}")
    return value


def as_list(value: Any, base: str, suffix: str = "") -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ShapeError(join_path(base, suffix), f"must be a list, got {type_name(value)}")
    return value


def as_string(value: Any, base: str, suffix: str = "") -> str:
    if not isinstance(value, str):
        raise ShapeError(join_path(base, suffix), f"must be a string, got {type_name(value)}")
    return value


def as_flag(value: Any, base: str, suffix: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ShapeError(join_path(base, suffix), f"must be a boolean, got {type_name(value)}")
    return value


def type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


def dig(node: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def objects_at(value: Any, base: str, field: str) -> list[dict[str, Any]]:
    """`value` checked as a list of objects (envFrom, volumeMounts, volumes); paths only on error."""
    if not isinstance(value, list):
        raise ShapeError(f"{base}.{field}", f"must be a list, got {type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ShapeError(f"{base}.{field}[{i}]", f"must be an object, got {type_name(item)}")
    return value


def quote_key(key: str) -> str:
    """A resource or label key as Kubernetes prints it in field paths."""
    return f'["{key}"]' if "/" in key or "." in key else f".{key}"
