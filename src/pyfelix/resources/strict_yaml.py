"""The strict YAML loader: PyYAML's, reading YAML 1.1 as Kubernetes and calicoctl do, with
duplicate keys refused, timestamps kept as strings and hostile input bounded (MAX_DEPTH, the
alias expansion budget). ``fast_yaml`` reads most files without it; this module, and PyYAML,
are imported on the first file that needs it (loader.parse_strict)."""

from __future__ import annotations

from typing import Any

import yaml

from pyfelix.errors import Problem
from pyfelix.resources.parsing import (
    ALIAS_EXPANSION_PER_CHAR,
    ALIAS_EXPANSION_SLACK,
    MAX_DEPTH,
    Parsed,
)


class _Unbounded(yaml.YAMLError):
    """A document nested too deeply or expanding too far through aliases."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


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


def _item_lines(node: yaml.Node) -> list[int]:
    """Start lines of a sequence document's items, or of a List document's ``items``."""
    if isinstance(node, yaml.SequenceNode):
        return [item.start_mark.line + 1 for item in node.value]
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if getattr(key, "value", None) == "items" and isinstance(value, yaml.SequenceNode):
                return [item.start_mark.line + 1 for item in value.value]
    return []


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


def yaml_problem(source: str, exc: Exception, text: str) -> Problem:
    """The problem a YAML error (PyYAML's) makes, at its line."""
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
