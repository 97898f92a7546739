"""gpu-policy: a Kubernetes admission webhook that keeps nvidia.com/gpu workloads honest."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The version pyproject.toml declares (the one place it is written; the chart's appVersion
    is generated from it), as the installed package metadata carries it."""
    try:
        return version("gpu-policy")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
