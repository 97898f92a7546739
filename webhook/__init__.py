"""gpu-policy: a Kubernetes admission webhook that keeps nvidia.com/gpu workloads honest."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._build import choose_build

# Before any submodule is imported: the mypyc build of the policy core and the protocol layer
# runs only when it is the build of the sources beside it (webhook._build).
BUILD = choose_build()


def core_build() -> str:
    """Whether the policy core and the protocol layer run compiled (mypyc) or as pure Python, and
    why (webhook._build)."""
    from .admission import decide
    from .policy import engine

    for module in (engine, decide):
        compiled = not module.__file__ or module.__file__.endswith((".so", ".pyd"))
        assert compiled == BUILD.startswith("compiled"), (BUILD, module.__file__)
    return BUILD


def package_version() -> str:
    """The version pyproject.toml declares (the one place it is written; the chart's appVersion
    is generated from it), as the installed package metadata carries it."""
    try:
        return version("gpu-policy")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
