"""Compiled or pure: run the mypyc build of the core only when it is the build of these sources.

setup.py (GPU_POLICY_MYPYC=1) compiles every module of the core into an extension module next to
its source and writes `_compiled.json`: the sha256 of each source it compiled. Python imports an
extension module in preference to the source beside it, so after a rule is edited the old
compiled one would silently keep judging. Here, before the first submodule is imported, the
sources are hashed (about 1 ms) and compared with that manifest: any difference, a module
without a build, a build without a manifest, or GPU_POLICY_PURE=1 (CI's second, pure run)
installs an import hook that loads every module of the core from source. All or nothing:
compiled modules call each other natively, so a mix would run stale code anyway.

Never compiled itself (setup.py leaves it out): it decides about the compiled modules.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
PACKAGE = __name__.rpartition(".")[0]  # webhook.policy
MANIFEST = HERE / "_compiled.json"
UNCOMPILED = ("__init__.py", "_build.py")  # never compiled: they run before the choice is made


def sources() -> list[Path]:
    return sorted(p for p in HERE.rglob("*.py") if p.name not in UNCOMPILED)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest() -> dict[str, str]:
    """relative source path -> sha256, as written by setup.py when it compiles the core."""
    return {str(p.relative_to(HERE)): digest(p) for p in sources()}


def _built(source: Path) -> bool:
    return any(source.with_name(source.stem + s).is_file() for s in importlib.machinery.EXTENSION_SUFFIXES)


def _why_pure() -> str | None:
    """None when the compiled core is current; otherwise why the sources are used."""
    if os.environ.get("GPU_POLICY_PURE") == "1":
        return "GPU_POLICY_PURE=1"
    try:
        recorded = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return "no compiled build of the core" if not any(_built(p) for p in sources()) else "no build manifest"
    for path in sources():
        rel = str(path.relative_to(HERE))
        if not _built(path):
            return f"{rel} is not compiled"
        if recorded.get(rel) != digest(path):
            return f"{rel} changed since it was compiled"
    return None


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds webhook.policy.* as source files, ignoring the extension modules beside them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + "."):
            return None
        base = HERE.joinpath(*fullname.split(".")[2:])
        package = base / "__init__.py"
        if package.is_file():
            return importlib.util.spec_from_file_location(fullname, package, submodule_search_locations=[str(base)])
        module = base.with_suffix(".py")
        if module.is_file():
            return importlib.util.spec_from_file_location(fullname, module)
        return None


def choose_build() -> str:
    """Installs the source-only hook when the compiled core is not current; says which runs."""
    why = _why_pure()
    if why is None:
        return "compiled with mypyc"
    if not any(isinstance(f, _FromSource) for f in sys.meta_path):
        sys.meta_path.insert(0, _FromSource())
    return f"pure Python ({why})"
