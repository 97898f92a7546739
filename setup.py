"""Build hook: compile the policy core (webhook/policy) with mypyc when asked, pure Python otherwise.

`GPU_POLICY_MYPYC=1 pip wheel .` (what `make image` and `make image-test` do) compiles the core,
which the strict typing (`mypy --strict`) makes possible, into C extensions: about twice as fast
per pod (bench.core). If mypyc or a C compiler is missing, the build says so and ships pure Python:
installing must never fail for that reason. Development installs (`make venv`, editable) stay pure,
so an edited rule is never shadowed by a stale compiled module.
"""

from __future__ import annotations

import glob
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
    modules = sorted(p for p in glob.glob("webhook/policy/**/*.py", recursive=True) if not p.endswith("__init__.py"))
    try:
        return mypycify(modules, opt_level="3")
    except Exception as exc:  # a type error mypyc cannot compile: pure Python, never a failed install
        print(f"gpu-policy: mypyc could not compile the core ({exc}); installing pure Python", file=sys.stderr)
        return []


setup(ext_modules=compiled_core(), cmdclass={"build_ext": OptionalBuildExt})
