"""The compiled core (mypyc) and the pure Python one give identical verdicts, messages, warnings
and patches: over the corpus, the benchmark's pods and the fuzzer's objects, with and without a
cluster view. `make test` runs the suite on the compiled core (GPU_POLICY_EXPECT_COMPILED=1 turns
a missing build into a failure, not a skip), then the policy tests on pure Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from webhook import core_build

EXPECT = os.environ.get("GPU_POLICY_EXPECT_COMPILED") == "1"


def test_this_run_uses_the_build_it_was_asked_for() -> None:
    build = core_build()
    if os.environ.get("GPU_POLICY_PURE") == "1":
        assert build == "pure Python (GPU_POLICY_PURE=1)"
    elif EXPECT:
        assert build.startswith("compiled with mypyc"), f"make compiled did not produce a current build: {build}"


def test_the_installed_command_runs_the_same_build_from_anywhere(tmp_path: object) -> None:
    """The console script (not `python -m` from the source tree) finds the compiled core too:
    its shared library lives inside the package."""
    script = os.path.join(os.path.dirname(sys.executable), "gpu-policy")
    r = subprocess.run([script, "--version"], capture_output=True, text=True, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"(policy core: {core_build()})" in " ".join(r.stdout.split())


def verdicts(pure: bool) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "GPU_POLICY_PURE"}
    if pure:
        env["GPU_POLICY_PURE"] = "1"
    r = subprocess.run(
        [sys.executable, "tests/tools/verdicts.py"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_compiled_and_pure_judge_alike() -> None:
    if not core_build().startswith("compiled") and not EXPECT:
        pytest.skip(f"no current compiled build ({core_build()}): make compiled")
    compiled, pure = verdicts(pure=False), verdicts(pure=True)
    assert compiled["build"].startswith("compiled with mypyc") and pure["build"] == "pure Python (GPU_POLICY_PURE=1)"
    assert len(pure["results"]) > 1500  # type: ignore[arg-type]
    differ = [k for k in pure["results"] if compiled["results"][k] != pure["results"][k]]  # type: ignore[index,union-attr]
    assert not differ, f"{len(differ)} objects judged differently, e.g. {differ[:5]}"


STALE_PROBE = (
    "import webhook, webhook.admission.review, webhook.policy.engine as e;"
    "print(webhook.core_build()); print(webhook.admission.review.__file__); print(e.__file__)"
)


@pytest.mark.parametrize(
    "edited", [None, "admission/review.py", "admission/decide.py", "serve/answer.py", "policy/rules/gpu_quantity.py"]
)
def test_an_edited_source_is_never_shadowed_by_its_stale_build(tmp_path: object, edited: str | None) -> None:
    """A copy of the built package; after one compiled module's source is edited, every compiled
    module (the core and the protocol layer) is imported from source, all or nothing."""
    import shutil
    from pathlib import Path

    if not core_build().startswith("compiled") and not EXPECT:
        pytest.skip(f"no current compiled build ({core_build()}): make compiled")
    root = Path(str(tmp_path))
    shutil.copytree(Path(ROOT) / "webhook", root / "webhook", ignore=shutil.ignore_patterns("__pycache__"))
    if edited is not None:
        with open(root / "webhook" / edited, "a", encoding="utf-8") as f:
            f.write("\n# edited after the build\n")
    env = {k: v for k, v in os.environ.items() if k != "GPU_POLICY_PURE"}
    env["PYTHONPATH"] = str(root)
    r = subprocess.run([sys.executable, "-c", STALE_PROBE], capture_output=True, text=True, cwd=str(root), env=env)
    assert r.returncode == 0, r.stderr
    build, review_file, engine_file = r.stdout.split("\n")[:3]
    assert review_file.startswith(str(root)) and engine_file.startswith(str(root))
    if edited is None:
        assert build.startswith("compiled with mypyc")
        assert review_file.endswith(".so") and engine_file.endswith(".so")
    else:
        assert build == f"pure Python ({edited} changed since it was compiled)"
        assert review_file.endswith(".py") and engine_file.endswith(".py")
