"""Host paths as the node resolves them: what every hostPath rule compares (no-gpu-device-hostpath,
host-shm, driver-hostpath-non-gpu, node-wide-access) and gke-device-annotation's device paths.

Shared here, not in one rule, so rules stay independent of each other (an import-linter contract).
"""

from __future__ import annotations

from typing import Final


def normalise(path: str) -> str:
    """Collapse //, ., .., trailing slashes, and spell /var/run as /run (a symlink on nodes)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    norm = "/" + "/".join(parts)
    if norm == "/var/run" or norm.startswith("/var/run/"):
        norm = "/run" + norm[len("/var/run") :]
    return norm


def under(path: str, root: str) -> bool:
    """Normalised `path` is `root` or lies below it (everything lies below "/")."""
    return path == root or path.startswith(root + "/") or root == "/"


def overlaps(path: str, root: str) -> bool:
    """A hostPath of normalised `path` reaches `root`: it is, lies under, or contains it."""
    return under(path, root) or under(root, path)


# Shared memory, not a device: every EKS/NCCL multi-node training sample mounts the host's
# /dev/shm into pods that already hold their GPUs. The `host-shm` rule (off by default) covers it.
SHM: Final = "/dev/shm"
