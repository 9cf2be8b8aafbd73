"""Read calicoctl-format manifests from files and directories.

Accepted: multi-document YAML, JSON, a document that is a plain list of resources (what
``calicoctl get`` prints for several), and ``List``/``<Kind>List`` documents with ``items``.
Every problem is reported with the file, the line where the document (or list item) starts,
the resource and the field path. A file that does not parse at all yields no resources and is
flagged ``unparsable`` so that a watcher can keep the resources it held before.

Hostile input is bounded: a file larger than MAX_FILE_BYTES is refused unread, documents nested
more than MAX_DEPTH levels are refused, and YAML aliases may not expand a document beyond a
budget proportional to its text (an alias bomb of a few hundred bytes would otherwise grow
without bound).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from pyfelix.errors import Problem
from pyfelix.resources.fast_yaml import parse_plain
from pyfelix.resources.meta import (
    MANIFEST_KINDS,
    Resource,
    kind_for,
    known_kinds,
    load_document,
    resource_ident,
)
from pyfelix.resources.schema import JSON

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: No manifest comes close (250k endpoints are about 100 MB across many files).
MAX_FILE_BYTES = 256 << 20
#: Calico's resources nest about ten levels; Kubernetes objects with status about twenty.
MAX_DEPTH = 64
#: Values built per character of YAML text, plus a constant: a document without aliases builds
#: fewer values than it has characters; anchors reused sensibly stay far below this.
ALIAS_EXPANSION_PER_CHAR = 4
ALIAS_EXPANSION_SLACK = 100_000


class _Unbounded(yaml.YAMLError):
    """A document nested too deeply or expanding too far through aliases."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


@attrs.frozen
class Located:
    """A resource and where it was read from."""

    resource: Resource
    source: str
    line: int | None

    @property
    def key(self) -> tuple[str, str, str]:
        r = self.resource
        return (r.KIND, r.namespace, r.name)

    @property
    def ident(self) -> str:
        return self.resource.ident


Identity = tuple[str, str, str]
#: Turns some documents straight into what the caller wants (the dry-run takes plain
#: endpoints' model values), giving their identity (Kind, namespace, name) and that value, or
#: None to have the document loaded as a resource. It must accept only valid documents, and
#: the tuples its ``Digest`` made of documents (a parsed document is a dict, never a tuple).
DirectDecoder = Callable[[Any], tuple[Identity, object] | None]
#: The half of a direct decoder that can run where the documents are parsed (a worker
#: process): a document's fields, checked, as a tuple that marshals, or None to leave it as is.
Digest = Callable[[dict[str, Any]], tuple[Any, ...] | None]


@attrs.frozen
class Direct:
    """A document a direct decoder took: its identity, what it gave, where it was read."""

    key: Identity
    value: object
    source: str
    line: int | None

    @property
    def ident(self) -> str:
        return resource_ident(*self.key)


@attrs.frozen
class LoadResult:
    resources: tuple[Located, ...] = ()
    problems: tuple[Problem, ...] = ()
    unparsable: frozenset[str] = frozenset()
    #: The documents a direct decoder took (see load_text), in load order.
    direct: tuple[Direct, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


#: A file's parsed documents: each with its start line and its items' start lines.
Parsed = list[tuple[JSON, int, list[int]]]


# libyaml's parser when PyYAML was built with it (PyPI wheels are): ~10x faster on big inputs.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_TAG = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _TAG + "str", _TAG + "map", _TAG + "seq"
_PLAIN_SCALARS = frozenset(_TAG + t for t in ("int", "float", "bool", "null"))
_SPECIAL_KEYS = frozenset((_TAG + "merge", _TAG + "value"))


class _StrictLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that rejects duplicate keys and keeps timestamps as strings (as Go does).

    ``construct_fast`` builds plain documents (maps, lists and str/int/float/bool/null
    scalars, what manifests are made of) in one recursive pass, several times faster than
    PyYAML's general constructor; any other node (merge keys, complex keys, explicit tags,
    recursive anchors) goes to that constructor, with the same results and errors.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._tags: dict[str, str] = {}
        self._budget = ALIAS_EXPANSION_PER_CHAR * len(stream) + ALIAS_EXPANSION_SLACK

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        """The implicit tag of a scalar, remembered per value: manifests repeat the same
        words (kinds, versions, protocols) on every document, and each resolution is a
        series of regular expressions."""
        if kind is yaml.ScalarNode and implicit[0] and not self.yaml_path_resolvers:
            tag = self._tags.get(value)
            if tag is None:
                tag = self._tags[value] = super().resolve(kind, value, implicit)
            return tag
        resolved: str = super().resolve(kind, value, implicit)
        return resolved

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A key written twice is an error; keys brought in by a merge (``<<``) may be
        overridden, as YAML intends."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag in _SPECIAL_KEYS or type(key_node) is not yaml.ScalarNode:
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _duplicate(key, key_node)
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_fast(self, node: yaml.Node) -> Any:
        """The document ``node`` holds (a fresh object per alias use; nothing mutates them).

        Every value built is charged to the loader's budget; what PyYAML's constructor builds
        (it shares aliased objects) is measured afterwards, as a tree, against the same."""
        try:
            self._general = False
            data = self._build(node, set(), 0)
            if self._general:
                self._charge_tree(data, node)
            return data
        finally:
            self.constructed_objects: dict[yaml.Node, Any] = {}
            self.recursive_objects: dict[yaml.Node, None] = {}

    def _construct_general(self, node: yaml.Node) -> Any:
        self._general = True
        return self.construct_object(node, deep=True)

    def _charge(self, node: yaml.Node, count: int = 1) -> None:
        self._budget -= count
        if self._budget < 0:
            raise _Unbounded("aliases expand the document too far", node.start_mark)

    def _charge_tree(self, data: Any, node: yaml.Node) -> None:
        """Charge the tree ``data`` unfolds to (shared objects count every time they appear),
        and check its depth, without recursion."""
        stack = [(data, 0)]
        while stack:
            value, depth = stack.pop()
            self._charge(node)
            if depth > MAX_DEPTH:
                raise _Unbounded(f"nested more than {MAX_DEPTH} levels deep", node.start_mark)
            if isinstance(value, dict):
                stack.extend((v, depth + 1) for v in value.values())
            elif isinstance(value, list):
                stack.extend((v, depth + 1) for v in value)

    def _build(self, node: yaml.Node, active: set[int], depth: int) -> Any:
        # The budget charge is inlined: this runs for every node of every document.
        self._budget -= 1
        if self._budget < 0:
            raise _Unbounded("aliases expand the document too far", node.start_mark)
        tag = node.tag
        if tag == _STR and type(node) is yaml.ScalarNode:
            return node.value
        if depth > MAX_DEPTH:
            raise _Unbounded(f"nested more than {MAX_DEPTH} levels deep", node.start_mark)
        if id(node) in active:
            return self._construct_general(node)
        if tag == _MAP and type(node) is yaml.MappingNode:
            active.add(id(node))
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if type(key_node) is not yaml.ScalarNode or key_node.tag in _SPECIAL_KEYS:
                    # A merge or a complex key: PyYAML's constructor builds this mapping.
                    active.discard(id(node))
                    return self._construct_general(node)
                key = (
                    key_node.value
                    if key_node.tag == _STR
                    else self._build(key_node, active, depth + 1)
                )
                if key in result:
                    raise _duplicate(key, key_node)
                result[key] = self._build(value_node, active, depth + 1)
            active.discard(id(node))
            return result
        if tag == _SEQ and type(node) is yaml.SequenceNode:
            active.add(id(node))
            items = [self._build(item, active, depth + 1) for item in node.value]
            active.discard(id(node))
            return items
        if tag in _PLAIN_SCALARS and type(node) is yaml.ScalarNode:
            return self.yaml_constructors[tag](self, node)
        return self._construct_general(node)


def _duplicate(key: Any, key_node: yaml.Node) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        None, None, f"duplicate key {key!r}", key_node.start_mark
    )


_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _is_list_document(data: JSON) -> bool:
    if not (
        isinstance(data, Mapping)
        and isinstance(data.get("kind"), str)
        and data["kind"].endswith("List")
        and "items" in data
    ):
        return False
    known_kinds()
    return data["kind"] not in MANIFEST_KINDS


def _list_item_kind(list_kind: str, api_version: JSON) -> type[Resource] | None:
    """The kind of a typed list's items (``NetworkPolicyList`` of networking.k8s.io/v1)."""
    return kind_for(list_kind.removesuffix("List"), api_version)


def _expand(data: JSON, line: int, item_lines: list[int]) -> Iterator[tuple[JSON, int]]:
    """Yield (document, line) for each resource a parsed document holds."""
    if data is None:
        return
    if isinstance(data, list):
        for index, item in enumerate(data):
            yield item, item_lines[index] if index < len(item_lines) else line
        return
    if _is_list_document(data):
        items = data["items"]
        if not isinstance(items, list):
            yield {"kind": data["kind"], "items": items}, line
            return
        default_kind = _list_item_kind(data["kind"], data.get("apiVersion"))
        for index, item in enumerate(items or []):
            doc = item
            if isinstance(item, Mapping) and "kind" not in item and default_kind:
                kind = default_kind.manifest_kind()
                doc = {"apiVersion": default_kind.API_VERSION, **item, "kind": kind}
            yield doc, item_lines[index] if index < len(item_lines) else line
        return
    yield data, line


def _item_lines(node: yaml.Node) -> list[int]:
    """Start lines of a sequence document's items, or of a List document's ``items``."""
    if isinstance(node, yaml.SequenceNode):
        return [item.start_mark.line + 1 for item in node.value]
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if getattr(key, "value", None) == "items" and isinstance(value, yaml.SequenceNode):
                return [item.start_mark.line + 1 for item in value.value]
    return []


def parse_yaml(text: str) -> Parsed:
    """Every document with its start line; raises yaml.YAMLError on any syntax problem.
    yaml-rs reads what it reads as YAML 1.1 does (fast_yaml.py), the strict loader the rest."""
    plain = parse_plain(text)
    if plain is not None:
        return plain
    return parse_strict(text)


def parse_strict(text: str) -> Parsed:
    """``parse_yaml`` by PyYAML alone: the reference reading, and every error's."""
    loader = _StrictLoader(text)
    documents: Parsed = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_fast(node)
            documents.append((data, node.start_mark.line + 1, _item_lines(node)))
    finally:
        loader.dispose()
    return documents


def _parse(text: str, source: str) -> Parsed:
    if source.endswith(".json"):
        data = json.loads(text)
        return [(data, 1, [])]
    return parse_yaml(text)


def _parse_error(source: str, exc: Exception, text: str) -> Problem:
    if isinstance(exc, json.JSONDecodeError):
        return Problem(source, f"cannot parse JSON: {exc.msg}", exc.lineno)
    if isinstance(exc, yaml.reader.ReaderError):
        # A character YAML does not allow: PyYAML gives its offset, not its line.
        at = text.count("\n", 0, exc.position) + 1
        character = exc.character if isinstance(exc.character, str) else chr(exc.character)
        reason = f"unacceptable character {character!r} (control characters are not allowed)"
        return Problem(source, f"cannot parse YAML: {reason}", at)
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    reason = getattr(exc, "problem", None) or str(exc)
    return Problem(source, f"cannot parse YAML: {reason}", line)


def load_text(
    text: str, source: str = "<input>", direct: DirectDecoder | None = None
) -> LoadResult:
    """Load the resources in one file's text (duplicates within it are reported). With
    ``direct``, the documents it takes are in the result's ``direct``, not its resources."""
    parsed = parse_text(text, source)
    if isinstance(parsed, LoadResult):
        return parsed
    return load_parsed(parsed, source, direct)


def parse_text(text: str, source: str) -> Parsed | LoadResult:
    """The documents of a file's text, or the result of a file that does not parse."""
    try:
        return _parse(text, source)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        problem = _parse_error(source, exc, text)
        return LoadResult(problems=(problem,), unparsable=frozenset({source}))
    except RecursionError:
        # JSON's decoder (and PyYAML's composer) recurse; deep input ends here, not in a crash.
        problem = Problem(source, f"cannot parse: nested more than {MAX_DEPTH} levels deep")
        return LoadResult(problems=(problem,), unparsable=frozenset({source}))


def load_parsed(documents: Parsed, source: str, direct: DirectDecoder | None = None) -> LoadResult:
    """``load_text`` of a file parsed already (by ``parse_text``, here or in a worker)."""
    entries: list[Located | Direct] = []
    problems: list[Problem] = []
    for data, line, item_lines in documents:
        if type(data) is tuple and direct is not None:
            # A plain endpoint's checked fields (a parsed document is never a tuple).
            taken = direct(data)
            if taken is not None:
                entries.append(Direct(taken[0], taken[1], source, line))
                continue
        for doc, doc_line in _expand(data, line, item_lines):
            if direct is not None and type(doc) in (dict, tuple):
                taken = direct(doc)
                if taken is not None:
                    entries.append(Direct(taken[0], taken[1], source, doc_line))
                    continue
            try:
                resource, found = load_document(doc, source, doc_line)
            except RecursionError:
                resource = None
                found = [Problem(source, f"nested more than {MAX_DEPTH} levels deep", doc_line)]
            problems.extend(found)
            if resource is not None:
                entries.append(Located(resource, source, doc_line))
    return _without_duplicates([entries], problems)


def read_manifest(path: Path) -> str:
    """A manifest file's text; raises OSError (also for one over MAX_FILE_BYTES, which is not
    read) or UnicodeDecodeError."""
    with path.open("rb") as file:
        if os.fstat(file.fileno()).st_size > MAX_FILE_BYTES:
            raise OSError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
    return data.decode("utf-8")


def _without_duplicates(
    files: Iterable[Iterable[Located | Direct]],
    problems: list[Problem],
    unparsable: frozenset[str] = frozenset(),
) -> LoadResult:
    """Keep the first of each Kind/namespace/name (files in order, each file's entries in
    order); every later one is an error, after ``problems``."""
    first: dict[Identity, Located | Direct] = {}
    duplicates: list[Problem] = []
    kept: list[Located] = []
    taken: list[Direct] = []
    for entries in files:
        for item in entries:
            earlier = first.get(item.key)
            if earlier is not None:
                duplicates.append(duplicate_problem(item, earlier.source, earlier.line))
                continue
            first[item.key] = item
            if isinstance(item, Located):
                kept.append(item)
            else:
                taken.append(item)
    return LoadResult(tuple(kept), (*problems, *duplicates), unparsable, tuple(taken))


def duplicate_problem(item: Located | Direct, source: str, line: int | None) -> Problem:
    """``item`` defines again what ``source`` (at ``line``) defined first."""
    where = source if line is None else f"{source}:{line}"
    return Problem(
        item.source,
        f"duplicate resource, already defined at {where}",
        item.line,
        item.ident,
    )


def escapes(root: Path, path: Path) -> bool:
    """Whether ``path`` below ``root`` is (or goes through) a symlink that leads out of it:
    the agent runs as root, so a link to /etc/shadow must not be read. Links that stay inside
    (a Kubernetes ConfigMap's ..data links) are followed."""
    try:
        return not path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return True


def manifest_files_and_links(path: Path) -> tuple[list[Path], list[Path]]:
    """(manifest files below directory ``path``, sorted, hidden ones skipped; the links among
    them that lead out of ``path``, which are left out). A file ``path`` is itself."""
    if not path.is_dir():
        return [path], []
    candidates = sorted(
        p
        for p in path.rglob("*")
        if p.suffix in MANIFEST_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
        and p.is_file()
    )
    outside = [p for p in candidates if escapes(path, p)]
    return [p for p in candidates if p not in set(outside)], outside


def manifest_files(path: Path) -> list[Path]:
    """The manifest files of ``path`` (see manifest_files_and_links); links out are logged."""
    files, outside = manifest_files_and_links(path)
    for link in outside:
        log.warning("%s leads out of %s; not followed", link, path)
    return files


def manifest_sources(paths: Iterable[Path | str]) -> tuple[list[Path], list[Problem]]:
    """The manifest files of files and directories, in load order, and the problems of those
    that cannot be loaded at all (missing paths, links out of a directory)."""
    files: list[Path] = []
    problems: list[Problem] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            problems.append(Problem(str(path), "no such file or directory"))
            continue
        found, outside = manifest_files_and_links(path)
        problems.extend(
            Problem(str(link), f"a link out of {path}; not followed") for link in outside
        )
        files.extend(found)
    return files, problems


def load_file(file: Path, direct: DirectDecoder | None = None) -> LoadResult:
    """One manifest file (duplicates within it are reported)."""
    try:
        text = read_manifest(file)
    except (OSError, UnicodeDecodeError) as exc:
        problem = Problem(str(file), f"cannot read: {exc}")
        return LoadResult(problems=(problem,), unparsable=frozenset({str(file)}))
    return load_text(text, str(file), direct)


def merge(results: Iterable[LoadResult], problems: Iterable[Problem] = ()) -> LoadResult:
    """Files' results as one load: duplicates across files are errors too."""
    found = list(problems)
    unparsable: set[str] = set()
    files: list[tuple[Located | Direct, ...]] = []
    for result in results:
        files.append((*result.resources, *result.direct))
        found.extend(result.problems)
        unparsable.update(result.unparsable)
    return _without_duplicates(files, found, frozenset(unparsable))


def load_paths(paths: Iterable[Path | str], direct: DirectDecoder | None = None) -> LoadResult:
    """Load files and directories; duplicates across files are errors too."""
    files, problems = manifest_sources(paths)
    return merge((load_file(file, direct) for file in files), problems)
