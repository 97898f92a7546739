"""Build hook: compile the policy core (webhook/policy) with mypyc when asked, pure Python otherwise.

`GPU_POLICY_MYPYC=1 pip wheel .` (what `make image` and `make image-test` do) compiles the core,
which the strict typing (`mypy --strict`) makes possible, into C extensions: about twice as fast
per pod (bench.core). If mypyc or a C compiler is missing, the build says so and ships pure Python:
installing must never fail for that reason. `make compiled` (a dependency of `make run` and
`make test`) builds the same extensions in place; webhook/policy/_build.py runs them only while
they are the build of the sources beside them, so an edited rule is never shadowed by a stale
compiled module.
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
    # __init__ and _build are never compiled: they choose, at import, whether the compiled modules
    # are current (webhook/policy/_build.py), which needs the manifest written here.
    modules = sorted(
        p
        for p in glob.glob("webhook/policy/**/*.py", recursive=True)
        if not p.endswith(("__init__.py", "_build.py"))
    )
    try:
        # The shared library inside the package (webhook/policy/_native__mypyc.*.so), not a
        # top-level module that only a source tree's cwd would put on sys.path.
        extensions = mypycify(modules, opt_level="3", group_name="webhook.policy._native")
    except Exception as exc:  # a type error mypyc cannot compile: pure Python, never a failed install
        print(f"gpu-policy: mypyc could not compile the core ({exc}); installing pure Python", file=sys.stderr)
        return []
    write_manifest()
    return extensions


def write_manifest() -> None:
    """webhook/policy/_compiled.json: the sha256 of every source compiled (see _build.py)."""
    import hashlib
    import json
    from pathlib import Path

    here = Path("webhook/policy")
    sources = sorted(p for p in here.rglob("*.py") if p.name not in ("__init__.py", "_build.py"))
    digests = {str(p.relative_to(here)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sources}
    (here / "_compiled.json").write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


setup(ext_modules=compiled_core(), cmdclass={"build_ext": OptionalBuildExt})
