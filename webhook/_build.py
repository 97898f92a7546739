"""Compiled or pure: run the mypyc build only when it is the build of these sources.

What is compiled: the code every review runs through. The policy core (webhook/policy), the
protocol layer (webhook/admission), each but its __init__, which only re-exports; and the review
routes' handler (webhook/serve/answer.py). The transport is aiohttp's, compiled by its own
maintainers. setup.py
(GPU_POLICY_MYPYC=1) compiles them into extension modules next to their sources and writes
`_compiled.json`: the sha256 of each source it compiled. Python imports an extension module in
preference to the source beside it, so after a rule is edited the old compiled one would silently
keep judging. Here, when the `webhook` package is imported (before any of its submodules), the
sources are hashed (about 1 ms) and compared with that manifest: any difference, a module without a
build, a build without a manifest, or GPU_POLICY_PURE=1 (CI's second, pure run) installs an import
hook that loads every one of those modules from source. All or nothing: compiled modules call each
other natively, so a mix would run stale code anyway.

Never compiled itself: it decides about the compiled modules.
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

HERE = Path(__file__).resolve().parent  # the webhook package
PACKAGE = "webhook"
MANIFEST = HERE / "_compiled.json"
PACKAGES = (HERE / "policy", HERE / "admission")  # every module but __init__ (they only re-export)
MODULES = (HERE / "serve" / "answer.py",)


def sources() -> list[Path]:
    """Every compiled module's source."""
    packaged = (p for package in PACKAGES for p in package.rglob("*.py") if p.name != "__init__.py")
    return sorted([*packaged, *MODULES])


def module_name(path: Path) -> str:
    return ".".join((PACKAGE, *path.relative_to(HERE).with_suffix("").parts))


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


PROFILE = "_profile"  # in the manifest: the training run of a profile-guided build (setup.py)


def _profile_guided() -> bool:
    try:
        return bool(json.loads(MANIFEST.read_text()).get(PROFILE))
    except (OSError, ValueError, AttributeError):
        return False


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds the compiled modules as source files, ignoring the extension modules beside them."""

    def __init__(self) -> None:
        self.modules = {module_name(p): p for p in sources()}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.modules.get(fullname)
        if source is None:
            return None  # packages (their __init__ is never compiled) and everything else: as usual
        return importlib.util.spec_from_file_location(fullname, source)


def choose_build() -> str:
    """Installs the source-only hook when the compiled core is not current; says which runs."""
    why = _why_pure()
    if why is None:
        return "compiled with mypyc, profile-guided" if _profile_guided() else "compiled with mypyc"
    if not any(isinstance(f, _FromSource) for f in sys.meta_path):
        sys.meta_path.insert(0, _FromSource())
    return f"pure Python ({why})"
