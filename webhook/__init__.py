"""gpu-policy: a Kubernetes admission webhook that keeps nvidia.com/gpu workloads honest."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def core_build() -> str:
    """Whether the policy core runs compiled (mypyc) or as pure Python, and why (webhook.policy._build)."""
    from .policy import BUILD, engine

    compiled = not engine.__file__ or engine.__file__.endswith((".so", ".pyd"))
    assert compiled == BUILD.startswith("compiled"), (BUILD, engine.__file__)
    return BUILD


def package_version() -> str:
    """The version pyproject.toml declares (the one place it is written; the chart's appVersion
    is generated from it), as the installed package metadata carries it."""
    try:
        return version("gpu-policy")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
