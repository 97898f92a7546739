"""Rendering the chart with the real helm binary, for the chart tests and the end-to-end test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "gpu-policy"
PUSHED = "registry.example.com/platform/gpu-policy"  # where a platform team pushed `make image`


def helm_binary() -> str:
    helm = os.environ.get("HELM") or str(ROOT / ".tools" / "helm")
    if not Path(helm).exists():
        raise RuntimeError(f"helm not found at {helm}: run `make helm` (make test does it for you)")
    return helm


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": "/tmp/gpu-policy-helm/cache",
        "HELM_CONFIG_HOME": "/tmp/gpu-policy-helm/config",
        "HELM_DATA_HOME": "/tmp/gpu-policy-helm/data",
    }
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(
    values: dict[str, Any] | None = None,
    *,
    kube_version: str = "1.30.0",
    namespace: str = "gpu-policy",
    release: str = "gpu-policy",
    tmp: Path,
    check: bool = True,
) -> list[dict[str, Any]] | subprocess.CompletedProcess[str]:
    values = dict(values or {})
    values.setdefault("image", {"repository": PUSHED})  # the default is a placeholder that fails
    values_file = tmp / f"values-{abs(hash(repr(values)))}.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        kube_version,
        "--values",
        str(values_file),
        check=check,
    )
    if not check:
        return result
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]
