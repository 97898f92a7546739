"""Reading manifests for `gpu-policy check` and `mutate`: files, folders, stdin; YAML or JSON.

Each object becomes the AdmissionReview request the API server would send for it.

Every object is tagged with where it came from (file and 1-based document number, plus
the item index inside a `kind: List`), because an error that does not say where is
an error nobody can fix.
"""

from __future__ import annotations

import re
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


def _files(path: str) -> Iterator[tuple[str, str] | InputError]:
    if path == "-":
        yield "<stdin>", sys.stdin.read()
        return
    p = Path(path)
    if p.is_dir():
        found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in SUFFIXES)
        if not found:
            yield InputError(path, "folder holds no .yaml, .yml or .json files")
        for f in found:
            yield from _files(str(f))
        return
    try:
        yield str(p), p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        yield InputError(path, f"cannot read: {getattr(exc, 'strerror', None) or exc}")


def read(paths: list[str]) -> Iterator[Document | InputError]:
    for entry in (f for path in paths for f in _files(path)):
        if isinstance(entry, InputError):
            yield entry
            continue
        source, text = entry
        yield from _documents(source, text)


def _documents(source: str, text: str) -> Iterator[Document | InputError]:
    """Each document of `text` (JSON is YAML too), composed node by node so that every object
    keeps where its fields are in the file (SARIF and JUnit results point at lines)."""
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
            yield from _objects(source, index, obj, node)
    finally:
        loader.dispose()


def _objects(source: str, index: int, obj: Any, node: Any) -> Iterator[Document | InputError]:
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
                yield Document(source, index, i, item, nodes[i] if i < len(nodes) else None)
            else:
                yield InputError(f"{source} (document {index}, items[{i}])", "expected an object")
        return
    yield Document(source, index, None, obj, node)


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
