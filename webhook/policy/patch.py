"""Small helpers for building RFC 6902 operations by hand."""

from __future__ import annotations

from typing import Any

Op = dict[str, Any]


def escape(token: str) -> str:
    """RFC 6901: '~' -> '~0' and '/' -> '~1' (nvidia.com/gpu -> nvidia.com~1gpu)."""
    return token.replace("~", "~0").replace("/", "~1")


def add(path: str, value: Any) -> Op:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> Op:
    return {"op": "replace", "path": path, "value": value}


def append_env(container_pointer: str, has_env: bool, entry: dict[str, str]) -> Op:
    """Append one env entry, creating `env` when the container has none."""
    if has_env:
        return add(f"{container_pointer}/env/-", entry)
    return add(f"{container_pointer}/env", [entry])


def join(ops: list[Op], more: list[Op]) -> None:
    """Append `more` to `ops`, one patch of several mutations: each mutation builds its ops from the
    pod as it came, so two may both create a container's absent `env` (ld-library-path's entry,
    then isolation's AMD_VISIBLE_DEVICES=none in the same GPU container). The later create would
    replace the earlier list; it becomes appends instead, in order. One pass over each list: a pod
    of a thousand containers makes a patch of thousands of ops."""
    if not ops or not more:  # the first mutation with ops, or one without: nothing to reconcile
        ops.extend(more)
        return
    created = {o["path"] for o in ops if o["op"] == "add" and o["path"].endswith("/env")}
    for op in more:
        path = op["path"]
        creates = op["op"] == "add" and path.endswith("/env") and isinstance(op["value"], list)
        if creates and path in created:
            ops.extend(add(f"{path}/-", entry) for entry in op["value"])
        else:
            ops.append(op)
