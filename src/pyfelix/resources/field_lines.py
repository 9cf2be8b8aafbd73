"""The line a field of a document sits on, for problems that name a field.

The loaders keep each document's first line only (the fast parsers give no positions, and
almost every document is valid). When a problem names a field (``spec.ingress[1].ports[0]``),
its file is composed again with PyYAML, which keeps every node's position, and the problem is
moved to the line of that field: the key's, or the item's in a list. A file over
MAX_COMPOSE_BYTES keeps its documents' lines (composing it would take seconds for one line).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs
import yaml

from pyfelix.errors import Problem

#: The largest file composed again to find its fields' lines.
MAX_COMPOSE_BYTES = 4 << 20
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _steps(path: str) -> list[str | int]:
    return [int(index) if index else key for key, index in _STEP.findall(path)]


def _roots(text: str) -> list[yaml.Node]:
    """Each document's node, and each item of a List's ``items`` (a document of its own)."""
    roots: list[yaml.Node] = []
    for document in yaml.compose_all(text, Loader=_Loader):
        if document is None:
            continue
        roots.append(document)
        if isinstance(document, yaml.MappingNode):
            for key, value in document.value:
                if key.value == "items" and isinstance(value, yaml.SequenceNode):
                    roots.extend(value.value)
        elif isinstance(document, yaml.SequenceNode):
            roots.extend(document.value)
    return roots


def _line_of(root: yaml.Node, steps: Sequence[str | int]) -> int | None:
    """The 1-based line of the field ``steps`` leads to in ``root`` (as far as it exists)."""
    node, line = root, None
    for step in steps:
        if isinstance(node, yaml.MappingNode) and isinstance(step, str):
            found = next(((k, v) for k, v in node.value if k.value == step), None)
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            if step >= len(node.value):
                break
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            break
    return line


def with_field_lines(problems: Sequence[Problem], texts: dict[str, str]) -> list[Problem]:
    """``problems``, each that names a field of a document in one of ``texts`` (source ->
    text) moved to that field's line."""
    out = list(problems)
    by_source: dict[str, list[int]] = {}
    for index, problem in enumerate(out):
        if problem.field and problem.line is not None and problem.source in texts:
            by_source.setdefault(problem.source, []).append(index)
    for source, indexes in by_source.items():
        text = texts[source]
        if len(text) > MAX_COMPOSE_BYTES:
            continue
        try:
            roots = _roots(text)
        except yaml.YAMLError:
            continue
        starts = sorted((root.start_mark.line + 1, i) for i, root in enumerate(roots))
        for index in indexes:
            problem = out[index]
            assert problem.line is not None
            # The root that starts at the document's line (or the first after it: a line
            # counted from a comment or "---" above the content) and that the problem's
            # resource names: a JSON file's documents all count from its first line, a
            # List's items among them.
            after = [roots[i] for start, i in starts if start >= problem.line]
            if not after:
                continue
            root = _named_root(after, problem.resource)
            line = _line_of(root, _steps(problem.field))
            if line is None and root is not after[0]:
                line = root.start_mark.line + 1
            if line is not None:
                out[index] = attrs.evolve(problem, line=line)
    return out


def _named_root(roots: Sequence[yaml.Node], ident: str | None) -> yaml.Node:
    """The first of ``roots`` whose metadata names the resource ``ident`` (``Kind/name`` or
    ``Kind/namespace/name``), else the first."""
    parts = (ident or "").split("/")
    if len(parts) not in (2, 3) or not parts[-1]:
        return roots[0]
    namespaces = ("", parts[1]) if len(parts) == 3 else None
    for root in roots:
        names = _metadata_names(root)
        if names is None or names[1] != parts[-1]:
            continue
        if namespaces is None or names[0] in namespaces:
            return root
    return roots[0]


def _metadata_names(root: yaml.Node) -> tuple[str, str] | None:
    """A document's metadata namespace ("" when it has none) and name, as written."""
    if not isinstance(root, yaml.MappingNode):
        return None
    metadata = next((v for k, v in root.value if k.value == "metadata"), None)
    if not isinstance(metadata, yaml.MappingNode):
        return None
    found = {k.value: v.value for k, v in metadata.value if isinstance(v, yaml.ScalarNode)}
    name = found.get("name")
    if not isinstance(name, str):
        return None
    namespace = found.get("namespace", "")
    return (namespace if isinstance(namespace, str) else "", name)


def sources_of(problems: Iterable[Problem]) -> set[str]:
    """The files whose problems name a field (those whose text ``with_field_lines`` needs)."""
    return {p.source for p in problems if p.field and p.line is not None}


def read_texts(sources: Iterable[str]) -> dict[str, str]:
    """The text of each source that can still be read (a problem's file)."""
    from pyfelix.resources.loader import read_manifest  # noqa: PLC0415

    texts = {}
    for source in sources:
        try:
            texts[source] = read_manifest(Path(source))
        except (OSError, UnicodeDecodeError):
            continue
    return texts
