"""`gpu-policy probe`, what `helm test` runs from the chart's own image (issue 51, item 5): against
the real server over TLS verified with its CA, it passes when the policy answers as it must (a
privileged GPU pod denied; under rollout audit, warned) and fails, naming why, when it does not:
another answer, an unready or unreachable server, a CA that did not sign the certificate."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.helpers import ROOT, Server, free_port
from webhook import certs


def probe(url: str, ca: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "probe", "--url", url, "--ca", str(ca), "--timeout", "5", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


def test_probe_passes_on_the_answer_the_policy_gives(server: Server, start_server: Callable[..., Server]) -> None:
    ca = server.cert_dir / "ca.crt"
    enforcing = probe(f"https://127.0.0.1:{server.port}", ca)
    assert enforcing.returncode == 0, enforcing.stdout + enforcing.stderr
    assert enforcing.stdout.splitlines() == [
        "OK    /readyz 200 over verified TLS",
        enforcing.stdout.splitlines()[1],
    ] and enforcing.stdout.splitlines()[1].startswith("OK    a privileged GPU pod is denied: ")
    assert "no-privileged-gpu" in enforcing.stdout
    wrong = probe(f"https://127.0.0.1:{server.port}", ca, "--expect", "warned")
    assert wrong.returncode == 1 and "FAIL  a privileged GPU pod was not warned: allowed=False" in wrong.stdout
    audit = start_server({"rollout": "audit", "clusterVersion": "1.30"})
    warned = probe(f"https://127.0.0.1:{audit.port}", ca, "--expect", "warned")
    assert warned.returncode == 0 and "is warned: would violate GPU policy: no-privileged-gpu" in warned.stdout
    refused = probe(f"https://127.0.0.1:{audit.port}", ca)
    assert refused.returncode == 1 and "was not denied: allowed=True" in refused.stdout


def test_probe_fails_naming_why(server: Server, tmp_path: Path) -> None:
    other = tmp_path / "other"
    certs.write(certs.generate("gpu-policy", "gpu-policy", days=1, extra_hosts=("127.0.0.1",)), other)
    untrusted = probe(f"https://127.0.0.1:{server.port}", other / "ca.crt")
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stdout
    nobody = probe(f"https://127.0.0.1:{free_port()}", server.cert_dir / "ca.crt")
    assert nobody.returncode == 1 and nobody.stdout.startswith("FAIL  https://127.0.0.1:")
    missing = probe(f"https://127.0.0.1:{server.port}", tmp_path / "none.crt")
    assert missing.returncode == 2 and "cannot load the CA" in missing.stderr
