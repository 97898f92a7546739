"""The runtime image's root filesystem, and its bill of materials: run inside the build stage.

    python3 webhook/buildtime/image.py --venv /venv --root /rootfs --python-sbom /tmp/python.cdx.json

Why a root filesystem assembled file by file: the image that admits every pod in a cluster should
hold nothing an attacker who got code execution could use, and nothing a scanner flags for no
reason: no shell, no package manager, no compiler. The Containerfile's last stage is `FROM scratch`
plus this directory. What goes in is derived, not listed by hand:

1. The files of the interpreter's Debian packages (PACKAGES), but for documentation and the parts of
   the standard library the project never imports (TRIM: tests, tkinter, idlelib, ensurepip, ...),
   with the bytecode Debian compiled for them.
2. The shared libraries those files and /venv's extension modules load: `ldd` of every ELF file,
   each library copied with its symlink chain (libffi.so.8 -> libffi.so.8.1.2).
3. /venv as built, its extension modules stripped of symbols (half their size, nothing of their
   code) and their C/Cython sources (*.c, *.pyx, *.pxd) dropped.
4. What a container needs around them: CA certificates, passwd/group entries for 65532, an
   nsswitch.conf, /tmp and the chart's mount points.
5. For scanners: each Debian package's dpkg status stanza in /var/lib/dpkg/status.d/ (as Google's
   distroless images do), so Trivy or Grype find the packages' versions with no dpkg in the image.

Every file taken from the build stage is traced to its Debian package through dpkg's file lists,
and the bill of materials (CycloneDX JSON) lists those packages with their versions beside the
Python distributions in /venv (from cyclonedx-py, given as --python-sbom). A file that no package
owns stops the build: the bill would be incomplete.

Standard library only: it runs on the build stage's Debian interpreter, before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

PYTHON = "python3.11"
# The interpreter, its standard library, and the /usr/bin/python3 link the venv points at.
PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "python3-minimal")
# Of those packages' files, only the ones a running interpreter opens.
KEEP = ("/usr/bin/", "/usr/lib/", "/etc/python3.11/", "/lib/", "/bin/")
STDLIB = f"/usr/lib/{PYTHON}"
# Parts of the standard library the project never imports (the image test runs the server, check,
# mutate, certs and the cluster commands' start on what is left). Some pull in shared libraries too:
# sqlite3 (libsqlite3), curses (libncursesw), readline (libreadline), dbm (libdb).
TRIM = (
    "test", "idlelib", "tkinter", "turtledemo", "turtle.py", "ensurepip", "lib2to3", "pydoc_data",
    "distutils", "venv", "sqlite3", "curses", "dbm", "unittest", "msilib",
    "lib-dynload/_sqlite3.", "lib-dynload/_curses", "lib-dynload/readline.", "lib-dynload/_dbm.",
    "lib-dynload/_gdbm.", "lib-dynload/_test", "lib-dynload/_ctypes_test.", "lib-dynload/_xxtestfuzz.",
    "lib-dynload/xxlimited", "lib-dynload/_xxsubinterpreters.", "lib-dynload/ossaudiodev.",
    "lib-dynload/audioop.", "lib-dynload/nis.",
)  # fmt: skip
# Build sources that wheels carry and nothing imports.
VENV_DROP = (".c", ".h", ".pyx", ".pxd")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # made by ca-certificates' update-ca-certificates
UID = 65532
ETC = {
    "etc/passwd": f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{UID}:{UID}:nonroot:/home/nonroot:/sbin/nologin\n",
    "etc/group": f"root:x:0:\nnonroot:x:{UID}:\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}
EMPTY_DIRS = ("tmp", "dev", "proc", "sys", "etc/gpu-policy/config", "etc/gpu-policy/tls", "home/nonroot")
SBOM_PATH = "usr/share/doc/gpu-policy/sbom.cdx.json"
STATUS_D = "var/lib/dpkg/status.d"
DPKG_INFO = Path("/var/lib/dpkg/info")


class Owners:
    """Which Debian package installed a path, from dpkg's file lists (merged /usr aware)."""

    def __init__(self) -> None:
        self.by_path: dict[str, str] = {}
        for listing in DPKG_INFO.glob("*.list"):
            package = listing.name.removesuffix(".list").split(":", 1)[0]
            for line in listing.read_text().splitlines():
                self.by_path.setdefault(line, package)

    def files(self, package: str) -> list[str]:
        return sorted(p for p, owner in self.by_path.items() if owner == package)

    def of(self, path: str) -> str | None:
        for candidate in _aliases(path):
            if candidate in self.by_path:
                return self.by_path[candidate]
        return None


def _aliases(path: str) -> Iterator[str]:
    """The names one file has on a merged-/usr system: /lib/x is /usr/lib/x, and symlinked forms."""
    for p in (path, os.path.realpath(path)):
        yield p
        if p.startswith("/usr/"):
            yield p[4:]
        else:
            yield "/usr" + p


class Root:
    """The root filesystem being assembled: copies of build-stage paths, their owners recorded."""

    def __init__(self, root: Path, owners: Owners) -> None:
        self.root = root
        self.owners = owners
        self.packages: set[str] = set()
        self.copied: set[str] = set()
        for link in ("bin", "lib", "lib64", "sbin"):  # merged /usr, as in the build stage
            if os.path.islink(f"/{link}"):
                (root / link).symlink_to(os.readlink(f"/{link}"))

    def add(self, path: str, *, owned: bool = True) -> None:
        """Copy one path (a symlink as a symlink, then what it points at); parents resolved."""
        if path in self.copied:
            return
        self.copied.add(path)
        if owned:
            owner = self.owners.of(path)
            if owner is None:
                raise SystemExit(f"image: no Debian package owns {path}; the bill of materials would miss it")
            self.packages.add(owner)
        parent = os.path.realpath(os.path.dirname(path))
        target = self.root / parent.lstrip("/") / os.path.basename(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(path):
            link = os.readlink(path)
            if not target.is_symlink():
                target.symlink_to(link)
            self.add(os.path.normpath(os.path.join(parent, link)), owned=owned)
        elif os.path.isfile(path):
            shutil.copy2(path, target)


def trimmed(path: str) -> bool:
    """A standard-library path under a TRIM entry: a top-level module or package, or a lib-dynload prefix."""
    if not path.startswith(STDLIB + "/"):
        return False
    rest = path[len(STDLIB) + 1 :]
    top = rest.split("/", 1)[0]
    return any(rest.startswith(t) if t.startswith("lib-dynload/") else top == t for t in TRIM)


def interpreter(root: Root) -> None:
    for package in PACKAGES:
        for path in root.owners.files(package):
            if not path.startswith(KEEP) or trimmed(path) or (os.path.isdir(path) and not os.path.islink(path)):
                continue
            root.add(path)
            if path.endswith(".py"):  # the bytecode Debian compiled at install (a read-only root never writes it)
                pyc = Path(path).parent / "__pycache__" / f"{Path(path).stem}.{sys.implementation.cache_tag}.pyc"
                if pyc.exists():
                    root.add(str(pyc), owned=False)


def elf_files(top: Path) -> Iterator[Path]:
    for path in top.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


LDD_LINE = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$")


def libraries(binaries: Iterable[Path]) -> set[str]:
    """The shared libraries the binaries load, by `ldd` (the dynamic loader's own answer)."""
    needed: set[str] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if "not found" in line:
                raise SystemExit(f"image: {binary} needs a library the build stage lacks: {line.strip()}")
            m = LDD_LINE.match(line)
            if m:
                needed.add(m.group(1))
    return needed


def venv(root: Root, source: Path) -> None:
    """Copy /venv, extension modules stripped, build sources dropped."""
    target = root.root / source.relative_to("/")
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns(*(f"*{e}" for e in VENV_DROP)))
    for so in elf_files(target):
        subprocess.run(["strip", "--strip-unneeded", str(so)], check=True)


def extras(root: Root) -> None:
    for name, text in ETC.items():
        (root.root / name).parent.mkdir(parents=True, exist_ok=True)
        (root.root / name).write_text(text)
    for name in EMPTY_DIRS:
        (root.root / name).mkdir(parents=True, exist_ok=True)
    (root.root / "tmp").chmod(0o1777)
    (root.root / "home/nonroot").chmod(0o755)
    os.chown(root.root / "home/nonroot", UID, UID)
    root.add(CA_BUNDLE, owned=False)
    root.packages.add("ca-certificates")


def package_status(root: Path, packages: Iterable[str]) -> None:
    """dpkg's status stanza of each package, one file each, where scanners of distroless images look."""
    folder = root / STATUS_D
    folder.mkdir(parents=True, exist_ok=True)
    for package in packages:
        stanza = subprocess.run(["dpkg-query", "-s", package], capture_output=True, text=True, check=True).stdout
        (folder / package).write_text(stanza)


def deb_component(package: str) -> dict[str, object]:
    fields = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}\t${Architecture}\t${Maintainer}\t${Homepage}", package],
        capture_output=True, text=True, check=True,
    ).stdout.split("\t")  # fmt: skip
    version, arch, maintainer, homepage = fields
    component: dict[str, object] = {
        "type": "library",
        "bom-ref": f"pkg:deb/debian/{package}@{version}?arch={arch}",
        "name": package,
        "version": version,
        "purl": f"pkg:deb/debian/{package}@{version}?arch={arch}&distro=debian-12",
        "supplier": {"name": maintainer},
    }
    if homepage:
        component["externalReferences"] = [{"type": "website", "url": homepage}]
    licenses = debian_licenses(package)
    if licenses:
        component["licenses"] = [{"license": {"name": name}} for name in licenses]
    return component


def debian_licenses(package: str) -> list[str]:
    """The License fields of a machine-readable (DEP-5) copyright file, in order, without repeats."""
    path = Path("/usr/share/doc") / package / "copyright"
    if not path.exists():
        return []
    names: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("License:"):
            name = line.removeprefix("License:").strip()
            if name and name not in names:
                names.append(name)
    return names


def sbom(python_sbom: Path, packages: Iterable[str]) -> dict[str, object]:
    """cyclonedx-py's bill of /venv, with the Debian packages the rest of the image came from."""
    bom: dict[str, object] = json.loads(python_sbom.read_text())
    components = bom.setdefault("components", [])
    assert isinstance(components, list)
    components.extend(deb_component(p) for p in sorted(packages))
    return bom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", type=Path, default=Path("/venv"))
    parser.add_argument("--root", type=Path, required=True, help="an empty directory to fill")
    parser.add_argument("--python-sbom", type=Path, required=True, help="cyclonedx-py's CycloneDX JSON of --venv")
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    if any(args.root.iterdir()):
        raise SystemExit(f"image: {args.root} is not empty")
    root = Root(args.root, Owners())
    interpreter(root)
    venv(root, args.venv)
    extras(root)
    for library in sorted(libraries(elf_files(args.root))):
        if not library.startswith(f"{args.root.resolve()}/"):  # a wheel's own bundled libraries are in /venv already
            root.add(library)
    package_status(args.root, sorted(root.packages))
    bom = sbom(args.python_sbom, root.packages)
    (args.root / SBOM_PATH).parent.mkdir(parents=True, exist_ok=True)
    (args.root / SBOM_PATH).write_text(json.dumps(bom, indent=2) + "\n")
    print(f"image root: {len(root.copied)} paths from {len(root.packages)} Debian packages + {args.venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
