"""gpu-policy: a Kubernetes admission webhook that keeps nvidia.com/gpu workloads honest."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def core_build() -> str:
    """Whether the policy core runs compiled (mypyc, the image's build) or as pure Python."""
    from .policy import engine

    return "compiled with mypyc" if not engine.__file__ or engine.__file__.endswith((".so", ".pyd")) else "pure Python"


def package_version() -> str:
    """The version pyproject.toml declares (the one place it is written; the chart's appVersion
    is generated from it), as the installed package metadata carries it."""
    try:
        return version("gpu-policy")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
