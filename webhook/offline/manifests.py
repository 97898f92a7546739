"""Reading manifests for `gpu-policy check` and `mutate`: files, folders, stdin; YAML or JSON; and
Helm charts, rendered by helm where they live.

Each object becomes the AdmissionReview request the API server would send for it.

Every object is tagged with where it came from (file and 1-based document number, plus
the item index inside a `kind: List`), because an error that does not say where is
an error nobody can fix. What helm rendered is tagged with the template helm names above it
(`# Source: <chart>/templates/<file>`), mapped into the chart's folder when it was rendered here,
so a result (SARIF included) points at the file a person edits, not at `<stdin>`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..admission.review import V1, Request
from ..policy import group_of

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    source: str
    index: int  # 1-based document number within the file
    item: int | None  # 0-based index inside a List, if any
    obj: Any
    node: yaml.Node | None = None  # the YAML node it was built from: where each field is (line_of)

    @property
    def where(self) -> str:
        text = f"{self.source} (document {self.index}"
        if self.item is not None:
            text += f", items[{self.item}]"
        return text + ")"

    @property
    def line(self) -> int:
        """1-based line where the object starts in its file (1 when unknown)."""
        return self.node.start_mark.line + 1 if self.node is not None else 1

    def line_of(self, path: str) -> int:
        """1-based line of the field at `path` (a violation's field path, such as
        `spec.containers[0].env[1]`), or of the nearest enclosing field found."""
        node, line = self.node, self.line
        for m in _STEP.finditer(path):
            name, index, quoted = m.groups()
            if isinstance(node, yaml.MappingNode) and index is None:
                key = name if name is not None else quoted.replace('\\"', '"')
                found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
                if found is None:
                    break
                line, node = found[0].start_mark.line + 1, found[1]
            elif isinstance(node, yaml.SequenceNode) and index is not None and int(index) < len(node.value):
                node = node.value[int(index)]
                line = node.start_mark.line + 1
            else:
                break
        return line


# One step of a field path: `.name`, `[0]` or `["nvidia.com/gpu"]`.
_STEP = re.compile(r'\.?([A-Za-z_$][\w$-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]')


@dataclass(frozen=True, slots=True)
class InputError:
    where: str
    message: str
    template: bool = False  # the file does not parse as YAML and holds `{{`: a Helm template
    line: int = 1  # where in the file the problem is (SARIF's region), when known

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True, slots=True)
class Charts:
    """How a Helm chart met among the inputs is rendered: the helm binary (None: not found), the
    values files given for it, and the release namespace."""

    helm: str | None
    values: tuple[str, ...] = ()
    namespace: str = "default"
    release: str = "check"

    @staticmethod
    def found(values: tuple[str, ...] = (), namespace: str | None = None) -> Charts:
        """helm from $HELM, else from PATH."""
        return Charts(os.environ.get("HELM") or shutil.which("helm"), values, namespace or "default")


HELM_TIMEOUT = 120.0  # seconds one `helm template` may take


def chart_of(path: Path) -> Path | None:
    """The chart folder `path` belongs to, when it is what a chart is made of: the folder itself
    (it holds Chart.yaml), its Chart.yaml or values*.yaml, or a file under its templates/. A file
    elsewhere in a chart (crds/, a test fixture) is read as it is."""
    if path.is_dir():
        return path if (path / "Chart.yaml").is_file() else None
    parent = path.parent
    if (parent / "Chart.yaml").is_file() and (path.name == "Chart.yaml" or path.name.startswith("values")):
        return parent
    for up in path.parents:
        if up.name == "templates" and (up.parent / "Chart.yaml").is_file():
            return up.parent
    return None


def _render(chart: Path, charts: Charts) -> tuple[str, str] | InputError:
    """`helm template` of `chart`: (the chart's folder, the rendered stream), or why not."""
    if charts.helm is None:
        return InputError(
            str(chart),
            "a Helm chart: judging it needs helm (on PATH, or HELM=/path/to/helm); or exclude the chart's folder",
        )
    command = [charts.helm, "template", charts.release, str(chart), "--namespace", charts.namespace]
    for values in charts.values:
        command += ["--values", values]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return InputError(str(chart), f"helm template failed: {exc}")
    if done.returncode != 0:
        said = " ".join(done.stderr.replace("Use --debug flag to render out invalid YAML", "").split())
        said = (said[:597] + "...") if len(said) > 600 else said or f"exit status {done.returncode}"
        return InputError(str(chart), f"helm template failed: {said}")
    return str(chart), done.stdout


def _files(path: str, charts: Charts | None = None) -> Iterator[tuple[str, str] | InputError]:
    if path == "-":
        yield "<stdin>", sys.stdin.read()
        return
    p = Path(path)
    if charts is not None and chart_of(p) == p:
        yield _render(p, charts)
        return
    if p.is_dir():
        found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in SUFFIXES)
        if not found:
            yield InputError(path, "folder holds no .yaml, .yml or .json files")
        rendered: set[Path] = set()
        for f in found:
            chart = chart_of(f) if charts is not None else None
            if chart is None:
                yield from _files(str(f), charts)
            elif charts is not None and chart not in rendered:  # a chart: rendered once, not file by file
                rendered.add(chart)
                yield _render(chart, charts)
        return
    try:
        yield str(p), p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        yield InputError(path, f"cannot read: {getattr(exc, 'strerror', None) or exc}")


def read(paths: list[str], charts: Charts | None = None) -> Iterator[Document | InputError]:
    """Every document of `paths`. With `charts`, a chart (its folder, or a file it is made of, as
    a pre-commit hook passes them) is rendered once by helm instead of read file by file."""
    seen: set[Path] = set()
    for path in paths:
        if charts is not None and path != "-":
            chart = chart_of(Path(path))
            if chart is not None:
                if chart in seen:
                    continue
                seen.add(chart)
                path = str(chart)
        for entry in _files(path, charts):
            if isinstance(entry, InputError):
                yield entry
                continue
            source, text = entry
            folder = Path(source) if charts is not None and Path(source).is_dir() else None
            yield from _documents(source, text, folder)


# What helm writes above each document it renders: the template it came from.
_HELM_SOURCE = re.compile(r"^# Source: (\S.*?)\s*$", re.MULTILINE)


def _templates(text: str, chart: Path | None) -> list[tuple[int, str]]:
    """(0-based line, file) of each `# Source:` line, the file mapped into `chart` when given
    (helm names it `<chart name>/templates/...`; subcharts `<chart name>/charts/<sub>/...`)."""
    out = []
    for m in _HELM_SOURCE.finditer(text):
        name = m[1]
        if chart is not None and "/" in name:
            name = str(chart / name.split("/", 1)[1])
        out.append((text.count("\n", 0, m.start()), name))
    return out


def _documents(source: str, text: str, chart: Path | None = None) -> Iterator[Document | InputError]:
    """Each document of `text` (JSON is YAML too), composed node by node so that every object
    keeps where its fields are in the file (SARIF and JUnit results point at lines). A document
    helm rendered is tagged with its template and its number there (its lines are the render's,
    not the template's: results point at the file)."""
    templates = _templates(text, chart) if "# Source: " in text else []
    per_template: dict[str, int] = {}
    loader = yaml.SafeLoader(text)
    try:
        index = 0
        while True:
            index += 1
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
                obj = loader.construct_document(node)
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
                problem = getattr(exc, "problem", None) or str(exc)
                yield InputError(
                    f"{source} (document {index})",
                    f"not valid YAML{line}: {problem}",
                    "{{" in text,
                    mark.line + 1 if mark is not None else 1,
                )
                return  # the parser cannot resynchronise after an error
            start = node.start_mark.line if node is not None else 0
            above = [name for at, name in templates if at < start]
            if above and obj is not None:
                name = above[-1]
                per_template[name] = per_template.get(name, 0) + 1
                yield from _objects(name, per_template[name], obj, node, lines=False)
                continue
            yield from _objects(source, index, obj, node)
    finally:
        loader.dispose()


def _objects(source: str, index: int, obj: Any, node: Any, lines: bool = True) -> Iterator[Document | InputError]:
    """The objects of one document (a List's items each); `lines` False: the node's lines are not
    the source's (a helm render), so no line is claimed."""
    if obj is None:
        return  # an empty document ("---" at the end) is not an object
    if not isinstance(obj, Mapping):
        yield InputError(f"{source} (document {index})", f"expected an object, got {type(obj).__name__}")
        return
    if obj.get("kind") == "List" or (isinstance(obj.get("kind"), str) and obj["kind"].endswith("List")):
        items = obj.get("items")
        if not isinstance(items, list):
            yield InputError(f"{source} (document {index})", "items: must be a list in a List")
            return
        nodes: list[Any] = next((v.value for k, v in node.value if getattr(k, "value", None) == "items"), [])
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                yield Document(source, index, i, item, nodes[i] if lines and i < len(nodes) else None)
            else:
                yield InputError(f"{source} (document {index}, items[{i}])", "expected an object")
        return
    yield Document(source, index, None, obj, node if lines else None)


class NamespaceMismatch(ValueError):
    """`-n` names another namespace than the object's own: kubectl refuses to apply it."""


def review_request(doc: Document, namespace: str | None) -> Request:
    """The AdmissionReview request the API server would send when `doc` is created.

    `namespace` (`-n`) only fills a missing metadata.namespace, as kubectl does; a conflicting
    explicit namespace raises NamespaceMismatch with kubectl's own words.
    """
    obj = doc.obj
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    own = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    if namespace and own and own != namespace:
        raise NamespaceMismatch(
            f'the namespace from the provided object "{own}" does not match the namespace "{namespace}". '
            f"You must pass '--namespace={own}' to perform this operation."
        )
    ns = own or namespace or "default"
    kind = obj.get("kind")
    return Request(
        api_version=V1,
        uid=str(uuid.uuid4()),
        group=group_of(obj.get("apiVersion")),
        kind=kind if isinstance(kind, str) else "",
        operation="CREATE",
        sub_resource="",
        namespace=ns,
        name=str(meta.get("name") or meta.get("generateName") or ""),
        object=obj,
        old_object=None,
    )


def not_a_manifest(doc: Document | InputError) -> bool:
    """What `check --manifests-only` skips: a Helm template, or a document without both
    apiVersion and kind (a chart's values.yaml or Chart.yaml, a tool's config)."""
    if isinstance(doc, InputError):
        return doc.template
    return not (isinstance(doc.obj, Mapping) and doc.obj.get("apiVersion") and doc.obj.get("kind"))
