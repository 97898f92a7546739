"""`make image-test`: build the image here, where no image registry is reachable, and prove it
runs the way the chart runs it.

1. A base image made from Debian packages (debootstrap --variant=minbase, python3, python3-venv,
   ca-certificates), committed with buildah under the name the Containerfile's BASE_IMAGE takes.
2. Wheels of the project and its dependencies built outside the image (the machine's pip knows
   its index and CA bundle; nothing of that goes into a layer), then `buildah bud --pull=never`.
3. The image's root filesystem, mounted read-only in a private mount namespace, with the chart's
   volumes where the chart puts them (config, tls, an empty /tmp), and the container's exact
   command line from `helm template` run as UID/GID 65532 (the chart's securityContext):
   `--version`; `/healthz`; the README's review over TLS verified the way the API server
   verifies it (CA bundle + service DNS name) with the README's verdict; a write to the root
   filesystem fails; SIGTERM drains and exits 0 within terminationGracePeriodSeconds.

Prints what it measured (image size, the layers the project adds, timings) and exits non-zero on
the first failed check. Needs root (buildah with vfs storage, mount namespaces, chroot).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
# The build stage's base: what the Containerfile would apt-get install on debian:bookworm-slim.
BASE = "localhost/gpu-policy-base:bookworm-build"
BASE_PACKAGES = ("python3", "python3-venv", "binutils", "ca-certificates")
IMAGE = "localhost/gpu-policy:image-test"
UID = 65532
ENV = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}
# The whole image (issue 26; stretch 60 MB): the kubernetes client alone is 21 MB of source. This
# bound also catches regressions such as kubernetes 37's second (asyncio) client.
MAX_IMAGE_MB = 100
SBOM = "usr/share/doc/gpu-policy/sbom.cdx.json"  # the Containerfile's io.gpu-policy.sbom label
# Never in the runtime image: a shell, a package manager, a compiler.
FORBIDDEN = ("sh", "bash", "dash", "busybox", "apt", "apt-get", "dpkg", "pip", "pip3", "gcc", "cc", "ld", "perl")


def run(*cmd: str, check: bool = True, capture: bool = True, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(cmd, capture_output=capture, text=True, env=env or ENV, timeout=1800)
    if check and result.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)}\n{result.stdout}\n{result.stderr}")
    return result.stdout if capture else ""


def step(text: str) -> float:
    print(f"==> {text}", flush=True)
    return time.monotonic()


def build_base(cache: Path) -> None:
    if run("buildah", "images", "-q", BASE, check=False).strip():
        print(f"    {BASE} exists")
        return
    rootfs = cache / "rootfs"
    if rootfs.exists():
        shutil.rmtree(rootfs)
    mirror = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
    run(
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        "bookworm",
        str(rootfs),
        mirror,
    )
    # /usr/share/doc stays: the image's SBOM reads the packages' copyright files for their licenses.
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/man"):
        shutil.rmtree(rootfs / junk, ignore_errors=True)
    ctr = run("buildah", "from", "scratch").strip()
    run("buildah", "copy", ctr, str(rootfs), "/")
    run("buildah", "config", "--env", "PATH=/usr/local/bin:/usr/bin:/bin", "--cmd", "/usr/bin/python3", ctr)
    run("buildah", "commit", "--quiet", ctr, BASE)
    run("buildah", "rm", ctr)


def build_wheels() -> None:
    wheels = ROOT / ".wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    # The project's own wheel with the policy core compiled by mypyc (setup.py).
    env = {**os.environ, "GPU_POLICY_MYPYC": "1"}
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), f"{ROOT}[fast]", env=env)
    # The build stage's SBOM generator (it stays in the build stage).
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), "cyclonedx-bom>=7,<8")


def render_chart(port: int, tmp: Path) -> dict[str, Any]:
    helm = os.environ.get("HELM") or str(ROOT / ".tools" / "helm")
    values = tmp / "values.yaml"
    repository, tag = IMAGE.rsplit(":", 1)
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"repository": repository, "tag": tag},
                "server": {"port": port},
                # The chart's default policy: clusterVersion auto imports the kubernetes client
                # (no bytecode in the image for it) and, with no cluster here, goes on without.
            }
        )
    )
    out = run(helm, "template", "gp", str(ROOT / "charts" / "gpu-policy"), "-n", "gpu-policy", "-f", str(values))
    return {d["kind"]: d for d in yaml.safe_load_all(out) if d}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NAMESPACE_SCRIPT = r"""
set -eu
root="$1"; shift
mnt="$(mktemp -d)"
mount --bind "$root" "$mnt"
mount -o remount,bind,ro "$mnt"
mount --rbind /dev "$mnt/dev"
mount -t proc proc "$mnt/proc"
mount -t tmpfs -o size=16m,mode=1777 tmpfs "$mnt/tmp"
[ -d "$mnt/etc/gpu-policy/config" ] && [ -d "$mnt/etc/gpu-policy/tls" ] || { echo "no mount points"; exit 3; }
mount --bind -o ro "$EXTRA/config" "$mnt/etc/gpu-policy/config"
mount --bind -o ro "$EXTRA/tls" "$mnt/etc/gpu-policy/tls"
chroot="$(command -v chroot)"
exec env -i PATH=/venv/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8 POD_NAMESPACE=gpu-policy \
    "$chroot" --userspec=65532:65532 "$mnt" "$@"
"""


def in_image_stdout(root: Path, extra: Path, *argv: str) -> str:
    """Standard output of argv run inside the image (as in_image), for commands that print JSON."""
    cmd = ["unshare", "--mount", "--propagation", "private", "--fork"]
    cmd += ["sh", "-c", NAMESPACE_SCRIPT, "ns", str(root), *argv]
    result = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, "EXTRA": str(extra)}, timeout=120)
    return result.stdout


def in_image(root: Path, extra: Path, *argv: str, wait: bool = True) -> subprocess.Popen[str] | str:
    """Run argv inside the image's root filesystem, read-only, as the chart runs the container."""
    cmd = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--fork",
        "sh",
        "-c",
        NAMESPACE_SCRIPT,
        "ns",
        str(root),
        *argv,
    ]
    env = {**ENV, "EXTRA": str(extra)}
    if wait:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        return f"rc={result.returncode}\n{result.stdout}{result.stderr}"
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", required=True)
    parser.add_argument("--revision", default="unknown")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("image-test needs root (buildah vfs storage, mount namespaces, chroot)")
    cache = ROOT / ".tools" / "image"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpu-policy-image-"))
    report: list[str] = []

    t = step(f"base image {BASE} from Debian packages (debootstrap)")
    build_base(cache)
    report.append(f"base image: {time.monotonic() - t:.0f} s")

    t = step("wheels of the project and its dependencies (outside the image)")
    build_wheels()
    report.append(f"wheels: {time.monotonic() - t:.0f} s")

    t = step("buildah bud --pull=never")
    run(
        "buildah",
        "bud",
        "--pull=never",
        "--layers",
        "-f",
        str(ROOT / "Containerfile"),
        "--build-arg",
        f"BASE_IMAGE={BASE}",
        "--build-arg",
        f"VERSION={args.version}",
        "--build-arg",
        f"REVISION={args.revision}",
        "-t",
        IMAGE,
        str(ROOT),
        capture=True,
    )
    report.append(f"image build: {time.monotonic() - t:.0f} s")
    image_size = str(json.loads(run("buildah", "images", "--json", IMAGE))[0].get("size", "?"))  # e.g. "87 MB"
    info = json.loads(run("buildah", "inspect", "--type", "image", IMAGE))
    config = info["OCIv1"]["config"]
    labels = config.get("Labels", {})
    assert config["User"] == f"{UID}:{UID}", config["User"]
    assert config["Entrypoint"] == ["/venv/bin/gpu-policy"], config["Entrypoint"]
    assert labels.get("org.opencontainers.image.version") == args.version, labels
    for key in ("source", "revision", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels.get("io.gpu-policy.sbom") == f"/{SBOM}", labels

    ctr = run("buildah", "from", "--pull-never", IMAGE).strip()
    try:
        root = Path(run("buildah", "mount", ctr).strip())
        total, breakdown = sizes(root)
        report.append(f"image: {total:.1f} MB of files ({image_size} as buildah counts it); {breakdown}")
        if total > MAX_IMAGE_MB:
            raise SystemExit(f"FAILED: the image holds {total:.1f} MB (limit {MAX_IMAGE_MB} MB)")
        found = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name in FORBIDDEN and not p.is_dir())
        assert not found, f"a shell, package manager or compiler in the image: {found}"
        report.append(f"no {', '.join(FORBIDDEN)} anywhere in the image")
        archive = cache / f"gpu-policy-{args.version}.oci.tar"
        archive.unlink(missing_ok=True)
        run("buildah", "push", "--quiet", IMAGE, f"oci-archive:{archive}")
        sbom = archive.with_name(f"gpu-policy-{args.version}.cdx.json")
        shutil.copyfile(root / SBOM, sbom)
        report.append(f"archive {archive.relative_to(ROOT)} ({archive.stat().st_size / 1e6:.1f} MB), SBOM beside it")

        port = free_port()
        docs = render_chart(port, tmp)
        pod = docs["Deployment"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == IMAGE, container["image"]  # the chart pulls the image we built
        sc = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert sc["runAsUser"] == UID and sc["runAsGroup"] == UID and sc["readOnlyRootFilesystem"] is True, sc
        argv = ["/venv/bin/gpu-policy", *container["args"]]  # the image's entrypoint + the chart's args
        grace = int(pod.get("terminationGracePeriodSeconds", 30))

        extra = tmp / "mounts"
        (extra / "config").mkdir(parents=True)
        (extra / "config" / "config.yaml").write_text(docs["ConfigMap"]["data"]["config.yaml"])
        shutil.copytree(ROOT / "tests" / "corpus", extra / "config" / "corpus")
        run(
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "--out",
            str(extra / "tls"),
            "--service",
            "gp-gpu-policy",
            "--namespace",
            "gpu-policy",
            "--days",
            "1",
            "--host",
            "127.0.0.1",  # helm test's probe, run here against the loopback port
            env=None,
        )
        os.chmod(extra / "tls" / "tls.key", 0o444)  # the chart's Secret volume: readable by the pod's group

        out = in_image(root, extra, "/venv/bin/gpu-policy", "--version")
        assert (
            isinstance(out, str)
            and f"gpu-policy {args.version} (policy core: compiled with mypyc, profile-guided)" in out
        ), out
        report.append(f"--version as {UID}: {out.split(chr(10))[1]}")
        report.append(check_imports(root, extra))
        report.append(check_sbom(root, extra, sbom))
        # The compiled core judges exactly like the pure Python one: every corpus verdict, message
        # and patch, in the image (compiled) and on this machine (pure Python).
        same = 0
        for command in ("check", "mutate"):
            inside = in_image_stdout(
                root, extra, "/venv/bin/gpu-policy", command, "-o", "json", "-f", "/etc/gpu-policy/config/corpus"
            )
            outside = run(
                sys.executable,
                "-m",
                "webhook",
                command,
                "-o",
                "json",
                "-f",
                str(ROOT / "tests" / "corpus"),
                check=False,
                env=None,
            )
            compiled = json.loads(inside)
            pure = json.loads(outside)
            if command == "check":
                for item in (*compiled["results"], *pure["results"]):
                    item["where"] = item["where"].rsplit("/", 1)[-1]
            assert compiled == pure, f"{command}: the compiled core differs from pure Python"
            same += len(pure["results"]) if command == "check" else len(pure)
        report.append(f"compiled core == pure Python on the corpus: {same} check results and patched objects")
        out = in_image(root, extra, "/venv/bin/python", "-c", "open('/venv/x', 'w')")
        assert isinstance(out, str) and "Read-only file system" in out, out
        out = in_image(root, extra, "/venv/bin/python", "-c", "import os; print(os.getuid(), os.getgid())")
        assert isinstance(out, str) and f"{UID} {UID}" in out, out
        report.append("root filesystem read-only: a write to /venv fails with EROFS; uid/gid 65532")

        t = step(f"serve with the chart's command line: {' '.join(argv)}")
        proc = in_image(root, extra, *argv, wait=False)
        assert isinstance(proc, subprocess.Popen)
        context = ssl.create_default_context(cafile=str(extra / "tls" / "ca.crt"))
        deadline = time.monotonic() + 30
        health = 0
        while time.monotonic() < deadline:
            try:
                health = _get(port, "/healthz", context)
                if health == 200:
                    break
            except OSError:
                time.sleep(0.2)
        assert health == 200, f"/healthz never answered 200:\n{_drain(proc)}"
        report.append(f"/healthz 200 after {time.monotonic() - t:.1f} s")
        review = json.loads((ROOT / "tests" / "data" / "review-gpu-pod.json").read_text())
        response = _post(port, "/validate", review, context)
        message = response["response"]["status"]["message"]
        assert response["response"]["allowed"] is False and response["response"]["status"]["code"] == 403, response
        for rule in ("gpu-quantity", "no-visible-devices-env", "no-privileged-gpu"):
            assert rule in message, message
        report.append("README review over verified TLS (service DNS name, CA bundle): denied 403, the README's rules")
        # helm test's pod, as the chart renders it (the image's own `gpu-policy probe`), with the
        # Service's URL pointed at the loopback port and the CA where this test mounts it.
        (probe,) = docs["Pod"]["spec"]["containers"]
        args = [
            f"--url=https://127.0.0.1:{port}" if a.startswith("--url=") else "--ca=/etc/gpu-policy/tls/ca.crt"
            if a.startswith("--ca=") else a
            for a in probe["args"]
        ]  # fmt: skip
        assert probe["image"] == IMAGE and args[0] == "probe", probe
        out = in_image(root, extra, "/venv/bin/gpu-policy", *args)
        assert isinstance(out, str) and out.startswith("rc=0") and "a privileged GPU pod is denied" in out, out
        report.append("helm test's probe from the chart's own image: /readyz 200 and the privileged GPU pod denied")

        t = time.monotonic()
        # The server is unshare's child (sh and chroot exec into it): signal it, as the kubelet
        # signals a container's PID 1; unshare then exits with its status.
        _signal_children(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=grace + 5)
        took = time.monotonic() - t
        assert code == 0 and took <= grace, (code, took, grace)
        report.append(f"SIGTERM: exit {code} after {took:.1f} s (grace period {grace} s)")
    finally:
        run("buildah", "umount", ctr, check=False)
        run("buildah", "rm", ctr, check=False)
        run("buildah", "rmi", "--prune", check=False)  # earlier builds' dangling layers (vfs copies them whole)
        shutil.rmtree(tmp, ignore_errors=True)

    print("\nimage-test passed:")
    for line in report:
        print(f"  - {line}")
    return 0


def sizes(root: Path) -> tuple[float, str]:
    """MB of regular files in the image, and where they are: interpreter and stdlib, shared
    libraries, /venv by its largest packages."""
    parts: dict[str, int] = {}
    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(root)
        if path.is_relative_to(site):
            key = "venv:" + path.relative_to(site).parts[0].split(".")[0].split("-")[0]
        elif rel.parts[:3] == ("usr", "lib", "x86_64-linux-gnu") or rel.parts[:2] == ("usr", "lib64"):
            key = "shared libraries"
        elif rel.parts[:3] == ("usr", "lib", "python3.11") or rel.parts[:2] == ("usr", "bin"):
            key = "interpreter + stdlib"
        elif rel.parts[0] == "venv":
            key = "venv:other"
        else:
            key = "other (etc, CA bundle, SBOM)"
        parts[key] = parts.get(key, 0) + path.stat().st_size
    total = sum(parts.values()) / 1e6
    venv_total = sum(v for k, v in parts.items() if k.startswith("venv:")) / 1e6
    top = sorted(((v, k) for k, v in parts.items() if k.startswith("venv:")), reverse=True)[:6]
    plain = [f"{k} {v / 1e6:.1f}" for k, v in sorted(parts.items()) if not k.startswith("venv:")]
    venv = ", ".join(f"{k[5:]} {v / 1e6:.1f}" for v, k in top)
    return total, f"{'; '.join(plain)}; /venv {venv_total:.1f} (top: {venv})"


# What the project imports at run time, beyond what serving, check and mutate load: every module of
# the package (the cluster commands, certs, audit, verify) and the kubernetes client they use.
IMPORTS = r"""
import importlib, pkgutil, webhook
names = [m.name for m in pkgutil.walk_packages(webhook.__path__, "webhook.")]
names = [n for n in names if ".buildtime" not in n and not n.endswith("__main__")]  # build time; runs main()
for name in names + ["kubernetes.client", "kubernetes.config", "kubernetes.watch", "orjson", "uvloop"]:
    importlib.import_module(name)
print(len(names))
"""


def check_imports(root: Path, extra: Path) -> str:
    out = in_image_stdout(root, extra, "/venv/bin/python", "-c", IMPORTS)
    assert out.strip().isdigit(), f"a module failed to import in the image (a trimmed stdlib part?): {out}"
    return f"every one of the {out.strip()} webhook modules and the kubernetes client import in the trimmed image"


DISTRIBUTIONS = r"""
import importlib.metadata as m, json
print(json.dumps(sorted([d.metadata["Name"], d.version] for d in m.distributions())))
"""


def check_sbom(root: Path, extra: Path, copy: Path) -> str:
    """The SBOM is CycloneDX that validates, lists every distribution the image's Python sees with
    its version and license, and the Debian packages of the interpreter and its libraries."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = (root / SBOM).read_text()
    assert copy.read_text() == text
    bom = json.loads(text)
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] in ("1.5", "1.6", "1.7"), bom["specVersion"]
    version = SchemaVersion.from_version(bom["specVersion"])
    error = JsonStrictValidator(version).validate_str(text)
    assert error is None, f"the SBOM does not validate against the CycloneDX {bom['specVersion']} schema: {error}"
    inside = json.loads(in_image_stdout(root, extra, "/venv/bin/python", "-c", DISTRIBUTIONS))
    canon = lambda name: name.lower().replace("_", "-").replace(".", "-")  # noqa: E731 (PEP 503)
    listed = {(canon(c["name"]), c["version"]) for c in bom["components"] if c.get("purl", "").startswith("pkg:pypi/")}
    listed.add((canon(bom["metadata"]["component"]["name"]), bom["metadata"]["component"]["version"]))
    missing = {(canon(n), v) for n, v in inside} - listed
    assert not missing, f"distributions in /venv the SBOM does not list: {sorted(missing)}"
    unlicensed = [
        c["name"] for c in bom["components"] if c.get("purl", "").startswith("pkg:pypi/") and not c.get("licenses")
    ]
    assert not unlicensed, f"Python components without a license: {unlicensed}"
    debs = {c["name"]: c for c in bom["components"] if c.get("purl", "").startswith("pkg:deb/debian/")}
    for package in ("python3.11-minimal", "libpython3.11-stdlib", "libc6", "libssl3", "ca-certificates"):
        assert package in debs and debs[package]["version"], f"the SBOM lacks the Debian package {package}"
    # What scanners read in a distroless image: one dpkg status stanza per package, same versions.
    status = {p.name: p.read_text() for p in (root / "var/lib/dpkg/status.d").iterdir()}
    assert set(status) == set(debs), (sorted(status), sorted(debs))
    for name, text in status.items():
        assert f"Package: {name}\n" in text and f"Version: {debs[name]['version']}\n" in text, text
    return (
        f"SBOM /{SBOM}: CycloneDX {bom['specVersion']}, valid; {len(inside)} distributions in /venv all listed "
        f"with versions and licenses; {len(debs)} Debian packages ({', '.join(sorted(debs))}), each with its "
        "dpkg status stanza in /var/lib/dpkg/status.d for scanners"
    )


def _get(port: int, path: str, context: ssl.SSLContext) -> int:
    req = urllib.request.Request(f"https://gp-gpu-policy.gpu-policy.svc:{port}{path}")
    with _opener(port, context).open(req, timeout=5) as resp:
        return int(resp.status)


def _post(port: int, path: str, body: dict[str, Any], context: ssl.SSLContext) -> dict[str, Any]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        f"https://gp-gpu-policy.gpu-policy.svc:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with _opener(port, context).open(req, timeout=10) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def _opener(port: int, context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """Connect to 127.0.0.1 but verify the certificate for the Service's DNS name."""
    import http.client

    class Conn(http.client.HTTPSConnection):
        def connect(self) -> None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=self.timeout)
            self.sock = context.wrap_socket(sock, server_hostname="gp-gpu-policy.gpu-policy.svc")

    class Handler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> Any:
            return self.do_open(Conn, req)

    return urllib.request.build_opener(Handler(context=context))


def _signal_children(pid: int, sig: int) -> None:
    """Signal the direct children of `pid` (the server; its workers are its own business)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), sig)


def _drain(proc: subprocess.Popen[str]) -> str:
    proc.kill()
    out, _ = proc.communicate(timeout=10)
    return out


if __name__ == "__main__":
    sys.exit(main())
