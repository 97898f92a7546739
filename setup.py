"""Build hook: compile the policy core (webhook/policy) and the protocol layer (review, admission)
with mypyc when asked, pure Python otherwise.

`GPU_POLICY_MYPYC=1 pip wheel .` (what `make image` and `make image-test` do) compiles the core,
which the strict typing (`mypy --strict`) makes possible, into C extensions: about twice as fast
per pod (bench.core). If mypyc or a C compiler is missing, the build says so and ships pure Python:
installing must never fail for that reason. `make compiled` (a dependency of `make run` and
`make test`) builds the same extensions in place; webhook/_build.py runs them only while
they are the build of the sources beside them, so an edited rule is never shadowed by a stale
compiled module.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the compiled core, or nothing: a half-built set of extensions would not import."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: ship pure Python
            print(f"gpu-policy: mypyc build failed ({exc}); installing pure Python", file=sys.stderr)
            self.extensions = []


def compiled_core() -> list:
    if os.environ.get("GPU_POLICY_MYPYC") != "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("gpu-policy: mypyc not available; installing pure Python", file=sys.stderr)
        return []
    # The policy core (but its __init__, which only re-exports) and the protocol layer: the list
    # webhook/_build.py checks at import against the manifest written here.
    build = _build_module()
    modules = [str(p.relative_to(build.HERE.parent)) for p in build.sources()]
    try:
        # The shared library inside the package (webhook/_native__mypyc.*.so), not a top-level
        # module that only a source tree's cwd would put on sys.path.
        extensions = mypycify(modules, opt_level="3", group_name="webhook._native")
    except Exception as exc:  # a type error mypyc cannot compile: pure Python, never a failed install
        print(f"gpu-policy: mypyc could not compile the core ({exc}); installing pure Python", file=sys.stderr)
        return []
    write_manifest()
    return extensions


def _build_module():  # type: ignore[no-untyped-def]
    """webhook/_build.py, loaded by path: importing the package would run its import-time choice."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_gpu_policy_build", "webhook/_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_manifest() -> None:
    """webhook/_compiled.json: the sha256 of every source compiled (see webhook/_build.py)."""
    import json

    build = _build_module()
    build.MANIFEST.write_text(json.dumps(build.manifest(), indent=1, sort_keys=True) + "\n")


setup(ext_modules=compiled_core(), cmdclass={"build_ext": OptionalBuildExt})
