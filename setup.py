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

import contextlib
import json
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the compiled core, or nothing: a half-built set of extensions would not import.

    With GCC (and unless GPU_POLICY_PGO=0), profile-guided: an instrumented build, a training run
    of reviews through it (bench/pgo.py), then the build that ships, laid out by that profile.
    In the server the compiled code runs cold (TLS, the kernel and the JSON parser evict it between
    reviews), and the profile's layout (hot paths straight-line and together, error handling out
    of the way) cut its CPU per review by about 7% in `make bench`'s head-to-head rounds. Any
    failure of the profiled build falls back to the plain one, and that one to pure Python."""

    def run(self) -> None:
        self._compiler_choice = self.compiler  # run() replaces it with the compiler object it made
        try:
            if self.extensions and _wants_profile():
                try:
                    self._profile_guided()
                    return
                except Exception as exc:
                    print(f"gpu-policy: profile-guided build failed ({exc}); building without", file=sys.stderr)
                    self._set_flags([], [])
            self._build()
        except Exception as exc:  # no compiler, no headers: ship pure Python
            print(f"gpu-policy: mypyc build failed ({exc}); installing pure Python", file=sys.stderr)
            self._remove_outputs()  # nothing instrumented or half-built may be left to import
            self.extensions = []

    def _build(self) -> None:
        """One pass of build_ext, which may run several times here: each from the compiler choice,
        every extension rebuilt (each pass has other flags)."""
        self.compiler = self._compiler_choice
        self.force = True
        super().run()

    def _remove_outputs(self) -> None:
        for ext in self.extensions:
            with contextlib.suppress(OSError):
                os.remove(self.get_ext_fullpath(ext.name))

    def _set_flags(self, compile_args: list[str], link_args: list[str]) -> None:
        """mypyc's own flags, plus these (the originals are kept on the first call)."""
        for ext in self.extensions:
            if not hasattr(ext, "_gpu_policy_flags"):
                ext._gpu_policy_flags = (list(ext.extra_compile_args or []), list(ext.extra_link_args or []))
            compile_base, link_base = ext._gpu_policy_flags
            ext.extra_compile_args = [*compile_base, *compile_args]
            ext.extra_link_args = [*link_base, *link_args]

    def _profile_guided(self) -> None:
        import shutil
        import subprocess
        import tempfile

        profile = tempfile.mkdtemp(prefix="gpu-policy-pgo-")
        try:
            self._set_flags([f"-fprofile-generate={profile}"], [f"-fprofile-generate={profile}"])
            self._build()
            # The package as built: in place, or build_py's copy beside the extensions; bench/ from
            # the source tree (it is not installed).
            built = os.getcwd() if self.inplace else os.path.abspath(self.build_lib)
            env = {k: v for k, v in os.environ.items() if k != "GPU_POLICY_PURE"}
            env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([built, os.getcwd()]))
            subprocess.run([sys.executable, "-m", "bench.pgo"], env=env, cwd=built, check=True, timeout=600)
            if not any(name.endswith(".gcda") for _, _, names in os.walk(profile) for name in names):
                raise RuntimeError("the training run wrote no profile")
            # -fprofile-partial-training: code the run did not reach is compiled as without a
            # profile, not shrunk as if it never runs (the training cannot reach every rule's
            # every branch).
            self._set_flags([f"-fprofile-use={profile}", "-fprofile-partial-training", "-Wno-missing-profile"], [])
            self._build()
            # Recorded in the manifest of the package as built, so `gpu-policy --version` says so.
            write_manifest(os.path.join(built, "webhook", "_compiled.json"), profile="bench/pgo.py")
            print("gpu-policy: compiled with mypyc, profile-guided (bench/pgo.py)", file=sys.stderr)
        finally:
            shutil.rmtree(profile, ignore_errors=True)


def _wants_profile() -> bool:
    """GCC, bench/pgo.py beside setup.py, and GPU_POLICY_PGO not 0. (clang's profiles work another
    way: it gets the plain build.)"""
    if os.environ.get("GPU_POLICY_PGO", "1") == "0" or not os.path.isfile("bench/pgo.py"):
        return False
    import subprocess
    import sysconfig

    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    try:
        version = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in version and "clang" not in version


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


def write_manifest(path: str | None = None, profile: str = "") -> None:
    """webhook/_compiled.json (or `path`): the sha256 of every source compiled (see
    webhook/_build.py), and the training run of a profile-guided build."""
    build = _build_module()
    manifest = {**build.manifest(), **({build.PROFILE: profile} if profile else {})}
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    with open(path or build.MANIFEST, "w") as f:
        f.write(text)


setup(ext_modules=compiled_core(), cmdclass={"build_ext": OptionalBuildExt})
